"""The real reward gateway process (``python -m reward_gateway``) as a pytest fixture, for
every test folder that runs it: the gateway's own tests, and e2e tests where a real
component (KEDA's operator) talks to it.

Loaded for every test folder by the top-level conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from reward_testing.waiting import wait_until


@contextmanager
def gateway_process(args: list[str], env: dict[str, str], port: int, ready_name: str, log: Path):
    """`python -m reward_gateway` with these args and environment (nothing else of REWARD_GATEWAY_*),
    its output in ``log``; yields the process once /v1/models/<ready_name> answers, and stops it after."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("REWARD_GATEWAY_")}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "reward_gateway", *args], env={**clean, **env}, stdout=out, stderr=out
        )
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get(f"{url}/v1/models/{ready_name}", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until("the gateway's readiness route", ready, timeout=60, interval=0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture
def run_gateway(tmp_path):
    """Start `python -m reward_gateway` with these args and environment (nothing else of REWARD_GATEWAY_*);
    returns its URL and log file once /v1/models/<ready_name> answers (the last process: `run.process`)."""
    with ExitStack() as stack:

        def run(args: list[str], env: dict[str, str], port: int, ready_name: str):
            log = tmp_path / f"gateway-{port}.log"
            run.process = stack.enter_context(gateway_process(args, env, port, ready_name, log))
            return f"http://127.0.0.1:{port}", log

        yield run


def rendered_gateway(isvc: dict) -> tuple[dict[str, str], list[str]]:
    """The REWARD_GATEWAY_* environment and args the operator rendered into an InferenceService's
    transformer, to start that gateway as a local process (values only: the downward API's are a pod's)."""
    container = isvc["spec"]["transformer"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}, container.get("args", [])
