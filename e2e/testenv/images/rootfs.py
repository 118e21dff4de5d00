"""The images made without a Dockerfile: a rootfs of ours written as a one-layer tar (``archive``).

- ``base``: Debian bookworm with python3, by ``debootstrap --variant=minbase`` from the Debian mirror apt on
  this machine already uses, stripped of apt lists, docs, man pages and locales;
- ``pause``: the Kubernetes module's ``pause.c``, compiled statically: containerd's sandbox image;
- an image of one static binary built by ``builds`` (``kserve-router``, ``prometheus``, ...), alone in it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import builds
from .archive import write_docker_archive
from .catalogue import BASE_IMAGE, PAUSE_IMAGE, Image
from .steps import images_dir, note, run_step

DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# Left out of the base rootfs (about 124 MB remain): nothing in an image reads them.
STRIPPED = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/cache/debconf/*-old",
    "var/log/*",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/i18n",
    "usr/share/lintian",
    "usr/share/common-licenses",
    # debootstrap made device nodes; the runtime mounts its own /dev
    "dev/*",
)


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt on this machine uses for the main archive (deb822 ``.sources`` files or
    one-line ``sources.list``), read at build time: the only place packages can come from here."""
    candidates: list[tuple[str, str]] = []  # (uri, suites)
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]
    for path in files:
        if path.is_file():
            for line in path.read_text().splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if len(parts) >= 3 and parts[0] == "deb":
                    candidates.append((parts[1], parts[2]))
    for path in sorted((sources / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
                for uri in fields.get("uris", "").split():
                    candidates.append((uri, fields.get("suites", "")))
    for uri, suites in candidates:
        if DEBIAN_SUITE in suites.split() and "security" not in uri:
            return uri.rstrip("/")
    raise LookupError(f"no Debian mirror for {DEBIAN_SUITE} in {sources}/sources.list(.d)")


def pause_source() -> Path:
    return (
        builds.module_source("k8s.io/kubernetes", builds.KUBERNETES_VERSION) / "build" / "pause" / "linux" / "pause.c"
    )


def pause_cflags() -> tuple[str, ...]:
    """Upstream's flags (build/pause/Makefile), the version it prints (`pause -v`) from its TAG."""
    makefile = (pause_source().parents[1] / "Makefile").read_text()
    tag = re.search(r"^TAG \?= (\S+)$", makefile, re.MULTILINE)
    version = f"v{tag.group(1) if tag else 'unknown'}-{builds.KUBERNETES_VERSION}"
    return ("-Os", "-Wall", "-Werror", "-static", f"-DVERSION={version}")


def build_base(out: Path, log: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise FileNotFoundError("debootstrap is needed for the base image (apt-get install debootstrap)")
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".base-rootfs.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        note(f"  base: debootstrap {DEBIAN_SUITE} from {mirror} ({', '.join(DEBIAN_PACKAGES)})")
        seconds = run_step(
            "base: debootstrap",
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                str(rootfs),
                mirror,
            ],
            log,
        )
        note(f"  base: debootstrap done in {seconds:.0f}s")
        for pattern in STRIPPED:
            for path in glob.glob(str(rootfs / pattern)):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        for kept in ("var/lib/apt/lists/partial", "var/cache/apt/archives/partial"):
            (rootfs / kept).mkdir(parents=True, exist_ok=True)
        config = {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
            "Cmd": ["python3"],
        }
        write_docker_archive(out, BASE_IMAGE, rootfs, config)


def build_pause(out: Path, log: Path) -> None:
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".pause.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        rootfs.mkdir()
        run_step("pause: gcc", ["gcc", *pause_cflags(), "-o", str(rootfs / "pause"), str(pause_source())], log)
        subprocess.run(["strip", str(rootfs / "pause")], check=True)
        # as upstream's pause image: the sandbox runs as nobody
        write_docker_archive(out, PAUSE_IMAGE, rootfs, {"Entrypoint": ["/pause"], "User": "65535:65535"})


def build_binary_image(image: Image, out: Path) -> None:
    assert image.binary is not None
    component, binary = image.binary
    built = builds.build(only=[component]) / binary
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=f".{image.name}.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(built.resolve(), rootfs / "bin" / binary)
        # nobody, as upstream's images run (the pod may set another user)
        write_docker_archive(out, image.ref, rootfs, {"Entrypoint": [f"/bin/{binary}"], "User": "65534:65534"})
