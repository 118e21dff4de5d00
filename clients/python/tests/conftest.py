"""The real gateway process (`python -m reward_gateway`) in front of the real-HTTP fake vLLM.

The same arrangement as runtimes/gateway/tests (its conftest's `run_gateway`), kept here
because a conftest's fixtures reach only its own folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import ExitStack

import httpx
import pytest

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until


class Gateway:
    """A running gateway: its URL, and what it counted (its own /metrics)."""

    def __init__(self, url: str):
        self.url = url

    def requests(self, route: str = "rewards", code: int = 200) -> int:
        metrics = httpx.get(f"{self.url}/metrics", timeout=5).text
        pattern = rf'reward_gateway_requests_total{{code="{code}",model="rm",route="{route}"}} (\S+)'
        found = re.search(pattern, metrics)
        return int(float(found.group(1))) if found else 0


@pytest.fixture
def gateway(backend, tmp_path):
    """Start `python -m reward_gateway` with REWARD_GATEWAY_<NAME> settings; returns a Gateway once ready."""
    with ExitStack() as stack:

        def start(**settings: str) -> Gateway:
            port = free_port()
            env = {key: value for key, value in os.environ.items() if not key.startswith("REWARD_GATEWAY_")}
            env |= {
                "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
                "REWARD_GATEWAY_MODEL_NAME": "rm",
                "REWARD_GATEWAY_PORT": str(port),
            }
            env |= {f"REWARD_GATEWAY_{key.upper()}": value for key, value in settings.items()}
            log = tmp_path / f"gateway-{port}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen([sys.executable, "-m", "reward_gateway"], env=env, stdout=out, stderr=out)
            stack.callback(process.wait, timeout=20)
            stack.callback(process.terminate)
            url = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                assert process.poll() is None, log.read_text()
                try:
                    return httpx.get(f"{url}/v1/models/rm", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until("the gateway's readiness route", ready, timeout=60, interval=0.1)
            return Gateway(url)

        yield start
