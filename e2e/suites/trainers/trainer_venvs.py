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
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DRIVERS = HERE / "drivers"
CACHE = Path(os.environ.get("TRAINERS_CACHE", Path.home() / ".cache" / "reward-operator" / "trainers"))
REQUIRED = "REWARD_OPERATOR_REQUIRE_TRAINERS"

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
    trainer: str,
    driver: str,
    payload: dict[str, Any],
    wrap: Callable[[list[str]], list[str]] = lambda c: c,
    on_line: Callable[[str], str | None] = lambda line: None,
) -> dict[str, Any]:
    """Run drivers/<driver>.py under the trainer's venv with ``payload``; its answer, or a failure
    carrying its output's tail. ``on_line`` sees each line the driver prints, as it prints it, and
    what it returns is written to the driver's stdin: a test acts on a trainer's progress (TRL's
    driver prints ``STEP <n>`` after each optimizer step, and can wait there for the test's line)."""
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
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
                                   env=env)  # fmt: skip
        process.stdin.write(json.dumps(payload) + "\n")
        process.stdin.flush()
        printed = []
        for line in process.stdout:  # ends when the driver exits; pytest-timeout bounds a hang
            printed.append(line.rstrip("\n"))
            reply = on_line(printed[-1])
            if reply is not None:
                process.stdin.write(reply + "\n")
                process.stdin.flush()
        process.stdin.close()
        returncode = process.wait()
        errors.seek(0)
        stderr = errors.read()
    results = [line for line in printed if line.startswith("RESULTS ")]
    assert returncode == 0 and results, f"{driver} exited {returncode}:\n{printed[-40:]}\n{stderr[-6000:]}"
    return json.loads(results[-1].removeprefix("RESULTS "))
