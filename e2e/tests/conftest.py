"""Fixtures shared by the e2e tests: the operator run for real, prometheus-operator's kinds, dry runs."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from reward_testing.operator_metrics import reward_model_reconciles
from reward_testing.paths import REPO
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

# prometheus-operator's CRDs are not part of the test control plane (its root Go
# module, which holds them, does not download here): these stand-ins are schemaless,
# so the API server accepts ServiceMonitor, PodMonitor and PrometheusRule by kind.
MONITORING_CRDS = "\n---\n".join(
    yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com",
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        }
    )
    for kind, plural in (
        ("ServiceMonitor", "servicemonitors"),
        ("PodMonitor", "podmonitors"),
        ("PrometheusRule", "prometheusrules"),
    )
)


@pytest.fixture(scope="session")
def monitoring_crds(cluster):
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", input=MONITORING_CRDS)
    for name in ("servicemonitors", "podmonitors", "prometheusrules"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}.monitoring.coreos.com", "--timeout=60s")


@dataclass
class RunningOperator:
    process: subprocess.Popen
    metrics_url: str
    liveness_url: str
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def reconciles(self) -> float:
        return reward_model_reconciles(self.metrics_url)


@pytest.fixture(scope="session")
def kserve_runs(cluster):
    """For tests that need KServe's controller and webhooks: skipped where the cluster has none."""
    webhook = "mutatingwebhookconfiguration/inferenceservice.serving.kserve.io"
    if cluster.kubectl("get", webhook, check=False).returncode != 0:
        pytest.skip("needs KServe's controller and webhooks on the cluster (TESTENV_KSERVE=0 leaves them out)")


@pytest.fixture(scope="session")
def runtimes(cluster):
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))


@pytest.fixture(scope="session")
def operator(cluster, runtimes, tmp_path_factory) -> Iterator[RunningOperator]:
    """reward-operator as a separate process, exactly as `reward-operator run` runs it."""
    with running_operator(cluster, tmp_path_factory.mktemp("operator") / "operator.log") as running:
        yield running


@pytest.fixture(scope="session")
def start_operator():
    """:func:`running_operator` itself, for tests that stop the operator and start it again."""
    return running_operator


@contextmanager
def running_operator(cluster, log_path: Path) -> Iterator[RunningOperator]:
    """`reward-operator run` against ``cluster`` until the block ends, its log in ``log_path``."""
    metrics_port, liveness_port = free_port(), free_port()
    env = cluster.env()
    # A long drift timer: anything restored during the tests was restored by the watch.
    # A rollout looked at every 2 s (test_rewardmodel_canary.py), not every 30 s.
    env.update(
        REWARD_OPERATOR_METRICS_PORT=str(metrics_port),
        REWARD_OPERATOR_DRIFT_INTERVAL="3600",
        REWARD_OPERATOR_CANARY_INTERVAL="2",
    )
    command = [
        str(Path(sys.executable).parent / "reward-operator"),
        "run",
        "--standalone",
        "-A",
        f"--liveness=http://127.0.0.1:{liveness_port}/healthz",
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    running = RunningOperator(
        process,
        f"http://127.0.0.1:{metrics_port}/metrics",
        f"http://127.0.0.1:{liveness_port}/healthz",
        log_path,
    )

    def healthy() -> bool:
        assert running.alive(), f"operator exited:\n{running.log()}"
        try:
            with urllib.request.urlopen(running.liveness_url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_until("the operator's liveness endpoint", healthy, timeout=60)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if os.environ.get("E2E_SHOW_OPERATOR_LOG"):
            print(running.log())


@pytest.fixture(scope="module")
def keda_operator(keda_cluster, tmp_path_factory) -> Iterator[RunningOperator]:
    """The operator, as ``operator`` runs it, against ``keda_cluster`` (with the reward runtimes)."""
    keda_cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))
    with running_operator(keda_cluster, tmp_path_factory.mktemp("keda-operator") / "operator.log") as running:
        yield running
