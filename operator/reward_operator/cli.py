"""reward-operator {run,render,crds}"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path
from typing import Any

import yaml


def _load_documents(path: str) -> list[dict[str, Any]]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_command(args: argparse.Namespace) -> int:
    from .api import API_VERSION, REWARD_MODEL_KIND, RLHF_PIPELINE_KIND
    from .render import render_reward_model, render_rlhf_pipeline
    from .settings import Settings, SettingsError

    try:
        gateway_image = args.gateway_image or Settings.from_env().gateway_image
    except SettingsError as error:
        print(f"reward-operator: {error}", file=sys.stderr)
        return 2

    renderers = {REWARD_MODEL_KIND: render_reward_model, RLHF_PIPELINE_KIND: render_rlhf_pipeline}
    children: list[dict[str, Any]] = []
    for path in args.filename:
        for document in _load_documents(path):
            render = renderers.get(document.get("kind")) if document.get("apiVersion") == API_VERSION else None
            if render is None:
                print(f"{path}: skipping {document.get('kind')} {document.get('apiVersion')}", file=sys.stderr)
                continue
            document.setdefault("metadata", {}).setdefault("namespace", args.namespace)
            children += render(document, gateway_image)
    sys.stdout.write(yaml.safe_dump_all(children, sort_keys=False, width=120))
    return 0


def crds_command(args: argparse.Namespace) -> int:
    from .api.crd import all_crds, to_yaml

    crds = all_crds()
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for filename, crd in crds.items():
            (out / filename).write_text(to_yaml(crd))
            print(f"wrote {out / filename}", file=sys.stderr)
    else:
        sys.stdout.write("---\n".join(to_yaml(crd) for crd in crds.values()))
    return 0


# glibc's mallopt parameter for the number of malloc arenas.
M_ARENA_MAX = -8


def cap_malloc_arenas(count: int = 2) -> bool:
    """Let glibc keep at most ``count`` malloc arenas; False where that cannot be set (not glibc).

    glibc gives threads that allocate at once arenas of their own (up to 8 per core): kopf's handler
    threads and asyncio's to_thread pool each fill one during a burst of reconciles, and memory freed in
    one arena cannot serve another's requests, so a burst's peak stays resident several times over.
    Set with mallopt at start, before any thread: the MALLOC_ARENA_MAX variable is read only when a
    process starts, and where a user sets it, theirs stands."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


def run_command(args: argparse.Namespace) -> int:
    import kopf

    from .controllers import build_registry
    from .settings import Settings, SettingsError

    if args.namespace and args.all_namespaces:
        print("--namespace and --all-namespaces exclude each other", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(f"reward-operator: {error}", file=sys.stderr)
        return 2
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.FULL,
        # as kopf's own CLI does: text lines start with [namespace/name], JSON lines carry the object
        # in a field (kopf.configure's default leaves a line without the object it is about)
        log_prefix=None,
    )
    cap_malloc_arenas()
    kopf.run(
        registry=build_registry(settings),
        standalone=args.standalone,
        peering_name=args.peering,
        priority=args.priority,
        namespaces=args.namespace or (),
        clusterwide=not args.namespace,
        liveness_endpoint=args.liveness or None,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="reward-operator", description="Serve RLHF reward models on KServe with vLLM."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig or in-cluster config")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeatable; globs allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    run.add_argument("--standalone", action="store_true", help="no peering: the only operator instance")
    run.add_argument("--peering", default=None, help="peering object name, for several instances with priorities")
    run.add_argument("--priority", type=int, default=0, help="peering priority of this instance")
    run.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="liveness endpoint ('' to disable)")
    run.add_argument("--log-format", choices=["full", "json"], default="full")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=run_command)

    render = sub.add_parser(
        "render", help="print the children a RewardModel or RLHFPipeline renders to, offline (no cluster)"
    )
    render.add_argument(
        "-f", "--filename", action="append", required=True, help="RewardModel or RLHFPipeline YAML ('-' for stdin)"
    )
    render.add_argument("--namespace", default="default", help="namespace for objects that name none")
    render.add_argument(
        "--gateway-image", help="reward gateway image (default: REWARD_OPERATOR_GATEWAY_IMAGE, else the operator's)"
    )
    render.set_defaults(func=render_command)

    crds = sub.add_parser("crds", help="print (or write) the CustomResourceDefinitions")
    crds.add_argument("-o", "--output-dir", help="write one file per CRD into this folder")
    crds.set_defaults(func=crds_command)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
