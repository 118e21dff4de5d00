"""The real reward gateway process (``python -m reward_gateway``), started with the environment and
args the operator rendered into an InferenceService's transformer.

Apart from the pytest fixture (``gateway_fixtures``) so that a script without pytest can use it too:
e2e/suites/gpu runs under a vLLM interpreter.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

# What the downward API gives a gateway's REWARD_GATEWAY_MEMORY_LIMIT_BYTES in a pod (its limits.memory)
LOCAL_MEMORY_LIMIT_BYTES = 2**30


@contextmanager
def gateway_process(
    args: list[str],
    env: dict[str, str],
    port: int,
    ready_name: str,
    log: Path,
    python: str = sys.executable,
    cpus: set[int] | None = None,
    host: str = "127.0.0.1",
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> Iterator[subprocess.Popen]:
    """`python -m reward_gateway` with these args and environment (nothing else of REWARD_GATEWAY_*),
    its output in ``log``; yields the process once /v1/models/<ready_name> answers on ``host``, and
    stops it after. ``python``: the interpreter (one with the gateway's dependencies); ``cpus``: the
    CPUs it may run on (a pod's CPU limit, where a benchmark wants it), all by default; ``wrap``:
    turns the command line into the one to run (a private hosts file around it, say)."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("REWARD_GATEWAY_")}
    command = [python, "-m", "reward_gateway", *args]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            wrap(command) if wrap else command,
            env={**clean, **env},
            stdout=out,
            stderr=out,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    try:
        url = f"http://{host}:{port}"

        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get(f"{url}/v1/models/{ready_name}", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until("the gateway's readiness route", ready, timeout=60, interval=0.1)
        yield process
    finally:
        # Ctrl-C: a graceful shutdown at once (SIGTERM, a pod's end, answers REWARD_GATEWAY_DRAIN_SECONDS first)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=20)


@contextmanager
def local_gateway(env: dict[str, str], args: list[str], upstream_url: str, log: Path, **options) -> Iterator[str]:
    """A rendered gateway (``rendered_gateway``'s environment and args, changed by the caller where a pod's
    paths differ) as a local process in front of ``upstream_url``, on a free port, with the memory limit a
    pod's downward API would give it; yields its URL. ``options``: ``gateway_process``'s."""
    port = free_port()
    env = {
        **env,
        "REWARD_GATEWAY_UPSTREAM_URL": upstream_url,
        "REWARD_GATEWAY_PORT": str(port),
        "REWARD_GATEWAY_MEMORY_LIMIT_BYTES": str(LOCAL_MEMORY_LIMIT_BYTES),
    }
    with gateway_process(args, env, port, env["REWARD_GATEWAY_MODEL_NAME"], log, **options):
        yield f"http://127.0.0.1:{port}"


# Kubernetes' quantity suffixes a memory limit takes (binary, then decimal)
QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
SUFFIXES = {
    **{suffix: 1024 ** (i + 1) for i, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{suffix: 1000 ** (i + 1) for i, suffix in enumerate(("k", "M", "G", "T", "P", "E"))},
}


def pod_env(container: dict) -> dict[str, str]:
    """A gateway container's environment as the kubelet fills it in: its values, and the downward API's
    ``limits.memory`` (the only reference the operator renders) in bytes; as rendered, or as the API server
    stores it (with its default divisor, 0: bytes)."""
    env = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            field = variable["valueFrom"].get("resourceFieldRef", {})
            assert field.get("resource") == "limits.memory" and field.get("divisor", "0") in ("0", "1"), variable
            number, suffix = QUANTITY.fullmatch(container["resources"]["limits"]["memory"]).groups()
            env[variable["name"]] = str(int(number) * SUFFIXES.get(suffix, 1))
    return env


def rendered_gateway(isvc: dict) -> tuple[dict[str, str], list[str]]:
    """The REWARD_GATEWAY_* environment and args the operator rendered into an InferenceService's
    transformer, to start that gateway as a local process (values only: the downward API's are a pod's)."""
    container = isvc["spec"]["transformer"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}, container.get("args", [])


def retry_later_error(answer: Any) -> str:
    """A gateway's answer asking to retry later (503 with a Retry-After a trainer waits on): its error message."""
    assert answer.status_code == 503, answer.text
    assert int(answer.headers["retry-after"]) > 0
    return answer.json()["error"]


def post_ok(url: str, path: str, body: dict) -> dict:
    """POST ``body`` to ``url`` + ``path`` (a gateway, or vLLM itself): the JSON of its 200 answer."""
    response = httpx.post(url + path, json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()
