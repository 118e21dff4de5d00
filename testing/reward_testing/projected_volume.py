"""A ConfigMap key as the kubelet projects it into a pod's volume: what a mounted ConfigMap looks like to a reader."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_STAMPS = itertools.count()


def project(directory: Path, content: str, key: str = "percent") -> Path:
    """Writes ``content`` under ``key`` the kubelet's way (its AtomicWriter): the key is a link through
    ``..data``, itself a link to a fresh directory that one rename swaps in, so a reader sees the old content
    or the new one, never a half-written file. Returns the key's path, what the gateway is told."""
    stamp = directory / f"..stamp_{next(_STAMPS)}"
    stamp.mkdir()
    (stamp / key).write_text(content)
    staged = directory / "..data_tmp"
    staged.symlink_to(stamp.name)
    os.replace(staged, directory / "..data")
    link = directory / key
    if not link.is_symlink():
        link.symlink_to(f"..data/{key}")
    return link
