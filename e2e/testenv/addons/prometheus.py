"""Prometheus on the real node, configured by prometheus-operator from the chart's monitoring objects.

`make prometheus-real` only (``TESTENV_PROMETHEUS=1``; it needs the real node). Nothing here writes a scrape
configuration or a rule file:

- prometheus-operator (builds/go/prometheus-operator: its own Go module) runs as a recorded process of the
  test bed with the admin's client certificate, as KServe's manager does: the add-on ``PrometheusOperator``;
- its CRDs are its own (the module's ``example/prometheus-operator-crd``), as every suite's are;
- a ``Prometheus`` object selects every ServiceMonitor, PodMonitor and PrometheusRule; prometheus-operator
  turns them into the configuration and rule files of a StatefulSet it makes, and its config reloader
  keeps the running server in step;
- that StatefulSet runs on the real node, from images of the Prometheus server of promtool's release
  (builds/go/prometheus) and of prometheus-operator's reloader, built here (``images.PROMETHEUS_IMAGES``).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

from .. import builds, images
from ..helpers import answers_ok
from ..node import facts as node
from ..plane.addon import AddOn, Plane, log

OPERATOR = "prometheus-operator"  # the recorded process's name, and its binary's
OPERATOR_PORT = "prometheus-operator-web"
NAME = "rewards"  # the Prometheus object's, so the pod is prometheus-rewards-0
PORT = 9090
PROMETHEUS_IMAGE = images.BY_NAME["prometheus"].ref
RELOADER_IMAGE = images.BY_NAME["prometheus-config-reloader"].ref
INTERVAL = "5s"  # scrape and rule evaluation: a test sees a new series within seconds


def crd_files(plurals: tuple[str, ...] = ()) -> list[Path]:
    """prometheus-operator's CRDs (those of ``plurals``, else all), at the version its binary is built from."""
    source = builds.module_source(
        "github.com/prometheus-operator/prometheus-operator", "v" + builds.PROMETHEUS_OPERATOR_RELEASE
    )
    files = sorted((source / "example" / "prometheus-operator-crd").glob("monitoring.coreos.com_*.yaml"))
    chosen = [path for path in files if not plurals or path.stem.split("_", 1)[1] in plurals]
    if missing := set(plurals) - {path.stem.split("_", 1)[1] for path in chosen}:
        raise LookupError(f"prometheus-operator {builds.PROMETHEUS_OPERATOR_RELEASE} has no CRD of {sorted(missing)}")
    return chosen


def install_crds(cluster, plurals: tuple[str, ...] = ()) -> None:
    """prometheus-operator's CRDs (those of ``plurals``, else all), applied server-side (they are too large for
    the last-applied annotation); Established before anything uses them."""
    names = []
    for path in crd_files(plurals):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=testenv", "-f", str(path))
        # the name from the file's (monitoring.coreos.com_<plural>.yaml): PyYAML cannot read every one of them
        names.append(f"crd/{path.stem.split('_', 1)[1]}.monitoring.coreos.com")
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=120s")


def operator_command(binary: str, api_server: str, pki: Path, port: int) -> list[str]:
    return [
        binary,
        f"--apiserver={api_server}",
        f"--cert-file={pki / 'admin.crt'}",
        f"--key-file={pki / 'admin.key'}",
        f"--ca-file={pki / 'ca.crt'}",
        f"--prometheus-config-reloader={RELOADER_IMAGE}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]


class PrometheusOperator(AddOn):
    """The add-on: prometheus-operator with its CRDs, its images on the real node (the Prometheus it makes runs
    there); ready once its own web server's /healthz answers. A test applies the ``Prometheus`` object
    (``objects``)."""

    name = "prometheus"
    title = f"prometheus-operator v{builds.PROMETHEUS_OPERATOR_RELEASE}"
    requires = ("node",)
    probe = ("crd/prometheuses.monitoring.coreos.com", "prometheus-operator's CRDs are not installed")
    processes = (OPERATOR,)
    build_components = ("prometheus-operator",)
    images = tuple(image.name for image in images.PROMETHEUS_IMAGES)

    def crds(self) -> list[dict | Path]:
        return [*crd_files()]

    def start(self, plane: Plane, deadline: float) -> None:
        log(f"starting {self.title}")
        port = plane.state.ports[OPERATOR_PORT] = free_port()
        plane.spawn(OPERATOR, operator_command(str(plane.bin / OPERATOR), plane.state.api_server,
                                               plane.directory / "pki", port))  # fmt: skip

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {OPERATOR: (f"http://127.0.0.1:{ports.get(OPERATOR_PORT)}/healthz", False)}


def objects(namespace: str) -> list[dict]:
    """The Prometheus object on the real node, selecting every monitor and rule in the cluster, and the
    RBAC its Kubernetes service discovery needs (prometheus-operator's documented ClusterRole)."""
    account = f"prometheus-{NAME}"
    labels = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/instance": NAME}
    everything: dict = {}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{namespace}-{account}", "labels": labels},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-{account}", "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{namespace}-{account}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {
                "version": f"v{builds.PROMETHEUS_RELEASE}",
                "image": PROMETHEUS_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "replicas": 1,
                "serviceAccountName": account,
                "scrapeInterval": INTERVAL,
                "evaluationInterval": INTERVAL,
                "serviceMonitorSelector": everything,
                "serviceMonitorNamespaceSelector": everything,
                "podMonitorSelector": everything,
                "podMonitorNamespaceSelector": everything,
                "ruleSelector": everything,
                "ruleNamespaceSelector": everything,
                "nodeSelector": {node.LABEL[0]: node.LABEL[1]},
                "tolerations": [{"key": node.TAINT["key"], "operator": "Exists", "effect": node.TAINT["effect"]}],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "fsGroup": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            },
        },
    ]


def pod_address(cluster, namespace: str) -> str | None:
    """The running Prometheus pod's address (its IP, which the host reaches through the node's bridge)."""
    result = cluster.kubectl("get", "pod", f"prometheus-{NAME}-0", "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    pod = json.loads(result.stdout)
    ready = all(status.get("ready") for status in pod["status"].get("containerStatuses", [{}]))
    return pod["status"].get("podIP") if ready and pod["status"].get("phase") == "Running" else None


class Api:
    """Prometheus's HTTP API (``/api/v1``) at ``base``."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def get(self, path: str, **params: str) -> dict | list:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.base}/api/v1/{path}{query}", timeout=30) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's series (an empty list: no series)."""
        data = self.get("query", query=expr)
        assert isinstance(data, dict)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data]

    def targets(self) -> list[dict]:
        data = self.get("targets", state="active")
        assert isinstance(data, dict)
        return data["activeTargets"]

    def rule_groups(self) -> list[dict]:
        data = self.get("rules")
        assert isinstance(data, dict)
        return data["groups"]

    def alerts(self) -> list[dict]:
        data = self.get("alerts")
        assert isinstance(data, dict)
        return data["alerts"]


def wait_for_api(cluster, namespace: str, timeout: float = 600) -> Api:
    """The Prometheus pod Ready (prometheus-operator made its StatefulSet; the images are on the node)."""
    started = time.monotonic()
    address = wait_until(f"prometheus-{NAME}-0 Running and Ready in {namespace}",
                         lambda: pod_address(cluster, namespace), timeout=timeout, interval=2)  # fmt: skip
    api = Api(f"http://{address}:{PORT}")
    wait_until("Prometheus's /-/ready", lambda: answers_ok(f"{api.base}/-/ready"), timeout=120, interval=1)
    print(f"\nprometheus: {api.base} ready {time.monotonic() - started:.0f}s after the Prometheus object was applied")
    return api
