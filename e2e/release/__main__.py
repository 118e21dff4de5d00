"""python -m release --version X.Y.Z --registry HOST[:PORT]/PATH: reward-operator's release, pushed and signed.

Builds (when not cached) the operator's image, which carries the gateway and the batch worker, and vLLM's CPU
runtime, with the test bed's buildah recipes; pushes each as <registry>/<name>:<version>; writes an SPDX SBOM of
each under <out>/sbom/; packages the chart with the version as its version and appVersion and the registry and
digests as its defaults, and pushes it to oci://<registry>/charts; signs every image and the chart by digest
and attests each SBOM (cosign: a key pair, or keyless in CI). Credentials: REGISTRY_USERNAME and
REGISTRY_PASSWORD; a key's password: COSIGN_PASSWORD. Writes <out>/release.json: every reference and digest.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

from . import chart, images, signing
from .registry import Registry, scratch_folder
from .tools import git_revision, say

REPO = Path(__file__).resolve().parents[2]
# SemVer 2 as helm requires of a chart's version (no leading "v": a tag v1.2.3 is released as 1.2.3), without
# build metadata: "+" is no character of an image tag (helm would push the chart as "_", the images would fail)
VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="the release's SemVer version, without a leading v")
    parser.add_argument("--registry", required=True, help="host[:port]/path every image and the chart go under")
    parser.add_argument("--ca-file", help="a CA to trust for the registry, beside the system's")
    parser.add_argument("--sign", choices=("key", "keyless", "none"), default="key", help="how to sign (key)")
    parser.add_argument("--cosign-key", help="cosign private key file, with --sign=key (password: COSIGN_PASSWORD)")
    parser.add_argument("--out", default=str(REPO / "dist"), help="where the chart, the SBOMs and release.json go")
    args = parser.parse_args(argv)
    if not VERSION.match(args.version):
        parser.error(
            f"--version {args.version!r} is not SemVer without build metadata (1.2.3, 1.2.3-rc.1; no leading v, no +)"
        )
    if "://" in args.registry:
        parser.error(f"--registry {args.registry!r}: a location (host[:port]/path), not a URL")
    if args.sign == "key" and not (args.cosign_key and Path(args.cosign_key).is_file()):
        parser.error("--sign=key needs --cosign-key with a cosign private key (cosign generate-key-pair)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    registry = Registry.from_env(args.registry, args.ca_file)
    out, scratch = Path(args.out), scratch_folder()
    env = registry.go_env(scratch)
    revision = git_revision(REPO)
    signer = None if args.sign == "none" else signing.Signer(Path(args.cosign_key) if args.sign == "key" else None, env)
    try:
        pushed = {
            image.name: images.push(image, registry, args.version, revision, scratch, env) for image in images.IMAGES
        }
        sboms = {name: signing.sbom(item.tar, item.image.repository, out / "sbom") for name, item in pushed.items()}
        packaged = chart.package(registry, args.version, pushed, out, scratch)
        chart_ref, chart_digest = chart.push(registry, packaged, args.version, env)
        chart_by_digest = f"{chart_ref.rsplit(':', 1)[0]}@{chart_digest}"
        if signer:
            for name, item in pushed.items():
                signer.sign(item.by_digest)
                signer.attest_sbom(item.by_digest, sboms[name])
            signer.sign(chart_by_digest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record = {
        "version": args.version,
        "revision": revision,
        "registry": registry.location,
        "signed": args.sign,
        "images": {
            item.image.repository: {"ref": item.tag_ref, "digest": item.digest, "sbom": str(sboms[name])}
            for name, item in pushed.items()
        },
        "chart": {"ref": f"oci://{chart_ref}", "digest": chart_digest, "package": str(packaged)},
    }
    (out / "release.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"release {args.version} in {time.monotonic() - started:.0f}s; {out / 'release.json'}:")
    print(json.dumps(record, indent=2))
    chart_url = f"oci://{registry.location}/charts/{chart.NAME}"
    say(f"install: helm install reward-operator {chart_url} --version {args.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
