"""The gateway's rooms keep their order (pyproject.toml, "Gateway rooms point one way"), and the contract
catches an upward import: the judge taking the reward-token scorer's route from scoring (as it once took
its /tokenize path), a setting reading the server, a vLLM call reaching into a rollout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reward_testing.import_contracts import copy_for_lint, plant
from reward_testing.import_contracts import lint_imports as check_imports
from reward_testing.paths import REPO

CONTRACT = "Gateway rooms point one way"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """lint-imports with ``root``'s gateway (and this checkout's operator and test bed, which the file names)."""
    sources = [root / "runtimes" / "gateway", REPO / "operator", REPO / "e2e", REPO / "testing"]
    return check_imports(root, sources)


@pytest.fixture
def copy_of_the_gateway(tmp_path: Path) -> Path:
    return copy_for_lint(REPO, tmp_path, Path("runtimes") / "gateway" / "reward_gateway")


def test_the_gateway_keeps_its_rooms_in_order():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CONTRACT} KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward_import"),
    [
        ("judge/scorer.py", "from reward_gateway.scoring import reward_token"),
        ("config/settings.py", "from reward_gateway.http import server"),
        ("upstream/client.py", "from reward_gateway.rollout import canary"),
        ("items/outcomes.py", "from reward_gateway.config import gateway"),
        ("scoring/scorer.py", "from reward_gateway.pipeline import combine"),
    ],
)
def test_a_planted_upward_import_breaks_the_lint(copy_of_the_gateway, module, upward_import):
    plant(copy_of_the_gateway / "runtimes" / "gateway" / "reward_gateway" / module, upward_import)
    result = lint_imports(copy_of_the_gateway)
    assert result.returncode != 0
    assert f"{CONTRACT} BROKEN" in result.stdout, result.stdout
