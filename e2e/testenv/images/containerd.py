"""Images imported into the real node's containerd, in the namespace the CRI uses (k8s.io)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from .steps import note


def import_images(ctr: Path, address: str, tars: Iterable[Path]) -> None:
    """Import docker-archive tars into the node's containerd (socket ``address``), in the namespace
    the CRI uses (k8s.io). A tar's names are normalised by containerd the way the kubelet
    normalises a pod's image, so ``reward-operator:0.1.0`` in a pod finds the imported image."""
    for tar in tars:
        started = time.monotonic()
        result = subprocess.run(
            [str(ctr), "--address", address, "--namespace", "k8s.io", "images", "import", str(tar)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import {tar}: {result.stderr.strip() or result.stdout.strip()}")
        note(f"imported {tar.name} into {address} in {time.monotonic() - started:.1f}s")
