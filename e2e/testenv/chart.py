"""The Helm chart rendered offline with the pinned helm: what a test installs, or runs as the chart's
pods would run it."""

from __future__ import annotations

import subprocess

import yaml

from reward_testing.paths import REPO

from . import build

CHART = REPO / "charts" / "reward-operator"
KUBE_VERSION = "1.37.0"  # helm built without version stamps would assume 1.20


def render(*values: str, namespace: str = "reward-operator", release: str = "reward-operator") -> list[dict]:
    """`helm template` of the chart with ``values`` (``--set=...``), the CRDs of its crds/ folder included."""
    helm = build.build(only=["helm"]) / "helm"
    result = subprocess.run(
        [str(helm), "template", release, str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION,
         "--include-crds", *values],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"helm template failed ({result.returncode}):\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
