"""Fixtures: gateways in front of the fake vLLM (on a real port), and a predictor at zero.

`run_gateway` (the real process) is shared with the e2e tests: reward_testing.gateway_fixtures."""

from __future__ import annotations

from contextlib import ExitStack

import httpx
import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.config.gateway import load_config
from reward_gateway.http.app import build_app
from reward_gateway.http.routes import Gateway
from reward_gateway.signals.metrics import GatewayMetrics
from reward_testing.fake_vllm import FakeVllm, serve_in_thread
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until


@pytest.fixture
def start_gateway(backend):
    """Start a gateway with REWARD_GATEWAY_* overrides; returns an httpx client bound to it."""
    with ExitStack() as stack:
        clients: list[httpx.Client] = []

        def start(upstream: str | None = None, **overrides: str) -> httpx.Client:
            env = {"REWARD_GATEWAY_UPSTREAM_URL": upstream or backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
            env.update({f"REWARD_GATEWAY_{key.upper()}": value for key, value in overrides.items()})
            gateway = Gateway(load_config(env), GatewayMetrics(CollectorRegistry()))
            app = build_app(gateway)
            url = stack.enter_context(serve_in_thread(app))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            client.gateway, client.app = gateway, app
            clients.append(client)
            return client

        start.clients = clients
        yield start


@pytest.fixture
def predictor(start_gateway):
    """A predictor at zero: a loopback port nothing listens on (connections refused, as a
    Service without endpoints refuses them) until ``predictor.up()`` starts a fake vLLM
    on that very port. At the end it comes up if it has not, and the requests the
    gateways still hold are answered, so no test leaves a request hanging."""
    with ExitStack() as stack:
        port = free_port()
        fakes: list[FakeVllm] = []

        def up() -> FakeVllm:
            if not fakes:
                fakes.append(FakeVllm())
                stack.enter_context(serve_in_thread(fakes[0].app, port=port))
            return fakes[0]

        up.port, up.url = port, f"http://127.0.0.1:{port}"
        yield up
        up()
        idle = lambda: all(client.gateway.load.requests == 0 for client in start_gateway.clients)  # noqa: E731
        wait_until("the held requests answered", idle, timeout=30, interval=0.05)
