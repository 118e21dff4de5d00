"""python -m testenv {build,bin-dir,images,up,down,status,kubeconfig}"""

from __future__ import annotations

import argparse
import sys
import time

from . import build, controlplane, node


def _default_components() -> str:
    left_out = [c.module_dir for c in build.COMPONENTS if not c.default]
    return f"all but {','.join(left_out)}" if left_out else "all of them"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testenv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build the control-plane binaries into the cache (a no-op when cached)")
    build_parser.add_argument(
        "--only",
        type=lambda names: [name.strip() for name in names.split(",") if name.strip()],
        metavar="NAMES",
        help=f"comma-separated components to build, of {','.join(build.BY_NAME)} (default: {_default_components()})",
    )
    sub.add_parser("bin-dir", help="print the folder of the cached binaries")
    images_parser = sub.add_parser(
        "images", help="build the real node's images as docker-archive tars into the cache (a no-op when cached)"
    )
    images_parser.add_argument(
        "--only",
        type=lambda names: [name.strip() for name in names.split(",") if name.strip()],
        metavar="NAMES",
        help="comma-separated images to build, of base,pause,operator,storage-initializer,vllm-cpu,prometheus,"
        "prometheus-config-reloader (default: all but the last two, which `make prometheus-real` builds)",
    )
    images_parser.add_argument("--force", action="store_true", help="rebuild even when a cached tar matches")
    images_parser.add_argument(
        "--check", action="store_true", help="then run each image's own check in it (a command as its user)"
    )
    up = sub.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler and kwok")
    up.add_argument("--timeout", type=float, default=180, help="seconds to wait for readiness")
    up.add_argument(
        "--kserve",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run KServe's manager (controller and webhooks); default: yes, unless TESTENV_KSERVE=0",
    )
    up.add_argument(
        "--keda",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run KEDA's operator and external metrics API server; default: no, unless TESTENV_KEDA=1",
    )
    up.add_argument(
        "--localmodel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run KServe's LocalModel controller with localModel enabled and a node group (spec.cache); "
        "implies --kserve; default: no, unless TESTENV_LOCALMODEL=1",
    )
    up.add_argument(
        "--node",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the real node (kubelet, containerd, CNI, kube-proxy, CoreDNS; root, changes the host until down); "
        "default: yes, unless TESTENV_NODE=0",
    )
    sub.add_parser(
        "down", help="stop every process of the control plane, remove its folder, undo the real node's host changes"
    )
    sub.add_parser("clean-node", help="undo the host changes of a real node left behind (no control plane needed)")
    sub.add_parser("status", help="show which components are running")
    sub.add_parser("kubeconfig", help="print the kubeconfig path (use: export KUBECONFIG=$(...))")
    args = parser.parse_args(argv)

    if args.command == "build":
        started = time.monotonic()
        path = build.build(only=args.only)
        print(f"binaries in {path} ({time.monotonic() - started:.0f}s)")
        return 0
    if args.command == "images":
        from . import images  # imports the operator package (the gateway image's name): only here

        started = time.monotonic()
        tars = images.build_images(only=args.only, force=args.force)
        for name, tar in tars.items():
            print(f"{images.BY_NAME[name].ref:55} {tar} ({tar.stat().st_size / 2**20:.0f} MiB)")
            if args.check:
                images.check_image(name)
        print(f"images ready in {time.monotonic() - started:.0f}s")
        return 0
    if args.command == "bin-dir":
        print(build.bin_dir())
        return 0

    if args.command == "clean-node":
        node.clean_host()
        print("the host holds no real node's state")
        return 0

    plane = controlplane.ControlPlane()
    if args.command == "up":
        state = plane.up(timeout=args.timeout, kserve=args.kserve, keda=args.keda, localmodel=args.localmodel,
                           node=args.node)  # fmt: skip
        print(f"export KUBECONFIG={state.kubeconfig}")
        print(f"export PATH={build.bin_dir()}:$PATH   # kubectl, helm of the pinned releases")
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
