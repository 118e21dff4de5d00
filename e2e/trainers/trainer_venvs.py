"""The trainers' own venvs (``make trainers-venvs``, venvs/install.sh), and a driver run under one.

A driver (drivers/) is a script the test starts under its trainer's interpreter with a JSON request
on stdin; it prints ``RESULTS <json>``. ``wrap`` turns its command line into the one to run: on the
real node, a private /etc/hosts that resolves ``status.url``'s name (the host has no cluster DNS).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DRIVERS = HERE / "drivers"
CACHE = Path(os.environ.get("TRAINERS_CACHE", Path.home() / ".cache" / "reward-operator" / "trainers"))
REQUIRED = "REWARD_OPERATOR_REQUIRE_TRAINERS"
RUN_TIMEOUT_S = 540  # the slowest, verl's loop on a local Ray, takes about 30 s alone on 2 cores

sys.path.insert(0, str(DRIVERS))
from common import snippet  # noqa: E402  (stdlib only: shared with the drivers)

__all__ = ["run_driver", "snippet", "trainer_python"]


def pinned(trainer: str) -> str:
    """``name==version`` of the trainer, as venvs/<trainer>.txt pins it."""
    text = (HERE / "venvs" / f"{trainer}.txt").read_text()
    return re.search(r"^# trainer: (\S+)$", text, re.M)[1]


def trainer_python(trainer: str) -> Path:
    """The interpreter of the trainer's venv; skips (fails where REWARD_OPERATOR_REQUIRE_TRAINERS=1)
    where `make trainers-venvs` has not made it."""
    venv = CACHE / f"{pinned(trainer).replace('==', '-')}-venv"
    if not (venv / ".complete").exists():
        message = f"{venv} is missing: `make trainers-venvs` builds it"
        if os.environ.get(REQUIRED) == "1":
            pytest.fail(message)
        pytest.skip(message)
    return venv / "bin" / "python"


def run_driver(
    trainer: str, driver: str, payload: dict[str, Any], wrap: Callable[[list[str]], list[str]] = lambda c: c
) -> dict[str, Any]:
    """Run drivers/<driver>.py under the trainer's venv with ``payload``; its answer, or a failure
    carrying its output's tail."""
    command = wrap([str(trainer_python(trainer)), str(DRIVERS / f"{driver}.py")])
    env = {
        **os.environ,
        # the client package from this checkout; the drivers' shared module beside them
        "PYTHONPATH": os.pathsep.join([str(REPO / "clients" / "python"), str(DRIVERS)]),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Ray writes under the home folder and asks for a token otherwise
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    run = subprocess.run(
        command, input=json.dumps(payload), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert run.returncode == 0 and lines, (
        f"{driver} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    )
    return json.loads(lines[-1].removeprefix("RESULTS "))
