"""Debian's buildah, kept under the cache folder: the Dockerfile images built (``bud``) and every image
checked by running commands in it.

buildah keeps its store, its temporary files and its network configuration under the cache folder, never in
the host-wide places (/var/lib/containers, ...). The Dockerfile images are built with ``PYTHON_IMAGE`` set to
the base, which it reads from its tar into its store first, and exported with ``buildah push
docker-archive:``; its store then keeps only the base.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from .catalogue import BY_NAME, Image
from .keys import context_files, tar_path
from .steps import images_dir, note, run_step

# Where the builds' pip keeps the wheels it downloads between builds (a folder under the cache,
# mounted into RUN, never into a layer; the Dockerfile's ARG PIP_WHEELHOUSE names it).
WHEELHOUSE_MOUNT = "/var/cache/wheelhouse"


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
def using_buildah():
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
    tar = tar_path(name)
    env = _buildah_env()
    # the config digest names the image in the store: look it up before reading 124 MB again
    with tarfile.open(tar) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
    image_id = manifest[0]["Config"].removesuffix(".json")
    present = subprocess.run(buildah("inspect", "--type", "image", image_id), env=env, capture_output=True)
    if present.returncode != 0:
        run_step(f"{name}: into buildah's store", buildah("pull", "--quiet", f"docker-archive:{tar}"), log, env=env)
    return image_id


def build_dockerfile(image: Image, out: Path, log: Path) -> None:
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
        seconds = run_step(f"{image.name}: buildah bud", [*bud, str(context)], log, env=env)
        note(f"  {image.name}: built in {seconds:.0f}s; writing the docker-archive")
        partial = Path(scratch) / "image.tar"
        run_step(
            f"{image.name}: export",
            buildah("push", "--quiet", image.ref, f"docker-archive:{partial}:{image.ref}"),
            log,
            env=env,
        )
        os.replace(partial, out)
    # the tar is the cache; the store keeps only the base images
    subprocess.run(buildah("rmi", "--force", image.ref), env=env, capture_output=True)
    subprocess.run(buildah("rmi", "--prune"), env=env, capture_output=True)


def run_in_image(name: str, argv: Sequence[str], user: str, volumes: Sequence[str] = (), network_host: bool = True):
    """Run ``argv`` as ``user`` in a container of the tar of image ``name`` (buildah's chroot
    isolation); the completed process, its output captured."""
    return run_commands_in_image(name, [(user, tuple(argv))], volumes, network_host)[0]


def run_commands_in_image(
    name: str, commands: Sequence[tuple[str, Sequence[str]]], volumes: Sequence[str] = (), network_host: bool = True
) -> list[subprocess.CompletedProcess]:
    """Run each ``(user, argv)`` in one container of image ``name`` (its tar read into buildah's
    store once); the completed processes, in order."""
    with using_buildah():
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
