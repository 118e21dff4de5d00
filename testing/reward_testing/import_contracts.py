"""`make lint`'s import contracts (pyproject.toml, [tool.importlinter]) checked on a checkout or on a copy of one,
for the tests that prove a contract fails on a planted upward import (the operator's, the test bed's)."""

from __future__ import annotations

import os
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
