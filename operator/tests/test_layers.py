"""`make lint`'s import contracts (pyproject.toml, [tool.importlinter]) hold, and
catch an upward import: the layers are enforced, not just described. The test folders
stay apart, and those `make unit` does not run still import."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reward_testing.import_contracts import lint_imports as check_imports
from reward_testing.paths import REPO


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # the test bed's layers are linted too: its package from this checkout
    return check_imports(root, [root / "operator", root / "runtimes" / "gateway", REPO / "e2e", REPO / "testing"])


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
        ("api/names.py", "from ..policy import status", "Operator layers point one way"),
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


# Folders of tests and benchmarks (with their sub-folders: e2e/tests/{offline,cluster,node}, each suite of
# e2e/suites): each may import the packages, testenv and reward_testing, never another of these folders
# (shared helpers go to testing/ or the test bed).
TEST_FOLDERS = ("operator/tests", "runtimes/gateway/tests", "e2e/tests", "e2e/suites", "e2e/testenv/tests", "e2e/bench")


def _modules_of(folder: str) -> set[str]:
    return {path.stem for path in (REPO / folder).rglob("*.py")} - {"conftest", "__init__"}


def _strings(tree: ast.Module) -> set[str]:
    """String constants in code (docstrings, which may name another test, left out)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("folder", TEST_FOLDERS)
def test_no_test_folder_imports_or_reads_another(folder):
    others = [other for other in TEST_FOLDERS if other != folder]
    foreign_modules = set().union(*(_modules_of(other) for other in others)) - _modules_of(folder)
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        imported = _imported_names(tree) & foreign_modules
        assert not imported, f"{path.relative_to(REPO)} imports {imported} from another test folder"
        if path == Path(__file__):
            continue  # this file names every folder on purpose
        for text in _strings(tree):
            for other in others:
                assert other not in text, (
                    f"{path.relative_to(REPO)} reaches into {other}/ (move what it needs to testing/)"
                )


# Tests that run only on a cluster or the real node, with one each place must show: the Knative-vs-KEDA
# wake runs only in `make knative-real`.
ON_A_CLUSTER = ("e2e/tests/cluster", "e2e/tests/node", "e2e/suites")
MUST_COLLECT = (
    "e2e/tests/node/test_real_node_knative.py::test_a_burst_at_zero_wakes_it_through_the_activator_and_every_"
    "request_gets_the_models_scores",
    "e2e/suites/knative/test_real_node_knative_full.py::test_one_wake_through_knatives_activator_and_through_keda_"
    "and_the_gateways_hold",
)


def test_the_tests_make_unit_does_not_run_import_and_collect():
    """They run after a control plane's start, the real node's under its lock: an import error or a helper
    renamed under one would otherwise show first there."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ON_A_CLUSTER]
    collected = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-6000:] + collected.stderr[-3000:]
    listed = collected.stdout.splitlines()
    assert [test for test in MUST_COLLECT if test not in listed] == [], collected.stdout[-3000:]
