"""The test bed's import contract (pyproject.toml, "Test bed layers point one way") holds, and catches a planted
circle: a component that imports the control plane, as ``addon.py`` once took ``State`` from ``controlplane.py``,
which imported every add-on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reward_testing.import_contracts import copy_for_lint, plant
from reward_testing.import_contracts import lint_imports as check_imports
from reward_testing.paths import REPO

CONTRACT = "Test bed layers point one way"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """lint-imports with the test bed of ``root`` on the path (the packages that ship from this checkout)."""
    return check_imports(root, [root / "e2e", REPO / "testing", REPO / "operator", REPO / "runtimes" / "gateway"])


@pytest.fixture
def copy_of_the_test_bed(tmp_path: Path) -> Path:
    return copy_for_lint(REPO, tmp_path, Path("e2e") / "testenv")


def test_the_test_bed_keeps_its_layers():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CONTRACT} (components never import the plane) KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward_import"),
    [
        # the circle this contract was written against: the protocol taking the plane's state from the plane
        ("plane/addon.py", "from .controlplane import ControlPlane"),
        ("node/host.py", "from ..addons import kube_router"),
        ("addons/keda.py", "from ..plane.controlplane import ControlPlane"),
        ("images/keys.py", "from .. import node"),
        ("builds/components.py", "from .. import images"),
    ],
)
def test_a_planted_upward_import_breaks_the_lint(copy_of_the_test_bed, module, upward_import):
    plant(copy_of_the_test_bed / "e2e" / "testenv" / module, upward_import)
    result = lint_imports(copy_of_the_test_bed)
    assert result.returncode != 0
    assert CONTRACT in result.stdout and "BROKEN" in result.stdout, result.stdout
