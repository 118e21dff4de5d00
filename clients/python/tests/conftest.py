"""The real gateway process (`python -m reward_gateway`) in front of the real-HTTP fake vLLM, and a real
S3-compatible server (versitygw) whose keys are the process's environment.

Started by `run_gateway` (reward_testing.gateway_fixtures), which the gateway's own tests use too, and by
`object_store` (reward_testing.object_store_fixtures); `files`, a small HTTP file server (reward_testing.file_server),
serves a batch's https:// input.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import httpx
import pytest

from reward_testing.file_server import FileServer, file_server
from reward_testing.object_store import ObjectStore
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


@pytest.fixture
def s3(object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, tmp_path) -> ObjectStore:
    """The object store, with the environment KServe's storage initializer reads pointing at it (and no AWS or S3
    setting of the machine's, nor its ~/.aws files): what a worker in a Job pod would see."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "S3_")):
            monkeypatch.delenv(name)
    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "no-aws-files"))
    return object_store


@pytest.fixture
def files() -> Iterator[FileServer]:
    """A real HTTP file server on loopback (reward_testing.file_server), stopped after the test."""
    with file_server() as server:
        yield server
