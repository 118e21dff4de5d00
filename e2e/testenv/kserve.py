"""KServe's full CRDs (with OpenAPI schemas), read from the pinned Go module.

The CRDs are never committed: they come from the module download of the pinned
KServe release at set-up time, so the schemas that validate our rendered
children are exactly the ones KServe ships.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import build

KSERVE_MODULE = "github.com/kserve/kserve"
# Newest release the Go module proxy serves (its version list is refused; v0.20.0
# is the newest exact tag that downloads).
KSERVE_VERSION = os.environ.get("TESTENV_KSERVE_VERSION", "v0.20.0")

# Sub-folders of config/crd/full whose CRDs we install. llmisvc is left out: its
# CRDs expect KServe's conversion webhook, which does not run here.
CRD_FOLDERS = (".", "localmodel", "clusterstoragecontainer")


def module_dir() -> Path:
    return build.module_source(KSERVE_MODULE, KSERVE_VERSION)


def crd_files() -> list[Path]:
    full = module_dir() / "config" / "crd" / "full"
    files: list[Path] = []
    for folder in CRD_FOLDERS:
        files += sorted((full / folder).glob("serving.kserve.io_*.yaml"))
    if not files:
        raise FileNotFoundError(f"no CRDs under {full}")
    return files
