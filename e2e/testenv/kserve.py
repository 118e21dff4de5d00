"""KServe's full CRDs (with OpenAPI schemas), read from the pinned Go module.

The CRDs are never committed: they come from the module download of the pinned
KServe release at set-up time, so the schemas that validate our rendered
children are exactly the ones KServe ships.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path

KSERVE_MODULE = "github.com/kserve/kserve"
# Newest release the Go module proxy serves (its version list is refused; v0.20.0
# is the newest exact tag that downloads).
KSERVE_VERSION = os.environ.get("TESTENV_KSERVE_VERSION", "v0.20.0")

# Sub-folders of config/crd/full whose CRDs we install. llmisvc is left out: its
# CRDs expect KServe's conversion webhook, which does not run here.
CRD_FOLDERS = (".", "localmodel", "clusterstoragecontainer")


@functools.cache
def module_dir() -> Path:
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{KSERVE_MODULE}@{KSERVE_VERSION}"],
            cwd=scratch,  # outside any module: a plain download
            capture_output=True,
            text=True,
            env=dict(os.environ, GOFLAGS="-mod=mod"),
        )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise RuntimeError(
            f"cannot download {KSERVE_MODULE}@{KSERVE_VERSION}: {info.get('Error') or result.stderr.strip()}"
        )
    return Path(info["Dir"])


def crd_files() -> list[Path]:
    full = module_dir() / "config" / "crd" / "full"
    files: list[Path] = []
    for folder in CRD_FOLDERS:
        files += sorted((full / folder).glob("serving.kserve.io_*.yaml"))
    if not files:
        raise FileNotFoundError(f"no CRDs under {full}")
    return files
