"""`make lint`'s import contracts (pyproject.toml, [tool.importlinter]) hold, and
catch an upward import: the layers are enforced, not just described."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reward_testing.paths import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root / 'operator'}{os.pathsep}{root / 'runtimes' / 'gateway'}"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy_of_the_packages(tmp_path: Path) -> Path:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "operator" / "reward_operator", tmp_path / "operator" / "reward_operator")
    shutil.copytree(
        REPO / "runtimes" / "gateway" / "reward_gateway", tmp_path / "runtimes" / "gateway" / "reward_gateway"
    )
    return tmp_path


def test_the_repository_keeps_every_contract():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "upward_import", "broken"),
    [
        ("render/predictor.py", "from ..cluster import objects", "Operator layers point one way"),
        ("api/names.py", "from ..policy import conditions", "Operator layers point one way"),
        ("policy/readiness.py", "import kopf", "api, render and policy are pure"),
        ("controllers/runner.py", "from kubernetes import client", "Only the cluster layer talks to the API server"),
    ],
)
def test_an_upward_import_breaks_the_lint(copy_of_the_packages, module, upward_import, broken):
    path = copy_of_the_packages / "operator" / "reward_operator" / module
    path.write_text(path.read_text() + f"\n{upward_import}  # deliberately upward\n")
    result = lint_imports(copy_of_the_packages)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout
