"""Each image's tar, built when missing: ``image_tar`` picks the recipe (``rootfs`` or ``buildah``), one build
of an image at a time on the machine, and drops the tars a changed input made stale."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from . import buildah, rootfs
from .catalogue import BY_NAME, select
from .keys import tar_path
from .steps import images_dir, note, one_build_of

_BUILDERS: dict[str, Callable[[Path, Path], None]] = {"base": rootfs.build_base, "pause": rootfs.build_pause}


def _mount_points() -> list[Path]:
    with open("/proc/self/mounts") as mounts:
        return [Path(line.split()[1].replace("\\040", " ")) for line in mounts if len(line.split()) > 1]


def image_tar(name: str, force: bool = False) -> Path:
    """The docker-archive tar of image ``name``, built when missing (a no-op when cached)."""
    image = BY_NAME[name]
    out = tar_path(name)
    if out.is_file() and not force:
        return out
    if image.base:
        # what the image starts from, built first when missing, whoever asks: the demo, `testenv up`, a suite
        # or `make images IMAGES=operator` (the image's key holds the base's, so the base's tar is there too)
        image_tar(image.base)
    with one_build_of(name):
        if out.is_file() and not force:  # another process built it while we waited
            return out
        logs = images_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / f"{out.stem}.log"
        log_file.write_text("")
        # scratch folders of an interrupted build of this image (none can be running: we hold its lock)
        for stale in images_dir().glob(f".{name}[.-]*"):
            if any(mount == stale or stale in mount.parents for mount in _mount_points()):
                # an interrupted debootstrap leaves /proc and /sys mounted in its rootfs: never rmtree those
                note(f"  {name}: leaving {stale} alone, something is mounted under it")
            else:
                shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        note(f"building {image.ref} ({name}) into {out}; log: {log_file}")
        if name in _BUILDERS:
            _BUILDERS[name](out, log_file)
        elif image.binary:
            rootfs.build_binary_image(image, out)
        else:
            with buildah.using_buildah():
                buildah.build_dockerfile(image, out, log_file)
        _drop_older_tars(name, out)
        size = out.stat().st_size / 2**20
        note(f"  {name}: {out.name}, {size:.0f} MiB, in {time.monotonic() - started:.0f}s")
    return out


# Older tars of an image kept besides the newest: a changed input made them stale, but the checkout one
# branch back (or a second worktree on this machine) still builds that key, and vLLM's image takes 6-10
# minutes to build again; one more 5.6 GB tar at most.
KEPT_OLDER_TARS = 1


def _drop_older_tars(name: str, newest: Path) -> None:
    """Delete the tars of image ``name`` other than ``newest`` and the KEPT_OLDER_TARS last written before it."""
    older = sorted(
        (
            tar
            for tar in images_dir().glob(f"{name}-*.tar")
            if tar != newest and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}\.tar", tar.name)
        ),
        key=lambda tar: tar.stat().st_mtime,
        reverse=True,
    )
    for stale in older[KEPT_OLDER_TARS:]:
        stale.unlink()


def node_images(only: Iterable[str] | None = None) -> dict[str, Path]:
    """The node's images, reference -> docker-archive tar, built when missing (``only``: by name)."""
    return {image.ref: image_tar(image.name) for image in select(only) if image.node}


def build_images(only: Iterable[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Build (or find) the named images (each one's base built first when missing); name -> tar."""
    return {image.name: image_tar(image.name, force=force) for image in select(only)}
