"""KServe on the local control plane: its full CRDs, read from the pinned Go module (every control plane
installs them), and its own manager (InferenceService controller and webhooks), an add-on.

The CRDs are never committed: they come from the module download of the pinned KServe release at set-up
time, so the schemas that validate our rendered children are exactly the ones KServe ships.

The manager is on by default (``TESTENV_KSERVE=0``, ``python -m testenv up --no-kserve`` or
``ControlPlane.up(kserve=False)`` leave it out): with it, InferenceServices are defaulted and
validated by KServe's webhooks, their pods get KServe's storage-initializer, and
they turn Ready because KServe's controller says so. The manager runs as one more
process of the control plane, set up as KServe's own install sets it up: the
``kserve`` namespace, the ``inferenceservice-config`` ConfigMap and the webhook
configurations all come from the pinned KServe module's ``config/``; only the
addresses differ (the webhooks call 127.0.0.1 instead of an in-cluster Service).
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import yaml

from reward_testing import pki, versions
from reward_testing.ports import free_port

from .. import builds, images
from ..plane.addon import AddOn, Plane, log, wait_by

KSERVE_MODULE = "github.com/kserve/kserve"
KSERVE_VERSION = "v" + versions.KSERVE  # its tag, and its Go module's version
# Sub-folders of config/crd/full whose CRDs we install. llmisvc is left out: its
# CRDs expect KServe's conversion webhook, which does not run here.
CRD_FOLDERS = (".", "localmodel", "clusterstoragecontainer")

NAME = "kserve-manager"  # process name in the State, and binary name
NAMESPACE = "kserve"  # POD_NAMESPACE: where the manager reads its ConfigMap
CONFIGMAP = "inferenceservice-config"
PORTS = ("kserve-metrics", "kserve-health", "kserve-webhook")


def module_dir() -> Path:
    return builds.module_source(KSERVE_MODULE, KSERVE_VERSION)


def crd_files() -> list[Path]:
    full = module_dir() / "config" / "crd" / "full"
    files: list[Path] = []
    for folder in CRD_FOLDERS:
        files += sorted((full / folder).glob("serving.kserve.io_*.yaml"))
    if not files:
        raise FileNotFoundError(f"no CRDs under {full}")
    return files


def inference_service_config() -> dict:
    """KServe's shipped ConfigMap, its storage initializer's and router's images aside.

    deploy.defaultDeploymentMode stays Knative (Serverless): our objects set the mode
    explicitly, and one that forgets gets KServe's real answer (Knative is not
    installed here) instead of a quiet Standard. ingress keeps its defaults: Standard
    mode then creates an Ingress of class istio that nothing routes, which KServe
    counts as IngressReady as soon as the predictor is.
    """
    path = module_dir() / "config" / "configmap" / "inferenceservice.yaml"
    config = yaml.safe_load(path.read_text())
    config["metadata"]["namespace"] = NAMESPACE
    # One change: the storage initializer's image is the one built here from KServe's own storage
    # package of the same release (testenv.images), since no registry is reachable. Pods on the real
    # node run it; kwok's fake ones never pull it.
    initializer = json.loads(config["data"]["storageInitializer"])
    initializer["image"] = images.STORAGE_INITIALIZER_IMAGE
    config["data"]["storageInitializer"] = json.dumps(initializer, indent=2)
    # Likewise the InferenceGraph's router: cmd/router of the same module (testenv.images), for the graphs on
    # the real node (make pipeline-real).
    router = json.loads(config["data"]["router"])
    router["image"] = images.ROUTER_IMAGE
    config["data"]["router"] = json.dumps(router, indent=2)
    return config


def webhook_configurations(port: int, ca_bundle: bytes, manifests: str = "manifests.yaml") -> list[dict]:
    """KServe's webhook configurations (``config/webhook/<manifests>`` of its module), each Service
    reference replaced by the local address of the process that serves them."""
    path = module_dir() / "config" / "webhook" / manifests
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for doc in documents:
        doc["metadata"].pop("creationTimestamp", None)
        for hook in doc["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{service['path']}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
    return documents


def serving_certificate(keys: pki.Pki, cert_dir: Path) -> None:
    """tls.crt/tls.key for the webhook server, signed by the control plane's CA, which the
    webhook configurations name as caBundle."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    extensions = [
        "basicConstraints=critical,CA:FALSE",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth",
        "subjectAltName=IP:127.0.0.1",
    ]
    pki.issue(cert_dir, "tls", "/CN=kserve-webhook-server", extensions, (keys.ca_cert, keys.ca_key))


def manager_command(binary: Path, kubeconfig: str, ports: dict[str, int], prefix: str = "kserve") -> list[str]:
    """One of KServe's controller-runtime managers (the manager, the LocalModel controller) on the ports named
    ``<prefix>-metrics``, ``-health`` and ``-webhook``."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--metrics-addr=127.0.0.1:{ports[f'{prefix}-metrics']}",
        f"--health-probe-addr=127.0.0.1:{ports[f'{prefix}-health']}",
        f"--webhook-port={ports[f'{prefix}-webhook']}",
    ]


def manager_env(scratch: Path) -> dict[str, str]:
    """POD_NAMESPACE tells the manager where its ConfigMap is. It has no certificate
    flag: controller-runtime's default is $TMPDIR/k8s-webhook-server/serving-certs,
    so TMPDIR points at ``scratch`` (see ``cert_dir``)."""
    return dict(os.environ, POD_NAMESPACE=NAMESPACE, TMPDIR=str(scratch))


def cert_dir(scratch: Path) -> Path:
    return scratch / "k8s-webhook-server" / "serving-certs"


def probe_inference_service() -> dict:
    """An InferenceService for a server dry run: KServe's defaulter gives it protocolVersion v2."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "testenv-webhook-probe",
            "namespace": NAMESPACE,
            "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
        },
        "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "storageUri": "hf://testenv/probe"}}},
    }


def defaulted_protocol(inference_service: dict) -> str | None:
    return inference_service["spec"]["predictor"]["model"].get("protocolVersion")


class KServeManager(AddOn):
    """The add-on: started while the fake nodes register, ready once its webhooks default a dry run. Every
    add-on's ``kserve_config`` edits its ConfigMap before it starts (LocalModel's: localModel enabled)."""

    name = "kserve"
    title = f"KServe {KSERVE_VERSION} manager"
    default = True  # TESTENV_KSERVE=0 leaves it out: a control plane without it starts faster and builds less
    probe = ("mutatingwebhookconfiguration/inferenceservice.serving.kserve.io", "KServe's webhooks are not installed")
    processes = (NAME,)
    build_components = ("kserve",)
    images = ("storage-initializer",)  # what its webhook injects into a predictor that downloads its model
    starts_with_the_nodes = True

    def __init__(self) -> None:
        self.started = 0.0

    def start(self, plane: Plane, deadline: float) -> None:
        """Namespace, ConfigMap and serving certificate, then KServe's manager (its CRDs are installed)."""
        log(f"starting KServe {KSERVE_VERSION} manager (controller and webhooks)")
        for name in PORTS:
            plane.state.ports[name] = free_port()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        config = inference_service_config()
        for add_on in plane.add_ons:
            config = add_on.kserve_config(config)
        plane.kubectl(
            "apply", "--server-side", "--field-manager=testenv", "-f", "-",
            input=yaml.safe_dump_all([namespace, config]),
        )  # fmt: skip
        scratch = plane.directory / "kserve-manager"
        serving_certificate(plane.keys, cert_dir(scratch))
        plane.spawn(NAME, manager_command(plane.bin / NAME, plane.state.kubeconfig, plane.state.ports),
                    env=manager_env(scratch))  # fmt: skip
        self.started = time.monotonic()

    def wait(self, plane: Plane, deadline: float) -> None:
        """Health probe, then KServe's webhooks registered and answering through the API server."""
        # healthz is the webhook server's own started-check: a TLS dial of its port
        plane.wait_healthy(f"http://127.0.0.1:{plane.state.ports['kserve-health']}/healthz", deadline, NAME, tls=False)
        log(f"KServe manager healthy {time.monotonic() - self.started:.1f}s after its start; registering its webhooks")
        hooks = webhook_configurations(plane.state.ports["kserve-webhook"], plane.keys.ca_cert.read_bytes())
        plane.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump_all(hooks))
        probe = json.dumps(probe_inference_service())

        def defaulted() -> bool:
            plane.fail_if_exited(NAME)
            result = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            return result.returncode == 0 and defaulted_protocol(json.loads(result.stdout)) == "v2"

        wait_by(
            deadline, "KServe's defaulting webhook (a dry-run InferenceService given protocolVersion v2)", defaulted
        )
        log(f"KServe webhooks answering {time.monotonic() - self.started:.1f}s after the manager's start")

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {NAME: (f"http://127.0.0.1:{ports.get('kserve-health')}/healthz", False)}
