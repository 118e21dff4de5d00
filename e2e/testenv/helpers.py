"""Small helpers for tests that talk to a cluster."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(what: str, predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.3) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def get_json(cluster, *args: str) -> dict | None:
    """`kubectl get ... -o json`, or None when it is not there."""
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def mark_inference_service_ready(kubectl: Callable[..., Any], namespace: str, name: str, url: str) -> None:
    """Stand in for KServe's controller, which does not run on the local control plane:
    report the InferenceService Ready at ``url``, as KServe would. ``kubectl`` is
    ControlPlane.kubectl or Cluster.kubectl."""
    ready = {"status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    status = {"status": {"url": url, "conditions": [{"type": t, **ready} for t in ("PredictorReady", "Ready")]}}
    kubectl(
        "patch", "inferenceservice", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


def condition(obj: dict | None, type_: str = "Ready") -> dict | None:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item
    return None


# The cached virtual environment with the pinned vLLM (`make vllm-venv`): its
# parser and metric names are the contract the operator and dashboards follow.
VLLM_VERSION = "0.33.0"
DEFAULT_VLLM_VENV = Path.home() / ".cache" / "reward-operator" / f"vllm-{VLLM_VERSION}-venv"


def vllm_python() -> Path | None:
    """The interpreter of the pinned vLLM (VLLM_PYTHON overrides), or None when absent."""
    import os

    if os.environ.get("VLLM_PYTHON"):
        path = Path(os.environ["VLLM_PYTHON"])
        return path if path.exists() else None
    # `make vllm-venv` marks a finished install; a half-made one is not used
    if not (DEFAULT_VLLM_VENV / ".complete").exists():
        return None
    return DEFAULT_VLLM_VENV / "bin" / "python"


def vllm_package_dir() -> Path | None:
    """The installed vllm package of that interpreter's environment."""
    python = vllm_python()
    if python is None:
        return None
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/vllm"))
    return found[0] if found else None


def server_dry_run(cluster, docs: list[dict], namespace: str | None = None) -> str:
    """CRDs and Namespaces for real (nothing else could be checked against them), the rest dry-run.

    --force-conflicts: earlier tests of the session may have installed the same CRDs
    with helm, as a user switching install methods would have.
    """
    first = [doc for doc in docs if doc["kind"] in ("CustomResourceDefinition", "Namespace")]
    if first:
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", "-",
            input=yaml.safe_dump_all(first),
        )  # fmt: skip
    scope = ["-n", namespace] if namespace else []
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "--field-manager=e2e", *scope, "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout
    return result.stdout
