"""Kueue on the local control plane: its manager (``cmd/kueue``: the controllers, the scheduler and the
webhooks in one process) and its CRDs, both from the pinned Kueue module, an add-on.

Off by default (``TESTENV_KUEUE=1``, ``python -m testenv up --kueue`` or ``ControlPlane.up(kueue=True)`` bring it):
its build and its webhooks, which see every Job and pod, are for the tests of a RewardBatch's ``spec.queueName``.
Kueue v0.17 is built at its own k8s.io v0.35.3 libraries (``builds/go/kueue``) and tested by Kueue up to
Kubernetes 1.35; here it runs against the plane's 1.37.

What it installs, as Kueue's own ``config/default`` kustomization renders it (namespace ``kueue-system``, names
prefixed ``kueue-``), read from the module at set-up time:

- the CRDs of ``config/components/crd/bases`` (v1beta1 and v1beta2 served, v1beta2 stored), with the conversion
  webhooks that ``config/components/crd``'s patches add to five of them (``conversion_patches``);
- the mutating and validating webhook configurations of ``config/components/webhook/manifests.yaml`` with that
  folder's patches (pods, Deployments and StatefulSets outside ``kube-system`` and ``kueue-system`` only);
- the empty Secret ``kueue-webhook-server-cert`` (``config/components/internalcert``).

Certificates: Kueue's own (``internalCertManagement``, its default), not the control plane's CA as KServe's and
KEDA's. With it off, Kueue v0.17 reads its metrics server's certificate from the fixed path
``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``) and exits without it, and a host process has that path only
by writing to the host's ``/etc``. With it on, Kueue makes its CA and a serving certificate for
``kueue-webhook-service.kueue-system.svc``, keeps them in that Secret and injects the CA into both webhook
configurations and the five CRDs' conversion webhooks, as on a cluster. Two things a pod has and a host process
lacks are made here instead: the Service, an ExternalName whose name is ``localhost`` (as KEDA's APIService's):
kube-apiserver resolves it to ``localhost`` at the port the webhook configurations name, which is the webhook
server's on loopback, and verifies the certificate for the Service's name; and the Secret's volume: the kubelet
would mount it at the webhook server's certificate folder, where Kueue's certificate rotator waits for it
(``open-policy-agent/cert-controller`` writes only the Secret), so ``start`` writes the two files there once
Kueue has filled the Secret.

Its Configuration (``config.kueue.x-k8s.io/v1beta2``, ``configuration``): only the ``batch/job`` integration, and
``manageJobsWithoutQueueName: false`` (a Job is Kueue's only with the label ``kueue.x-k8s.io/queue-name``); the
webhook server, health probes and metrics on loopback ports; no leader election. The feature gate
``VisibilityOnDemand`` is off: its aggregated API server would listen on every interface at a fixed port (8082)
and needs an APIService; nothing here lists pending workloads through it. It runs with the admin kubeconfig, as
KServe's and KEDA's managers here (Kueue's ClusterRole is not installed). Nothing of it outlives ``down``: its
files are in the control plane's folder, its objects in etcd.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import yaml

from reward_testing import versions
from reward_testing.ports import free_port

from .. import builds
from ..plane.addon import AddOn, Plane, log, wait_by

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v" + versions.KUEUE  # the binary's and the manifests' (builds/go/kueue/go.mod requires it)

NAME = "kueue"  # the process's name in the State, and the binary's
NAMESPACE = "kueue-system"  # its Configuration's namespace: the Secret of its certificates
PREFIX = "kueue-"  # config/default's namePrefix
WEBHOOK_SERVICE = "kueue-webhook-service"  # internalCertManagement's webhookServiceName (its default)
WEBHOOK_SECRET = "kueue-webhook-server-cert"  # internalCertManagement's webhookSecretName (its default)
PORTS = ("kueue-webhook", "kueue-health", "kueue-metrics")
FEATURE_GATES = "VisibilityOnDemand=false"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # how a Job names its LocalQueue
MUTATING = f"{PREFIX}mutating-webhook-configuration"
VALIDATING = f"{PREFIX}validating-webhook-configuration"


def module_dir() -> Path:
    """The pinned Kueue module, downloaded (or found) in the Go module cache."""
    return builds.module_source(KUEUE_MODULE, KUEUE_VERSION)


def crd_files() -> list[Path]:
    """Kueue's CRDs as its ``config/components/crd`` kustomization lists them."""
    folder = module_dir() / "config" / "components" / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return [folder / path for path in kustomization["resources"]]


def service_reference(port: int, path: str) -> dict:
    """What a webhook's ``clientConfig.service`` names once kustomize has renamed it: the ExternalName Service
    that kube-apiserver resolves to localhost, at the webhook server's own port."""
    return {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": port}


def conversion_patches(port: int) -> dict[str, dict]:
    """CRD name -> the merge patch of its conversion webhook: the patches Kueue's CRD kustomization applies
    (``patches/webhook_in_*.yaml``), each Service reference pointed at ``service_reference``."""
    folder = module_dir() / "config" / "components" / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    patches: dict[str, dict] = {}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((folder / entry["path"]).read_text())
        conversion = patch["spec"]["conversion"]
        service = conversion["webhook"]["clientConfig"]["service"]
        conversion["webhook"]["clientConfig"]["service"] = service_reference(port, service["path"])
        patches[patch["metadata"]["name"]] = {"spec": {"conversion": conversion}}
    if not patches:
        raise FileNotFoundError(f"no conversion patches in {folder / 'kustomization.yaml'}")
    return patches


def _merge_webhook_patches(documents: list[dict], patches: list[dict]) -> None:
    """The webhook folder's strategic-merge patches (webhooks merged by name), in place."""
    by_name = {doc["metadata"]["name"]: doc for doc in documents}
    for patch in patches:
        target = by_name[patch["metadata"]["name"]]
        hooks = {hook["name"]: hook for hook in target["webhooks"]}
        for change in patch.get("webhooks") or []:
            hooks[change["name"]].update({key: value for key, value in change.items() if key != "name"})


def webhook_configurations(port: int) -> list[dict]:
    """Kueue's mutating and validating webhook configurations as its kustomization renders them (names prefixed,
    the folder's patches applied), each Service reference pointed at ``service_reference``. No caBundle: Kueue
    injects its own CA."""
    folder = module_dir() / "config" / "components" / "webhook"
    documents = [doc for doc in yaml.safe_load_all((folder / "manifests.yaml").read_text()) if doc]
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    _merge_webhook_patches(documents, [yaml.safe_load(entry["patch"]) for entry in kustomization.get("patches") or []])
    for doc in documents:
        doc["metadata"].pop("creationTimestamp", None)
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            service = hook["clientConfig"]["service"]
            hook["clientConfig"] = {"service": service_reference(port, service["path"])}
    return documents


def cluster_objects() -> list[dict]:
    """The namespace, the ExternalName Service kube-apiserver reaches the webhook server through, and the empty
    Secret Kueue keeps its certificates in (its rotator fills it; it does not create it)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE}},
    ]


def configuration(ports: dict[str, int], cert_dir: Path) -> dict:
    """Kueue's Configuration: the upstream one (``config/components/manager/controller_manager_config.yaml``)
    with only what the test bed needs changed."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue-health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue-metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["kueue-webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
    }


def command(binary: Path, kubeconfig: str, config: Path) -> list[str]:
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--feature-gates={FEATURE_GATES}",
        "--zap-log-level=2",  # as Kueue's Deployment runs it
    ]


def probe_job(namespace: str = "default") -> dict:
    """A Job on a queue, for a server dry run: Kueue's defaulting webhook suspends it (its queue need not exist)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "testenv-kueue-probe", "namespace": namespace, "labels": {QUEUE_LABEL: "testenv-probe"}},
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "testenv/probe", "command": ["true"]}],
                }
            },
        },
    }


def probe_cluster_queue_v1beta1() -> dict:
    """A ClusterQueue in the served but not stored version, for a server dry run: the API server converts it
    through Kueue's conversion webhook before Kueue's admission webhooks see it."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "testenv-kueue-probe"},
        "spec": {"namespaceSelector": {}, "cohort": "testenv-probe"},
    }


def _certificates_in(secret: dict) -> dict[str, bytes] | None:
    data = secret.get("data") or {}
    if not data.get("tls.crt") or not data.get("tls.key"):
        return None
    return {name: base64.b64decode(data[name]) for name in ("tls.crt", "tls.key")}


class Kueue(AddOn):
    """The add-on: its CRDs from the start; its objects, then the manager, then its Secret's certificates written
    where a pod would have them mounted; ready once its readiness probe answers and kube-apiserver reaches its
    webhooks (a Job on a queue suspended, a v1beta1 ClusterQueue converted) in a dry run."""

    name = "kueue"  # off unless asked for (TESTENV_KUEUE=1): its build, and webhooks every Job and pod go through
    title = f"Kueue {KUEUE_VERSION}"
    probe = (f"mutatingwebhookconfiguration/{MUTATING}", "Kueue's webhooks are not installed")
    processes = (NAME,)
    build_components = ("kueue",)

    def __init__(self) -> None:
        self.started = 0.0

    def crds(self) -> list[dict | Path]:
        return [*crd_files()]

    @staticmethod
    def cert_dir(directory: Path) -> Path:
        """Where Kueue's webhook server reads ``tls.crt`` and ``tls.key``: a pod's Secret volume, here a folder
        of the control plane's."""
        return directory / NAME / "certs"

    def start(self, plane: Plane, deadline: float) -> None:
        """Kueue's objects and conversion webhooks, then its manager, then its certificates on its disk."""
        log(f"starting Kueue {KUEUE_VERSION} (controllers, scheduler, webhooks)")
        for port in PORTS:
            plane.state.ports[port] = free_port()
        ports = plane.state.ports
        apply = ("apply", "--server-side", "--field-manager=testenv", "-f", "-")
        plane.kubectl(*apply, input=yaml.safe_dump_all(cluster_objects()))
        for crd, patch in conversion_patches(ports["kueue-webhook"]).items():
            plane.kubectl("patch", "crd", crd, "--type=merge", "-p", json.dumps(patch))
        plane.kubectl(*apply, input=yaml.safe_dump_all(webhook_configurations(ports["kueue-webhook"])))
        cert_dir = self.cert_dir(plane.directory)
        cert_dir.mkdir(parents=True, exist_ok=True)
        config = plane.directory / NAME / "configuration.yaml"
        config.write_text(yaml.safe_dump(configuration(ports, cert_dir)))
        env = dict(os.environ, KUBECONFIG=plane.state.kubeconfig)
        plane.spawn(NAME, command(plane.bin / NAME, plane.state.kubeconfig, config), env=env)
        self.started = time.monotonic()

        # what the kubelet does for Kueue's pod: the Secret's keys as files in the webhook server's folder. Kueue
        # fills the Secret first, then waits for the files (polling at growing intervals): written at once here.
        def filled() -> dict[str, bytes] | None:
            plane.fail_if_exited(NAME)
            found = plane.kubectl("get", "secret", WEBHOOK_SECRET, "-n", NAMESPACE, "-o", "json", check=False)
            return _certificates_in(json.loads(found.stdout)) if found.returncode == 0 else None

        certificates = wait_by(deadline, f"Kueue's certificates in Secret {NAMESPACE}/{WEBHOOK_SECRET}", filled)
        for file, content in certificates.items():
            (cert_dir / file).write_bytes(content)
        log(f"Kueue's certificates made {time.monotonic() - self.started:.1f}s after its start; on its disk")

    def wait(self, plane: Plane, deadline: float) -> None:
        """Its readiness probe (certificates in place and its CA injected, the webhook server listening), then
        its webhooks through kube-apiserver: a Job on a queue defaulted suspended, a v1beta1 ClusterQueue
        converted and admitted (both dry runs)."""
        plane.wait_healthy(f"http://127.0.0.1:{plane.state.ports['kueue-health']}/readyz", deadline, NAME, tls=False)
        log(f"Kueue ready {time.monotonic() - self.started:.1f}s after its start")
        job = json.dumps(probe_job())
        cluster_queue = json.dumps(probe_cluster_queue_v1beta1())

        def dry_run(manifest: str) -> dict | None:
            plane.fail_if_exited(NAME)
            result = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=manifest, check=False)
            return json.loads(result.stdout) if result.returncode == 0 else None

        def spec(manifest: str) -> dict:
            return (dry_run(manifest) or {}).get("spec") or {}

        wait_by(deadline, "Kueue's Job webhook (a dry-run Job on a queue suspended)",
                lambda: spec(job).get("suspend") is True)  # fmt: skip
        wait_by(deadline, "Kueue's conversion webhook (a dry-run v1beta1 ClusterQueue)",
                lambda: spec(cluster_queue).get("cohort") == "testenv-probe")  # fmt: skip
        log(f"Kueue's webhooks answering {time.monotonic() - self.started:.1f}s after its start")

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {NAME: (f"http://127.0.0.1:{ports.get('kueue-health')}/readyz", False)}
