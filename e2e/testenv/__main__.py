"""python -m testenv {build,bin-dir,images,up,down,clean-node,status,kubeconfig}"""

from __future__ import annotations

import argparse
import sys
import time

from . import addons, builds, images
from .node import clean_host
from .plane.controlplane import ControlPlane


def _names(catalogue) -> str:
    left_out = [item.name for item in catalogue if not item.default]
    listed = f"of {','.join(catalogue.by_name)}"
    return f"{listed} (default: all but {','.join(left_out)})" if left_out else f"{listed} (default: all of them)"


def _add_on_help(kind) -> str:
    default = "yes" if kind.default else "no"
    if kind.comes_with:
        default += f" (yes where {' or '.join(kind.comes_with)} runs)"
    brings = f"; brings {', '.join(kind.requires)}" if kind.requires else ""
    return f"run {kind.title}{brings}; default: {default}, unless {kind.env()}=1 or 0 says otherwise"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testenv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build the control-plane binaries into the cache (a no-op when cached)")
    build_parser.add_argument(
        "--only",
        type=lambda names: [name.strip() for name in names.split(",") if name.strip()],
        metavar="NAMES",
        help=f"comma-separated components to build, {_names(builds.CATALOGUE)}",
    )
    sub.add_parser("bin-dir", help="print the folder of the cached binaries")
    images_parser = sub.add_parser(
        "images", help="build the real node's images as docker-archive tars into the cache (a no-op when cached)"
    )
    images_parser.add_argument(
        "--only",
        type=lambda names: [name.strip() for name in names.split(",") if name.strip()],
        metavar="NAMES",
        help=f"comma-separated images to build, {_names(images.CATALOGUE)}",
    )
    images_parser.add_argument("--force", action="store_true", help="rebuild even when a cached tar matches")
    images_parser.add_argument(
        "--check", action="store_true", help="then run each image's own check in it (a command as its user)"
    )
    up = sub.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler and kwok")
    up.add_argument("--timeout", type=float, default=180, help="seconds to wait for readiness")
    for kind in addons.KINDS:
        up.add_argument(f"--{kind.name}", action=argparse.BooleanOptionalAction, default=None, help=_add_on_help(kind))
    sub.add_parser(
        "down", help="stop every process of the control plane, remove its folder, undo the real node's host changes"
    )
    sub.add_parser("clean-node", help="undo the host changes of a real node left behind (no control plane needed)")
    sub.add_parser("status", help="show which components are running")
    sub.add_parser("kubeconfig", help="print the kubeconfig path (use: export KUBECONFIG=$(...))")
    args = parser.parse_args(argv)

    if args.command == "build":
        started = time.monotonic()
        path = builds.build(only=args.only)
        print(f"binaries in {path} ({time.monotonic() - started:.0f}s)")
        return 0
    if args.command == "images":
        started = time.monotonic()
        tars = images.build_images(only=args.only, force=args.force)
        for name, tar in tars.items():
            print(f"{images.BY_NAME[name].ref:55} {tar} ({tar.stat().st_size / 2**20:.0f} MiB)")
            if args.check:
                images.check_image(name)
        print(f"images ready in {time.monotonic() - started:.0f}s")
        return 0
    if args.command == "bin-dir":
        print(builds.bin_dir())
        return 0

    if args.command == "clean-node":
        clean_host(addons.leftovers())
        print("the host holds no real node's state")
        return 0

    plane = ControlPlane()
    if args.command == "up":
        asked = {kind.name: getattr(args, kind.name.replace("-", "_")) for kind in addons.KINDS}
        state = plane.up(timeout=args.timeout, **{name.replace("-", "_"): value for name, value in asked.items()})
        print(f"export KUBECONFIG={state.kubeconfig}")
        print(f"export PATH={builds.bin_dir()}:$PATH   # kubectl, helm of the pinned releases")
        return 0
    if args.command == "down":
        plane.down()
        print("control plane stopped and its folder removed")
        return 0
    if args.command == "status":
        components = plane.status()
        if not components:
            print(f"no control plane recorded in {plane.directory}")
            return 1
        for name, state in components.items():
            print(f"{name:25} {state}")
        return 0 if all(s == "running" for s in components.values()) else 1
    if args.command == "kubeconfig":
        path = plane.directory / "kubeconfig"
        if not path.exists():
            print(f"no control plane recorded in {plane.directory}; run `make up` first", file=sys.stderr)
            return 1
        print(path)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
