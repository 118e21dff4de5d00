"""The images a user runs, built by the test bed's recipes (buildah, no docker), pushed under the release's
version, labelled, and pinned by the digest the registry answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reward_testing import versions
from testenv import images as testenv_images
from testenv.images.buildah import using_buildah

from .registry import Registry
from .tools import run

SOURCE = "https://rlhf.dev/reward-operator"  # the chart's home


@dataclass(frozen=True)
class Released:
    """One image of a release: the test bed's recipe ``name``, the repository it is pushed to, and whether its
    labels carry the release (the operator's do; the runtime's say vLLM's version alone, so that an upgrade that
    did not change the runtime keeps its digest and restarts no model)."""

    name: str
    repository: str
    per_release: bool


IMAGES = (
    Released("operator", "reward-operator", per_release=True),
    Released("vllm-cpu", "reward-operator-vllm-cpu", per_release=False),
)


@dataclass(frozen=True)
class Pushed:
    image: Released
    tag_ref: str  # registry/path/repository:version
    digest: str  # sha256:...
    tar: Path  # the docker-archive it was pushed from (the SBOM's input)

    @property
    def by_digest(self) -> str:
        return f"{self.tag_ref.rsplit(':', 1)[0]}@{self.digest}"


def labels(image: Released, version: str, revision: str) -> dict[str, str]:
    common = {"org.opencontainers.image.source": SOURCE, "org.opencontainers.image.title": image.repository}
    if image.per_release:
        return {**common, "org.opencontainers.image.version": version, "org.opencontainers.image.revision": revision}
    return {**common, "org.opencontainers.image.version": versions.VLLM}


def push(image: Released, registry: Registry, version: str, revision: str, scratch: Path, env: dict) -> Pushed:
    """Build (when not cached) and push ``image`` as ``<registry>/<repository>:<version>``, then label it there
    (crane mutate: a new config, the same layers); its digest as the registry has it."""
    tar = testenv_images.image_tar(image.name)
    ref = f"{registry.ref(image.repository)}:{version}"
    copy = ["copy", "--quiet", "--format", "oci", f"docker-archive:{tar}", f"docker://{ref}"]
    if registry.username:
        copy[1:1] = ["--dest-creds", f"{registry.username}:{registry.password}"]
    if cert_dir := registry.cert_dir(scratch / "certs"):
        copy[1:1] = ["--dest-cert-dir", str(cert_dir)]
    size = tar.stat().st_size / 2**20
    # skopeo keeps what it compressed in containers/image's blob-info cache, a fixed host path for root: held as
    # buildah's users hold it, the last one out removes it (a second push of the same layers reuses it meanwhile)
    with using_buildah():
        run(
            f"push {image.repository} ({size:.0f} MiB uncompressed) to {ref}", "skopeo", *copy, secret=registry.password
        )
    mutate = ["mutate", ref, "-t", ref]
    for key, value in labels(image, version, revision).items():
        mutate += ["--label", f"{key}={value}"]
    run(f"label {ref}", "crane", *mutate, env=env)
    digest = run(f"digest of {ref}", "crane", "digest", ref, env=env).strip()
    return Pushed(image, ref, digest, tar)
