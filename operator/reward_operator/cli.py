"""reward-operator {run,render,validate,crds}: the operator, and its offline tools.

``render`` and ``validate`` check each document as the API server would (the CRD's schema and CEL
rules, ``api.validation``; or the cluster's own API server with ``--validate=server``) before anything
is printed; problems go to stderr, one line each, and the exit code says what happened (EXIT_CODES).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import __version__, peering
from .api import GROUP

EXIT_OK = 0
EXIT_INVALID = 1  # a document the API server would refuse, or a file that cannot be read or parsed
EXIT_USAGE = 2  # argparse's own code for a bad command line; also a missing setting
EXIT_NO_CLUSTER = 3  # --validate=server and no cluster answered

EXIT_CODES = """exit codes:
  0  every document is valid (and rendered)
  1  invalid input: a document the API server would refuse, a YAML error, a file that cannot be read;
     one line per problem on stderr: FILE:N KIND/NAME: FIELD: MESSAGE (N counts the file's documents from 1)
  2  usage: a bad command line or setting
  3  --validate=server: no cluster to ask (no kubeconfig, or the API server did not answer)"""


@dataclass
class Document:
    """One document of an input file: where it came from (``file:N``) and its content."""

    source: str
    body: Any

    @property
    def label(self) -> str:
        body = self.body if isinstance(self.body, dict) else {}
        name = (body.get("metadata") or {}).get("name") if isinstance(body.get("metadata"), dict) else None
        return f"{self.source} {body.get('kind') or '?'}/{name or '?'}"

    @property
    def ours(self) -> bool:
        """Of this project's API group (other kinds in a file are skipped, as a kustomization's would be)."""
        api_version = self.body.get("apiVersion") if isinstance(self.body, dict) else None
        return isinstance(api_version, str) and api_version.split("/")[0] == GROUP


class _Loader(yaml.SafeLoader):
    """YAML as kubectl reads it into JSON: a date stays a string."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(paths: list[str]) -> tuple[list[Document], list[str]]:
    """Every non-empty document of every file ('-': stdin, once), and one error line per file that
    could not be read or parsed."""
    documents: list[Document] = []
    errors: list[str] = []
    for path in paths:
        name = "<stdin>" if path == "-" else path
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            bodies = [body for body in yaml.load_all(text, Loader=_Loader) if body is not None]
        except OSError as error:
            errors.append(f"{name}: cannot read: {error.strerror or error}")
            continue
        except yaml.YAMLError as error:
            errors.append(f"{name}: not YAML: {' '.join(str(error).split())}")
            continue
        documents += [Document(f"{name}:{index}", body) for index, body in enumerate(bodies, start=1)]
    return documents, errors


def check(
    documents: list[Document], judge: Callable[[Any], list[Any]], passing: tuple[type[Exception], ...] = ()
) -> list[str]:
    """One line per problem of every document of ours, as ``judge`` (offline or a cluster) finds them;
    the ``passing`` exceptions (a cluster that stopped answering) are the caller's."""
    from .api.validation import RULES_SKIPPED, Problem

    lines = []
    for document in documents:
        if not document.ours:
            continue
        try:
            problems = judge(document.body)
        except Exception as error:  # a validator's bug must still be one line, never a traceback
            if isinstance(error, passing):
                raise
            problems = [Problem("", f"could not be validated: {type(error).__name__}: {error}")]
        # the API server's "rules not checked" adds nothing a user can act on before fixing the others
        lines += [f"{document.label}: {problem}" for problem in problems if problem.message != RULES_SKIPPED]
    return lines


def _dump(objects: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return yaml.safe_dump_all(objects, sort_keys=False, width=120)


def _problems_or_exit(args: argparse.Namespace) -> tuple[list[Document], int | None]:
    """The documents, or the exit code after their problems were printed."""
    documents, errors = load_documents(args.filename)
    for document in documents:
        if not document.ours:
            kind = document.body.get("kind") if isinstance(document.body, dict) else type(document.body).__name__
            print(f"{document.source}: skipping {kind} (not {GROUP})", file=sys.stderr)
    if args.validate == "server":
        from .cluster.dry_run import ClusterUnavailable, connect, server_problems

        try:
            api = connect(args.kubeconfig)
            errors += check(documents, lambda body: server_problems(api, body, args.namespace), (ClusterUnavailable,))
        except ClusterUnavailable as error:
            print(f"reward-operator: {error}", file=sys.stderr)
            return documents, EXIT_NO_CLUSTER
    else:
        from .api.validation import validate

        errors += check(documents, validate)
    for line in errors:
        print(line, file=sys.stderr)
    return documents, EXIT_INVALID if errors else None


def render_command(args: argparse.Namespace) -> int:
    from .api import API_VERSION, REWARD_MODEL_KIND, RLHF_PIPELINE_KIND
    from .render import render_reward_model, render_rlhf_pipeline
    from .settings import Settings, SettingsError

    try:
        settings = Settings.from_env()  # as the operator renders: its gateway image and pull secrets
    except SettingsError as error:
        print(f"reward-operator: {error}", file=sys.stderr)
        return EXIT_USAGE
    gateway_image = args.gateway_image or settings.gateway_image
    documents, failed = _problems_or_exit(args)
    if failed is not None:
        return failed
    renderers = {REWARD_MODEL_KIND: render_reward_model, RLHF_PIPELINE_KIND: render_rlhf_pipeline}
    children: list[dict[str, Any]] = []
    errors = []
    for document in documents:
        render = renderers.get(document.body.get("kind")) if document.ours else None
        if document.ours and render is None:  # a RewardBatch: its Job names what only the cluster knows
            print(
                f"{document.label}: valid; not rendered (its Job needs the RewardModel's status.url)", file=sys.stderr
            )
        if render is None or document.body.get("apiVersion") != API_VERSION:
            continue
        body = copy.deepcopy(document.body)
        body.setdefault("metadata", {}).setdefault("namespace", args.namespace)
        try:
            children += render(body, gateway_image, pull_secrets=settings.image_pull_secrets)
        except Exception as error:  # valid by the schema, yet not renderable: one line, never a traceback
            errors.append(f"{document.label}: cannot render: {type(error).__name__}: {error}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(_dump(children, args.output))
    return EXIT_OK


def validate_command(args: argparse.Namespace) -> int:
    documents, failed = _problems_or_exit(args)
    if failed is not None:
        return failed
    for document in documents:
        if document.ours:
            print(f"{document.label}: valid")
    return EXIT_OK


def crds_command(args: argparse.Namespace) -> int:
    from .api.crd import all_crds, to_yaml

    crds = all_crds()
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for filename, crd in crds.items():
            (out / filename).write_text(to_yaml(crd))
            print(f"wrote {out / filename}", file=sys.stderr)
    elif args.output == "json":
        sys.stdout.write(_dump(list(crds.values()), "json"))
    else:
        sys.stdout.write("---\n".join(to_yaml(crd) for crd in crds.values()))
    return EXIT_OK


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
    kopf_settings = kopf.OperatorSettings()
    # the controllers' startup handler sets the rest of kopf's settings on this same object
    kopf_settings.peering.lifetime = args.peering_lifetime
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
        settings=kopf_settings,
        standalone=args.standalone,
        peering_name=args.peering,
        priority=peering.resolve_priority(args.priority),
        identity=peering.own_identity(),
        namespaces=args.namespace or (),
        clusterwide=not args.namespace,
        liveness_endpoint=args.liveness or None,
    )
    return 0


def _input_command(sub: Any, name: str, summary: str, func: Callable[[argparse.Namespace], int]) -> Any:
    """A subcommand that reads RewardModels and RLHFPipelines from files, validated (render, validate)."""
    command = sub.add_parser(
        name, help=summary, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    command.add_argument(
        "-f", "--filename", action="append", required=True,
        help="a file of RewardModels and RLHFPipelines, several documents allowed ('-' for stdin); repeatable",
    )  # fmt: skip
    command.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    command.add_argument(
        "--validate", choices=["offline", "server"], default="offline",
        help="offline: the CRDs' schema and CEL rules, here (the default); "
        "server: a dry-run create with strict field validation on the current cluster",
    )  # fmt: skip
    command.add_argument("--kubeconfig", help="kubeconfig for --validate=server (default: $KUBECONFIG, ~/.kube/config)")
    command.set_defaults(func=func)
    return command


def _priority(value: str) -> int | str:
    try:
        return peering.parse_priority(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _lifetime(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if seconds < peering.MIN_LIFETIME:
        raise argparse.ArgumentTypeError(f"whole seconds, at least {peering.MIN_LIFETIME}, got {value!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="reward-operator",
        description="Serve RLHF reward models on KServe with vLLM.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reward-operator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator against the current kubeconfig or in-cluster config")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeatable; globs allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    run.add_argument("--standalone", action="store_true", help="no peering: the only operator instance")
    run.add_argument("--peering", default=None, help="peering object name, for several instances with priorities")
    run.add_argument(
        "--priority", type=_priority, default=0,
        help="peering priority of this instance (the highest acts); 'auto': derived from the pod's name "
        f"(${peering.POD_NAME_ENV}, else the host name), distinct for each pod of a Deployment",
    )  # fmt: skip
    run.add_argument(
        "--peering-lifetime", type=_lifetime, default=peering.DEFAULT_LIFETIME, metavar="SECONDS",
        help="how long this instance's peering keep-alive counts: a standby takes over this long after the "
        f"acting instance died, at most (default {peering.DEFAULT_LIFETIME}; kopf's own is 60)",
    )  # fmt: skip
    run.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="liveness endpoint ('' to disable)")
    run.add_argument("--log-format", choices=["full", "json"], default="full")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=run_command)

    render = _input_command(
        sub,
        "render",
        "validate, then print the children every RewardModel and RLHFPipeline renders to (no cluster needed)",
        render_command,
    )
    render.add_argument(
        "-o", "--output", choices=["yaml", "json"], default="yaml", help="yaml (documents) or json (a List)"
    )
    render.add_argument(
        "--gateway-image", help="reward gateway image (default: REWARD_OPERATOR_GATEWAY_IMAGE, else the operator's)"
    )
    _input_command(
        sub,
        "validate",
        "check RewardModels and RLHFPipelines as the API server would, without rendering",
        validate_command,
    )

    crds = sub.add_parser("crds", help="print (or write) the CustomResourceDefinitions")
    crds.add_argument(
        "-o", "--output", choices=["yaml", "json"], default="yaml", help="yaml (documents) or json (a List)"
    )
    crds.add_argument("--output-dir", help="write one YAML file per CRD into this folder instead")
    crds.set_defaults(func=crds_command)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
