"""Knative Serving with Kourier on the real node: KServe's Knative mode (Serverless) run for real.

On by default wherever the real node runs (``TESTENV_KNATIVE=0``, ``python -m testenv up --no-knative`` or
``ControlPlane.up(knative=False)`` leave it out; it needs the node: its every part is a pod there). Knative
Serving v0.48.1 (Knative 1.21.1, the release KServe v0.20.0 pins) and net-kourier v0.48.0 (versions.env),
both from ``builds/go/knative``: serving's controller, webhook, autoscaler and activator, Kourier's
controller, and Envoy (Kourier's gateway) run as the pods Knative's own manifests describe, from images
built here (``images.catalogue.KNATIVE_IMAGES``); queue-proxy is the image Knative adds beside each
revision's container.

The manifests are the modules' own ``config/`` folders, read at set-up time from the Go module cache and
never committed. Module zips drop symlinks, so the files serving's ``config/core`` links to come from the
modules they point into: the networking CRDs and ``config-network`` from ``knative.dev/networking``, the
``images.caching`` CRD from ``knative.dev/caching``, each at the version builds/go/knative resolves. What this test
bed changes is applied here, each with its reason (``configure``): the images, the namespaces pinned to the
real node, CPU requests that fit its two cores, the settings KServe's Knative mode needs on a cluster without
Istio (Kourier as the ingress class, cluster-local domains, tag resolution off for images no registry
holds), and on KServe's side ``disableIstioVirtualHost`` (``kserve_config``).

How a request travels (nothing stands in): a client calls ``<isvc>-transformer.<ns>.svc.cluster.local``, an
ExternalName Service to ``kourier-internal``; Envoy routes it by host to the revision's endpoints, which are
the activator's while the revision is at zero (the activator holds the request and asks the autoscaler for
a pod) and the pods' own once they are up; queue-proxy in each pod counts the requests for the autoscaler.
The gateway reaches vLLM the same way, at ``<isvc>-predictor.<ns>.svc.cluster.local``.

Nothing of Knative runs on the host, so it leaves nothing there of its own (its ``leftovers`` are none):
``down`` removes it with the node's pods and kube-proxy's rules, and the node-host suite wakes a Knative
Service through Envoy and the activator between ``up`` and the host's comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from reward_testing import versions

from .. import builds, images
from ..node.facts import namespace_for_real_node
from ..plane.addon import AddOn, Leftovers, Plane, kubectl_wait, log, wait_by

SERVING_MODULE = "knative.dev/serving"
KOURIER_MODULE = "knative.dev/net-kourier"
NETWORKING_MODULE = "knative.dev/networking"
CACHING_MODULE = "knative.dev/caching"
# The pins (versions.env): what builds/go/knative/go.mod requires, so the binaries and the manifests agree.
SERVING_VERSION = "v" + versions.KNATIVE_SERVING
KOURIER_VERSION = "v" + versions.KNATIVE_KOURIER

NAMESPACE = "knative-serving"  # serving's components and Kourier's controller
GATEWAY_NAMESPACE = "kourier-system"  # Envoy
INGRESS_CLASS = "kourier.ingress.networking.knative.dev"
# Cluster-local URLs: routes are named <name>.<namespace>.svc.cluster.local, which CoreDNS resolves (an
# ExternalName to kourier-internal) and Kourier routes by host.
DOMAIN = "svc.cluster.local"

# The images every Knative pod runs (images.catalogue), by the Go package a manifest's ko:// reference names.
KO_IMAGES = {
    **{f"ko://{SERVING_MODULE}/cmd/{name}": f"knative-{name}" for name in ("activator", "autoscaler", "controller",
                                                                           "queue", "webhook")},
    f"ko://{KOURIER_MODULE}/cmd/kourier": "knative-kourier",
}  # fmt: skip
IMAGES = (*KO_IMAGES.values(), "envoy")
DEPLOYMENTS = {
    NAMESPACE: ("activator", "autoscaler", "controller", "webhook", "net-kourier-controller"),
    GATEWAY_NAMESPACE: ("3scale-kourier-gateway",),
}

# Serving's config/core, in apply order: what a pod reads before it starts, Knative's admission webhooks last
# (they validate Knative's own ConfigMaps, and would refuse them until the webhook's pod answers; manifests()
# moves them after Kourier's too).
SERVING_CORE = (
    "100-namespace.yaml",
    "200-serviceaccount.yaml",
    "200-roles/*.yaml",
    "configmaps/*.yaml",
    "300-knativecertificate.yaml",
    "999-cache.yaml",
    "deployments/*.yaml",
    "webhooks/*.yaml",
)
KOURIER_CONFIG = (
    "100-namespace.yaml",
    "200-serviceaccount.yaml",
    "200-config.yaml",
    "200-bootstrap.yaml",
    "300-controller.yaml",
    "300-gateway.yaml",
)
# The files serving's repository links in from networking and caching (the module zip drops the links).
NETWORKING_CRDS = ("certificate.yaml", "domain-claim.yaml", "ingress.yaml", "serverlessservice.yaml")

# Every Knative container asks for this much CPU instead of its manifest's 100-300m: the real node has two
# cores, and a RewardModel's vLLM asks for 1.5 of them. The limits stay as Knative sets them, so the
# activator and Envoy still take what a burst needs while vLLM is idle.
SYSTEM_CPU_REQUEST = "10m"


def module_dir(module: str) -> Path:
    """A Knative module at the version builds/go/knative resolves (networking's and caching's: as serving needs
    them), downloaded (or found) in the Go module cache."""
    return builds.module_source(module, required_version(module))


def required_version(module: str) -> str:
    """The version of ``module`` that builds/go/knative/go.mod requires."""
    for line in (builds.GO_DIR / "knative" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    raise LookupError(f"{module} is not required by builds/go/knative/go.mod")


def _documents(paths: Iterable[Path]) -> list[dict]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def _files(folder: Path, patterns: Iterable[str]) -> list[Path]:
    found = []
    for pattern in patterns:
        matched = sorted(folder.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"{pattern} is missing from {folder}")
        found += matched
    return found


def crds() -> list[dict]:
    """Serving's CRDs, the networking ones it links (KIngress, ServerlessService, Certificate, domain claims)
    and the image cache's: all Knative's controllers and KServe's manager look for at start-up."""
    serving = module_dir(SERVING_MODULE) / "config" / "core" / "300-resources"
    documents = _documents(_files(serving, ["*.yaml"]))
    documents += _documents(_files(module_dir(NETWORKING_MODULE) / "config", NETWORKING_CRDS))
    documents += _documents([module_dir(CACHING_MODULE) / "config" / "image.yaml"])
    return documents


def manifests() -> list[dict]:
    """Serving's config/core (with config-network from networking) and Kourier's config/, as this test bed
    runs them (``configure``), in apply order."""
    core = _documents(_files(module_dir(SERVING_MODULE) / "config" / "core", SERVING_CORE))
    network = _documents([module_dir(NETWORKING_MODULE) / "config" / "config-network.yaml"])
    # config-network beside the other ConfigMaps: before the deployments that read it
    first_deployment = next(i for i, doc in enumerate(core) if doc["kind"] == "Deployment")
    core[first_deployment:first_deployment] = network
    kourier = _documents(_files(module_dir(KOURIER_MODULE) / "config", KOURIER_CONFIG))
    # Knative's admission webhooks last, after every ConfigMap (Kourier's too)
    documents = sorted([*core, *kourier], key=lambda doc: doc["kind"].endswith("WebhookConfiguration"))
    return configure(documents)


def _image_refs() -> dict[str, str]:
    return {ko: images.BY_NAME[name].ref for ko, name in KO_IMAGES.items()}


def _config_data(name: str) -> dict[str, str]:
    """The settings of Knative's ConfigMap ``name`` this test bed needs (its other keys stay Knative's)."""
    return {
        "config-network": {
            # Kourier is the networking layer: no Istio, Contour or Gateway API here
            "ingress-class": INGRESS_CLASS,
        },
        "config-domain": {
            # every route cluster-local, at a name CoreDNS resolves
            DOMAIN: "",
        },
        "config-deployment": {
            "queue-sidecar-image": images.BY_NAME["knative-queue"].ref,
            # Knative resolves each container's tag to a digest at a registry, which no pod image here is in:
            # our names (reward-operator-..., no host) parse as Docker Hub's, so it is skipped with the
            # local names Knative already skips
            "registries-skipping-tag-resolving": "kind.local,ko.local,dev.local,index.docker.io",
        },
    }.get(name, {})


def configure(documents: list[dict]) -> list[dict]:
    """Knative's manifests as the real node runs them; everything else stays as Knative ships it."""
    refs = _image_refs()
    for doc in documents:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Namespace":
            # every Knative pod runs on the real node (kwok's fake nodes would fake them)
            pinned = namespace_for_real_node(name, doc["metadata"].get("labels"))
            doc["metadata"].setdefault("annotations", {}).update(pinned["metadata"]["annotations"])
        elif kind == "ConfigMap" and (settings := _config_data(name)):
            doc["data"] = {**(doc.get("data") or {}), **settings}
        elif kind == "Image":  # Knative's image cache entry for queue-proxy
            doc["spec"]["image"] = refs.get(doc["spec"]["image"], doc["spec"]["image"])
        elif kind == "Service" and doc["spec"].get("type") == "LoadBalancer":
            # Kourier's external gateway Service: no load balancer here, and every route is cluster-local;
            # a NodePort would open ports on the host's every address for nothing
            doc["spec"]["type"] = "ClusterIP"
        elif kind == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                _run_here(container, refs)
    return documents


def _run_here(container: dict[str, Any], refs: dict[str, str]) -> None:
    image = container["image"]
    if image.startswith("ko://"):
        container["image"] = refs[image]
    elif "envoy" in image:
        _check_envoy(image)
        container["image"] = images.BY_NAME["envoy"].ref
        # its preStop drains through curl, which the image has not: the pods go with the node in any case
        container.pop("lifecycle", None)
    else:
        raise ValueError(f"no image built here for Knative's {container['name']} ({image})")
    requests = container.setdefault("resources", {}).setdefault("requests", {})
    requests["cpu"] = SYSTEM_CPU_REQUEST


def _check_envoy(image: str) -> None:
    """The gateway manifest names the Envoy release it expects (``envoy:v1.36-latest``): the one built here
    must be of it, or a bump of net-kourier would run an Envoy it was not made for."""
    wanted = image.rsplit(":", 1)[-1].removeprefix("v").removesuffix("-latest")
    if not versions.ENVOY.startswith(wanted + "."):
        raise ValueError(f"net-kourier {KOURIER_VERSION} expects Envoy {wanted}, the image is {versions.ENVOY}")


def kserve_config(config: dict) -> dict:
    """KServe's ConfigMap for Knative without Istio: ``disableIstioVirtualHost``. KServe otherwise points each
    InferenceService's own name at Istio's local gateway (an ExternalName to knative-local-gateway) and
    publishes that as its address; with it, the address is the component's route, which Kourier serves."""
    ingress = json.loads(config["data"]["ingress"])
    ingress["disableIstioVirtualHost"] = True
    config["data"]["ingress"] = json.dumps(ingress, indent=2)
    return config


def probe_service() -> dict:
    """A Knative Service for a server dry run: Knative's defaulting webhook gives it a timeout."""
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "testenv-webhook-probe", "namespace": NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{"image": images.BY_NAME["knative-queue"].ref}]}}},
    }


def defaulted_timeout(service: dict) -> int | None:
    return service["spec"]["template"]["spec"].get("timeoutSeconds")


class Knative(AddOn):
    """The add-on: Knative's CRDs with KServe's and ours, before KServe's manager starts (which looks for the
    Knative Service CRD once, at its start, and refuses Knative mode without it), and KServe's ConfigMap for
    Knative without Istio; its pods applied once the real node is Ready (which imported its images), ready once
    every Deployment is available and Knative's webhook defaults a dry run."""

    name = "knative"
    title = f"Knative Serving {SERVING_VERSION} with Kourier {KOURIER_VERSION}"
    comes_with = ("node",)  # on wherever the real node runs (TESTENV_KNATIVE=0 leaves it out)
    requires = ("node",)  # its every part is a pod there
    probe = ("validatingwebhookconfiguration/validation.webhook.serving.knative.dev", "no Knative Serving")
    build_components = ("knative",)
    images = IMAGES
    # nothing of its own on the host: its pods go with the node's, its Services' rules with kube-proxy's, and
    # Kourier's external Service is a ClusterIP (no NodePort on the host's addresses)
    leftovers = Leftovers()

    def __init__(self) -> None:
        self.started = 0.0

    def crds(self) -> list[dict | Path]:
        return [*crds()]

    def kserve_config(self, config: dict) -> dict:
        return kserve_config(config)

    def start(self, plane: Plane, deadline: float) -> None:
        log(f"starting {self.title} on the real node")
        self.started = time.monotonic()
        plane.kubectl(
            "apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump_all(manifests())
        )

    def wait(self, plane: Plane, deadline: float) -> None:
        """Each Deployment Available (Envoy's pod is Ready once Kourier's controller has configured it), then
        Knative's webhook defaulting a dry-run Knative Service through the API server."""
        for namespace, names in DEPLOYMENTS.items():
            kubectl_wait(plane, deadline, "condition=Available", "-n", namespace, *[f"deployment/{n}" for n in names])
        log(f"Knative's and Kourier's pods ready {time.monotonic() - self.started:.1f}s after the start")
        probe = json.dumps(probe_service())

        def defaulted() -> bool:
            result = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            return result.returncode == 0 and defaulted_timeout(json.loads(result.stdout)) is not None

        wait_by(deadline, "Knative's defaulting webhook (a dry-run Knative Service given a timeout)", defaulted)
        log(f"Knative's webhook answering {time.monotonic() - self.started:.1f}s after the start")
