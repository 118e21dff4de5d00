"""`make lint`'s import contracts (pyproject.toml, [tool.importlinter]) checked on a checkout or on a copy of one,
for the tests that prove a contract fails on a planted upward import (the operator's, the test bed's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path, sources: Sequence[Path]) -> subprocess.CompletedProcess:
    """lint-imports with ``root``'s pyproject.toml, the packages it names found on ``sources`` (in this order)."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, sources))},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_for_lint(repo: Path, destination: Path, package: Path) -> Path:
    """``destination`` holding ``repo``'s pyproject.toml and a copy of one package (``package``: its folder within
    the repository), for a planted import to break; returns ``destination``."""
    shutil.copy(repo / "pyproject.toml", destination / "pyproject.toml")
    shutil.copytree(repo / package, destination / package, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    return destination


def plant(module: Path, line: str) -> None:
    """An import added at the end of ``module``, the one a contract must refuse."""
    module.write_text(module.read_text() + f"\n{line}  # deliberately upward\n")
