"""docker-archive tars of one-layer images, written by Python's ``tarfile``: what ``ctr images import`` and
``buildah pull docker-archive:`` read. A one-layer image needs no working container: the rootfs goes into
the tar in seconds with owners, modes and hard links as they are."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path


class _HashingWriter(io.RawIOBase):
    def __init__(self, file):
        self.file, self.sha = file, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sha.update(data)
        return self.file.write(data)


def write_docker_archive(out: Path, ref: str, rootfs: Path, config: dict) -> None:
    """A one-layer image as a docker-archive tar (what ``ctr images import`` and ``buildah pull
    docker-archive:`` read): the layer is ``rootfs`` with owners, modes and links as they are."""
    scratch = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        layer = scratch / "layer.tar"
        with open(layer, "wb") as raw:
            hashing = _HashingWriter(raw)
            with tarfile.open(fileobj=hashing, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for child in sorted(rootfs.iterdir()):
                    tar.add(child, arcname=child.name)  # recursive, sorted; hard links kept
        diff_id = hashing.sha.hexdigest()
        image_config = {
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created_by": "reward-operator e2e/testenv/images"}],
        }
        config_bytes = json.dumps(image_config, sort_keys=True).encode()
        config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
        manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{diff_id}/layer.tar"]}]
        partial = scratch / "image.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
            for member_name, data in ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(member_name)
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
            archive.add(layer, arcname=f"{diff_id}/layer.tar")
        os.replace(partial, out)  # one filesystem: a half-written tar is never seen
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
