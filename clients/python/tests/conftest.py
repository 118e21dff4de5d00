"""The real gateway process (`python -m reward_gateway`) in front of the real-HTTP fake vLLM.

Started by `run_gateway` (reward_testing.gateway_fixtures), which the gateway's own tests use too.
"""

from __future__ import annotations

import re

import httpx
import pytest

from reward_testing.ports import free_port


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
def gateway(backend, run_gateway):
    """Start `python -m reward_gateway` with REWARD_GATEWAY_<NAME> settings; returns a Gateway once ready."""

    def start(**settings: str) -> Gateway:
        port = free_port()
        env = {
            "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
            "REWARD_GATEWAY_MODEL_NAME": "rm",
            "REWARD_GATEWAY_PORT": str(port),
        }
        env |= {f"REWARD_GATEWAY_{key.upper()}": value for key, value in settings.items()}
        url, _ = run_gateway([], env, port, "rm")
        return Gateway(url)

    return start
