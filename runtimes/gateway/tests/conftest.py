"""Fixtures: a fake vLLM on a real port, and gateways in front of it."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack

import httpx
import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.app import build_app
from reward_gateway.config import load_config
from reward_gateway.gateway import Gateway
from reward_gateway.metrics import GatewayMetrics
from reward_testing.fake_vllm import serve_in_thread
from reward_testing.waiting import wait_until


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


@pytest.fixture
def run_gateway(tmp_path):
    """Start `python -m reward_gateway` with these args and environment (nothing else of REWARD_GATEWAY_*);
    returns its URL and log file once /v1/models/<ready_name> answers (the last process: `run.process`)."""
    with ExitStack() as stack:

        def run(args: list[str], env: dict[str, str], port: int, ready_name: str):
            clean = {key: value for key, value in os.environ.items() if not key.startswith("REWARD_GATEWAY_")}
            log = tmp_path / f"gateway-{port}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "reward_gateway", *args], env={**clean, **env}, stdout=out, stderr=out
                )
            stack.callback(process.wait, timeout=20)
            stack.callback(process.terminate)
            url = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                assert process.poll() is None, log.read_text()
                try:
                    return httpx.get(f"{url}/v1/models/{ready_name}", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until("the gateway's readiness route", ready, timeout=60, interval=0.1)
            run.process = process
            return url, log

        yield run
