"""Installs without Helm: kubectl's kustomize builds of manifests/, accepted by the API server, and the Argo CD
component that carries the health check (the check itself, in Lua: e2e/tests/offline/test_argocd.py)."""

from __future__ import annotations

import itertools
import os

import pytest
import yaml

from reward_testing.paths import REPO
from testenv.helpers import server_dry_run

MANIFESTS = REPO / "manifests"
HEALTH = MANIFESTS / "argocd" / "health"
SCRIPT = (HEALTH / "rewardmodel.lua").read_text()


def build(cluster, path: str) -> list[dict]:
    out = cluster.kubectl("kustomize", str(MANIFESTS / path)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("overlay", ["base", "overlays/default", "overlays/monitoring"])
def test_overlay_is_accepted_by_the_api_server(cluster, overlay, monitoring_crds):
    docs = build(cluster, overlay)
    server_dry_run(cluster, docs)
    kinds = {doc["kind"] for doc in docs}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Deployment"} <= kinds
    (namespace,) = (doc for doc in docs if doc["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    if overlay == "overlays/monitoring":
        assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= kinds
        (dashboard,) = (doc for doc in docs if doc["kind"] == "ConfigMap")
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["data"]["reward-operator.json"] == (MANIFESTS / "grafana" / "reward-operator.json").read_text()
        for doc in docs:
            if doc["kind"] in ("ServiceMonitor", "PrometheusRule", "ConfigMap", "Deployment"):
                assert doc["metadata"]["namespace"] == "reward-operator"


def test_base_has_no_helm_leftovers(cluster):
    for doc in build(cluster, "base"):
        labels = doc["metadata"].get("labels") or {}
        annotations = doc["metadata"].get("annotations") or {}
        assert "helm.sh/chart" not in labels and labels.get("app.kubernetes.io/managed-by") != "Helm"
        assert not any(key.startswith("helm.sh/") for key in annotations), doc["metadata"]["name"]


def test_samples_cover_every_model_kind_and_mode(cluster, namespace):
    docs = build(cluster, "samples")
    reward_models = [doc for doc in docs if doc["kind"] == "RewardModel"]
    pipelines = [doc for doc in docs if doc["kind"] == "RLHFPipeline"]
    assert len(reward_models) + len(pipelines) == len(docs)
    assert {(doc["spec"]["model"]["kind"], doc["spec"]["serving"]["mode"]) for doc in reward_models} == {
        *itertools.product(["sequence", "token", "process"], ["Standard", "Knative"]),
        ("judge", "Standard"),
    }
    # the pipeline's reward models are samples too, so the kustomization applies as one
    assert {r["name"] for p in pipelines for r in p["spec"]["rewards"]} <= {
        d["metadata"]["name"] for d in reward_models
    }
    # created for real: the CRDs' schemas and CEL rules accept each of them
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", str(REPO / "crds"))
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))
    names = cluster.kubectl("get", "rewardmodels", "-n", namespace, "-o", "name").stdout.split()
    # the six, one with gateway.allowedClients, one with spec.cache, one on CPU (resources.gpus: 0), a judge
    assert len(names) == len(reward_models) == 10
    names = cluster.kubectl("get", "rlhfpipelines", "-n", namespace, "-o", "name").stdout.split()
    assert len(names) == len(pipelines) == 1


def test_argocd_cm_component_carries_the_script(cluster, tmp_path):
    # an Argo CD install's kustomization that takes the component, as a user would
    (tmp_path / "argocd-cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n"
        "data:\n  timeout.reconciliation: 180s\n"
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["argocd-cm.yaml"], "components": [os.path.relpath(HEALTH, tmp_path)]})
    )
    built = yaml.safe_load(cluster.kubectl("kustomize", str(tmp_path)).stdout)
    assert built["metadata"]["name"] == "argocd-cm"
    assert built["data"]["timeout.reconciliation"] == "180s"
    for kind in ("RewardModel", "RLHFPipeline"):
        assert built["data"][f"resource.customizations.health.serving.rlhf.dev_{kind}"] == SCRIPT
