"""KServe's own manager (InferenceService controller and webhooks) on the local control plane.

On by default (``TESTENV_KSERVE=0``, ``python -m testenv up --no-kserve`` or
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
from pathlib import Path

import yaml

from reward_testing import pki

from . import images, kserve

NAME = "kserve-manager"  # process name in the State, and binary name
NAMESPACE = "kserve"  # POD_NAMESPACE: where the manager reads its ConfigMap
CONFIGMAP = "inferenceservice-config"
PORTS = ("kserve-metrics", "kserve-health", "kserve-webhook")


def enabled_by_env() -> bool:
    """KServe runs unless TESTENV_KSERVE=0 (a control plane without it starts faster and builds less)."""
    return os.environ.get("TESTENV_KSERVE", "1") != "0"


def inference_service_config() -> dict:
    """KServe's shipped ConfigMap, its storage initializer's image aside.

    deploy.defaultDeploymentMode stays Knative (Serverless): our objects set the mode
    explicitly, and one that forgets gets KServe's real answer (Knative is not
    installed here) instead of a quiet Standard. ingress keeps its defaults: Standard
    mode then creates an Ingress of class istio that nothing routes, which KServe
    counts as IngressReady as soon as the predictor is.
    """
    path = kserve.module_dir() / "config" / "configmap" / "inferenceservice.yaml"
    config = yaml.safe_load(path.read_text())
    config["metadata"]["namespace"] = NAMESPACE
    # One change: the storage initializer's image is the one built here from KServe's own storage
    # package of the same release (images.py), since no registry is reachable. Pods on the real
    # node run it; kwok's fake ones never pull it.
    initializer = json.loads(config["data"]["storageInitializer"])
    initializer["image"] = images.STORAGE_INITIALIZER_IMAGE
    config["data"]["storageInitializer"] = json.dumps(initializer, indent=2)
    return config


def webhook_configurations(port: int, ca_bundle: bytes, manifests: str = "manifests.yaml") -> list[dict]:
    """KServe's webhook configurations (``config/webhook/<manifests>`` of its module), each Service
    reference replaced by the local address of the process that serves them."""
    path = kserve.module_dir() / "config" / "webhook" / manifests
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


def manager_command(binary: Path, kubeconfig: str, ports: dict[str, int]) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--metrics-addr=127.0.0.1:{ports['kserve-metrics']}",
        f"--health-probe-addr=127.0.0.1:{ports['kserve-health']}",
        f"--webhook-port={ports['kserve-webhook']}",
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
