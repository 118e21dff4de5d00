"""The pods KServe would make from what we render pass the `restricted` Pod
Security level, checked by the real API server's admission in an enforcing namespace.

KServe's controller does not run here, so the test builds the pods the way it
would: our container and volumes, as the transformer (gateway) and as the
ClusterServingRuntime's predictor container.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from reward_operator.render import render_reward_model
from reward_testing.paths import REPO

SAMPLE = REPO / "manifests" / "samples" / "rewardmodel-sequence-standard.yaml"


@pytest.fixture
def restricted_namespace(cluster, namespace):
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    return namespace


def pod(name: str, containers: list[dict], volumes: list[dict]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": containers, "volumes": volumes},
        }
    )


def admitted(cluster, namespace: str, manifest: str):
    return cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=manifest, check=False)


def gateway_pod_parts(auth: bool) -> tuple[list[dict], list[dict]]:
    reward_model = yaml.safe_load(SAMPLE.read_text())
    reward_model["metadata"].update(namespace="x", uid="00000000-0000-4000-8000-000000000000")
    if auth:
        reward_model["spec"]["gateway"] = {"authSecretRef": {"name": "trainer-tokens"}}
    (isvc,) = [child for child in render_reward_model(reward_model) if child["kind"] == "InferenceService"]
    transformer = isvc["spec"]["transformer"]
    return transformer["containers"], transformer["volumes"]


@pytest.mark.parametrize("auth", [False, True])
def test_gateway_transformer_pod_is_restricted(cluster, restricted_namespace, auth):
    containers, volumes = gateway_pod_parts(auth)
    result = admitted(cluster, restricted_namespace, pod("gateway", containers, volumes))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("runtime", sorted(path.stem for path in (REPO / "runtimes").glob("*.yaml")))
def test_vllm_runtime_pod_is_restricted(cluster, restricted_namespace, runtime):
    spec = yaml.safe_load((REPO / "runtimes" / f"{runtime}.yaml").read_text())["spec"]
    result = admitted(cluster, restricted_namespace, pod("predictor", spec["containers"], spec.get("volumes", [])))
    assert result.returncode == 0, result.stderr


def test_enforcement_is_live(cluster, restricted_namespace):
    containers, volumes = gateway_pod_parts(auth=False)
    loose = copy.deepcopy(containers)
    for container in loose:
        container.pop("securityContext")
    result = admitted(cluster, restricted_namespace, pod("loose", loose, volumes))
    assert result.returncode != 0
    assert "restricted" in result.stderr
