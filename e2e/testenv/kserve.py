"""KServe's full CRDs (with OpenAPI schemas), read from the pinned Go module.

The CRDs are never committed: they come from the module download of the pinned
KServe release at set-up time, so the schemas that validate our rendered
children are exactly the ones KServe ships.
"""

from __future__ import annotations

from pathlib import Path

from reward_testing import versions

from . import build

KSERVE_MODULE = "github.com/kserve/kserve"
KSERVE_VERSION = "v" + versions.KSERVE  # its tag, and its Go module's version

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
