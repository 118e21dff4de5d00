"""Fixtures: a fake vLLM on a real port, and gateways in front of it."""

from __future__ import annotations

from contextlib import ExitStack

import httpx
import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.app import build_app
from reward_gateway.config import load_config
from reward_gateway.gateway import Gateway
from reward_gateway.metrics import GatewayMetrics
from reward_testing.fake_vllm import FakeVllm, serve_in_thread


@pytest.fixture(scope="session")
def fake_vllm():
    fake = FakeVllm(delay_s=0.002)
    with serve_in_thread(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def backend(fake_vllm):
    fake_vllm.calls.clear()
    fake_vllm.healthy = True
    fake_vllm.misbehaviour = None
    return fake_vllm


@pytest.fixture
def start_gateway(backend):
    """Start a gateway with REWARD_GATEWAY_* overrides; returns an httpx client bound to it."""
    with ExitStack() as stack:

        def start(upstream: str | None = None, **overrides: str) -> httpx.Client:
            env = {"REWARD_GATEWAY_UPSTREAM_URL": upstream or backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
            env.update({f"REWARD_GATEWAY_{key.upper()}": value for key, value in overrides.items()})
            gateway = Gateway(load_config(env), GatewayMetrics(CollectorRegistry()))
            app = build_app(gateway)
            url = stack.enter_context(serve_in_thread(app))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            client.gateway, client.app = gateway, app
            return client

        yield start
