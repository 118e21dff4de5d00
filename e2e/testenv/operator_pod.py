"""The operator as a pod on the real node, installed by ``helm install`` of its chart with the image built here:
the install (in a namespace enforcing Pod Security's ``restricted``, with no operator on the host), its pods
and processes, KServe's storage initializer made ``restricted`` for the storage server's URIs, and the
RewardModels' namespace.

Shared by the suites that run the operator as a pod (e2e/suites/operator-pod, e2e/suites/prometheus): their
fixtures (e2e/suites/conftest.py) call these.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import host_processes, images, node, served
from .chart import CHART, delete_cluster_objects, helm_binary, run_helm
from .helpers import get_json

RELEASE = "reward-operator"  # the chart's full name is then the release's: reward-operator
OPERATOR = ("reward-operator", "run")  # the operator's command line, wherever it runs
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}


@dataclass(frozen=True)
class Release:
    """The chart installed in ``namespace``, its operator pod on the real node."""

    namespace: str
    helm: Path
    env: dict[str, str]
    install_seconds: float

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"


def running_operator_pods(cluster, release: Release) -> list[dict]:
    """The operator pods that run, their containers ready (not one being deleted or restarted)."""
    listed = get_json(cluster, "pods", "-n", release.namespace, "-l", release.selector) or {"items": []}
    return [
        pod
        for pod in listed["items"]
        if not pod["metadata"].get("deletionTimestamp")
        and pod["status"].get("phase") == "Running"
        and all(status.get("ready") for status in pod["status"].get("containerStatuses", [{}]))
    ]


def running_operator_pod(cluster, release: Release) -> dict | None:
    """The operator pod that runs, its container ready (none while one is being replaced or restarted)."""
    running = running_operator_pods(cluster, release)
    return running[0] if len(running) == 1 else None


def operator_processes(cluster) -> tuple[list[host_processes.HostProcess], list[host_processes.HostProcess]]:
    """`reward-operator run` on this host: (in the real node's containers, outside any with this cluster's
    kubeconfig). Other sessions' unit tests may run operators of their own against other API servers."""
    found = host_processes.running(*OPERATOR)
    ours = [
        p
        for p in found
        if not p.container and host_processes.environment(p.pid).get("KUBECONFIG") == cluster.kubeconfig
    ]
    return [p for p in found if p.container], ours


def operator_values(directory: Path, extra: dict | None = None) -> Path:
    """The chart's values for the test bed: the image built here, the real node's label and taint (and
    ``extra``, another suite's top-level values)."""
    repository, _, tag = images.OPERATOR_IMAGE.rpartition(":")
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "nodeSelector": {node.LABEL[0]: node.LABEL[1]},
        "tolerations": [{"key": node.TAINT["key"], "operator": "Exists", "effect": node.TAINT["effect"]}],
        **(extra or {}),
    }
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@contextmanager
def installed(cluster, directory: Path, chart_values: dict) -> Iterator[Release]:
    """`helm install` of the chart into a namespace enforcing `restricted`, with no host operator running
    (``chart_values``: beyond the test bed's; its values file goes to ``directory``)."""
    _, outside = operator_processes(cluster)
    assert not outside, f"an operator runs on the host against this cluster: {outside}"
    namespace = f"ro-{uuid.uuid4().hex[:6]}"
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": RESTRICTED}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    helm, env = helm_binary(), cluster.env()
    values = operator_values(directory, chart_values)
    started = time.monotonic()
    try:
        # --take-ownership: the test bed applied the same CRDs with kubectl, as a user who pre-installed them
        run_helm(helm, "install", RELEASE, str(CHART), "-n", namespace, "-f", str(values), "--take-ownership",
                 "--wait", "--timeout=300s", env=env)  # fmt: skip
        yield Release(namespace, helm, env, time.monotonic() - started)
    finally:
        run_helm(helm, "uninstall", RELEASE, "-n", namespace, "--wait", "--timeout=120s", env=env, check=False)
        delete_cluster_objects(cluster, RELEASE)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@contextmanager
def storage_initializer_restricted(cluster, storage_port: int) -> Iterator[dict]:
    """KServe's storage initializer with the `restricted` securityContext, for URIs of the test bed's storage
    server (at ``storage_port``): a ClusterStorageContainer, as KServe's own chart installs one for every URI
    it downloads. Yields the securityContext."""
    server = f"http://{node.host_address()}:{storage_port}/"
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    storage_container = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterStorageContainer",
        "metadata": {"name": f"restricted-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "container": {"name": "storage-initializer", "image": images.STORAGE_INITIALIZER_IMAGE,
                          "securityContext": security},
            "supportedUriFormats": [{"regex": f"^{re.escape(server)}"}],
            "workloadType": "initContainer",
        },
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(storage_container))
    try:
        yield security
    finally:
        cluster.kubectl("delete", "clusterstoragecontainer", storage_container["metadata"]["name"], check=False)


@contextmanager
def models_namespace(cluster) -> Iterator[str]:
    """The RewardModels' namespace on the real node, enforcing `restricted`, with the trainer's client pod."""
    with served.client_namespace(cluster, labels=RESTRICTED) as name:
        try:
            yield name
        finally:  # while the operator runs to take its finalizer off: a failed test may have left one
            cluster.kubectl("delete", "rewardmodels", "--all", "-n", name, "--timeout=120s", check=False)
