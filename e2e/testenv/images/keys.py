"""What decides an image: its key, a hash of its inputs, in the name of its cached tar.

A changed input gives a new key, so a new tar; an unchanged one finds the tar built before.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from .. import builds
from .catalogue import BY_NAME, Image
from .rootfs import DEBIAN_PACKAGES, DEBIAN_SUITE, STRIPPED, debian_mirror, pause_cflags, pause_source
from .steps import images_dir

# Bumped when the way an image is made changes in a way its inputs do not show (this package's recipes).
RECIPE = 1


def dockerfile_sources(dockerfile: Path) -> list[str]:
    """The build-context paths (as written, globs allowed) that a Dockerfile's COPY and ADD read;
    ``COPY --from`` reads another stage, not the context."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources: list[str] = []
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if len(words) < 2 or words[0].upper() not in ("COPY", "ADD"):
            continue
        flags = re.match(r"((?:--\S+\s+)*)(.*)", words[1].strip())
        assert flags is not None
        if "--from" in flags.group(1):
            continue
        rest = flags.group(2)
        paths = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        sources += paths[:-1]
    return sources


def _repository_files(context: Path, source: str) -> list[Path]:
    """Files under one COPY source that belong to the repository (tracked, or new and not ignored):
    caches, virtual environments and egg-info a developer's checkout holds are never sent."""
    matched = sorted(glob.glob(str(context / source))) or [str(context / source)]
    files: list[Path] = []
    for item in map(Path, matched):
        if not item.exists():
            raise FileNotFoundError(f"COPY source {source} is missing from {context}")
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", str(item)],
            cwd=context,
            capture_output=True,
            text=True,
        )
        if listed.returncode == 0:  # paths relative to the cwd; a tracked file deleted is skipped
            found = [context / name for name in listed.stdout.split("\0") if name]
            files += [path for path in found if path.is_file()]
        elif item.is_file():
            files.append(item)
        else:  # not a git checkout (a source tarball): everything but caches
            files += [
                path
                for path in item.rglob("*")
                if path.is_file() and not {"__pycache__", ".pytest_cache"} & set(path.parts)
            ]
    return sorted(set(files))


def context_files(image: Image) -> list[Path]:
    """The files of the build context that the image's Dockerfile copies."""
    assert image.dockerfile is not None
    files: set[Path] = set()
    for source in dockerfile_sources(image.dockerfile):
        files.update(_repository_files(image.context, source))
    return sorted(files)


def inputs_key(image: Image, base_key: str | None = None) -> str:
    """A hash of everything that decides an image: a changed input gives a new key (a new tar).
    For a Dockerfile image: the Dockerfile, the context files it copies (names, contents, the
    executable bit), the build args and the key of the image it starts from."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)

    add("recipe", str(RECIPE))
    add("ref", image.ref)
    if image.name == "base":
        add("debootstrap", json.dumps([DEBIAN_SUITE, DEBIAN_PACKAGES, STRIPPED, debian_mirror()]))
    elif image.binary:
        component, binary = image.binary
        add("binary", f"{component} {binary} {builds.component_key(builds.BY_NAME[component])}")
    elif image.name == "pause":
        add("pause.c", pause_source().read_bytes())
        add("cflags", " ".join(pause_cflags()))
    else:
        assert image.dockerfile is not None
        add("Dockerfile", image.dockerfile.read_bytes())
        for path in context_files(image):
            add(f"file {path.relative_to(image.context)} {os.stat(path).st_mode & 0o111:o}", path.read_bytes())
        add("build-args", json.dumps(image.build_args(), sort_keys=True))
        add("base", base_key or "")
    return digest.hexdigest()[:12]


@functools.cache
def image_key(name: str) -> str:
    """The key of one of our images (read once per process)."""
    image = BY_NAME[name]
    return inputs_key(image, image_key(image.base) if image.base else None)


def tar_path(name: str) -> Path:
    return images_dir() / f"{name}-{image_key(name)}.tar"
