"""The Helm chart with the pinned helm: rendered offline (what a test installs, or runs as the chart's pods
would run it), and installed on a cluster (the chart tests, the operator as a pod on the real node)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import yaml

from reward_testing import versions
from reward_testing.paths import REPO

from . import builds
from .diagnose import kubectl_at, pods_report

CHART = REPO / "charts" / "reward-operator"
KUBE_VERSION = versions.KUBERNETES  # helm built without version stamps would assume 1.20
# Every optional object of the chart switched on (its monitors, its rules, the dashboard)
EVERYTHING_ON = (
    "--set=metrics.serviceMonitor.enabled=true",
    "--set=metrics.podMonitor.enabled=true",
    "--set=prometheusRule.enabled=true",
    "--set=dashboard.enabled=true",
)


def helm_binary() -> Path:
    """The pinned helm, built into the test bed's cache when missing."""
    return builds.build(only=["helm"]) / "helm"


def run_helm(helm: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``helm args...`` (against the cluster ``env``'s KUBECONFIG names); fails the test with helm's stderr."""
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env)
    if check and result.returncode != 0:
        failure = AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        if "--wait" in args and (namespace := _namespace_of(args)):
            # a --wait that timed out says only "context deadline exceeded": what the release's pods did
            failure.add_note(pods_report(kubectl_at(helm.parent / "kubectl", env), namespace))
        raise failure
    return result


def _namespace_of(args: tuple[str, ...]) -> str | None:
    for flag, value in itertools.pairwise(args):
        if flag in ("-n", "--namespace"):
            return value
    return next((arg.split("=", 1)[1] for arg in args if arg.startswith("--namespace=")), None)


def template(helm: Path, namespace: str, *values: str, release: str = "reward-operator") -> list[dict]:
    """`helm template` of the chart with ``values`` (``--set=...``, ``--include-crds``): its documents."""
    out = run_helm(helm, "template", release, str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION, *values)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def render(*values: str, namespace: str = "reward-operator", release: str = "reward-operator") -> list[dict]:
    """`helm template` of the chart with ``values`` (``--set=...``), the CRDs of its crds/ folder included."""
    return template(helm_binary(), namespace, "--include-crds", *values, release=release)


def delete_cluster_objects(cluster, release: str) -> None:
    """Delete the release's cluster-scoped RBAC (a test's namespace goes with its namespaced objects)."""
    cluster.kubectl(
        "delete", "clusterrole,clusterrolebinding", "-l", f"app.kubernetes.io/instance={release}", check=False
    )
