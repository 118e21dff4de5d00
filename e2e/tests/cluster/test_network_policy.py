"""gateway.allowedClients on a real API server with KServe's controller: the operator's
NetworkPolicies are accepted, owned by the RewardModel, select exactly the pods
KServe's Deployments made, and go away when allowedClients does.

The test bed has no CNI, so nothing here filters packets: it proves acceptance and
selection (what a CNI that implements NetworkPolicy would enforce), not enforcement.
"""

from __future__ import annotations

import json

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.helpers import ISVC_LABEL, get_json, wait_for_ready

pytestmark = pytest.mark.usefixtures("kserve_runs")  # skipped where the cluster has no KServe

SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-allowed-clients.yaml").read_text())
NAME = SAMPLE["metadata"]["name"]


def selector(label_selector: dict) -> str:
    """A LabelSelector as kubectl's -l (matchLabels only: what the operator renders for pods)."""
    assert set(label_selector) == {"matchLabels"}, label_selector
    return ",".join(f"{key}={value}" for key, value in sorted(label_selector["matchLabels"].items()))


def pod_names(cluster, namespace: str, label_selector: str) -> set[str]:
    listed = get_json(cluster, "pods", "-n", namespace, "-l", label_selector) or {}
    return {pod["metadata"]["name"] for pod in listed.get("items", [])}


def deployment_pods(cluster, namespace: str, deployment: str) -> set[str]:
    """The pods KServe's Deployment owns, found through the Deployment's own selector."""
    made = get_json(cluster, "deployment", deployment, "-n", namespace)
    assert made, f"KServe made no Deployment {deployment}"
    return pod_names(cluster, namespace, selector(made["spec"]["selector"]))


def policy(cluster, namespace: str, name: str) -> dict | None:
    return get_json(cluster, "networkpolicy", name, "-n", namespace)


def test_allowed_clients_select_kserves_pods_and_go_away_with_the_field(cluster, namespace, operator):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(SAMPLE))
    reward_model = wait_for_ready(cluster, namespace, NAME)
    uid = reward_model["metadata"]["uid"]

    wanted = {"transformer": f"{NAME}-gateway", "predictor": f"{NAME}-predictor"}
    stored = {component: policy(cluster, namespace, name) for component, name in wanted.items()}
    for component, found in stored.items():
        assert found, f"no NetworkPolicy {wanted[component]}"
        (owner,) = found["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("RewardModel", uid, True)
        # the pods the policy selects, listed by the API server, are exactly the pods of
        # KServe's Deployment for that component (and there are some: kwok runs them)
        selected = pod_names(cluster, namespace, selector(found["spec"]["podSelector"]))
        made = deployment_pods(cluster, namespace, f"{NAME}-{component}")
        assert made and selected == made, (component, selected, made)

    gateway_pods = pod_names(cluster, namespace, selector(stored["transformer"]["spec"]["podSelector"]))
    predictor_pods = pod_names(cluster, namespace, selector(stored["predictor"]["spec"]["podSelector"]))
    assert gateway_pods.isdisjoint(predictor_pods)
    assert gateway_pods | predictor_pods == pod_names(cluster, namespace, f"{ISVC_LABEL}={NAME}")

    # what the API server stored is what the spec asked for
    clients, monitoring = stored["transformer"]["spec"]["ingress"]
    assert clients["from"] == SAMPLE["spec"]["gateway"]["allowedClients"]
    assert clients["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert monitoring["from"] == [{"namespaceSelector": SAMPLE["spec"]["gateway"]["monitoringNamespaceSelector"]}]
    from_gateway, _ = stored["predictor"]["spec"]["ingress"]
    assert from_gateway["from"] == [{"podSelector": stored["transformer"]["spec"]["podSelector"]}]

    # one with our labels that this RewardModel does not control is never pruned
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{NAME}-by-hand", "labels": stored["transformer"]["metadata"]["labels"]},
        "spec": {"podSelector": {"matchLabels": {"app": "none"}}, "policyTypes": ["Ingress"]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(foreign))

    patch = [
        {"op": "remove", "path": "/spec/gateway/monitoringNamespaceSelector"},
        {"op": "remove", "path": "/spec/gateway/allowedClients"},
    ]
    cluster.kubectl("patch", "rewardmodel", NAME, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_until(
        "both NetworkPolicies deleted once allowedClients is removed",
        lambda: all(policy(cluster, namespace, name) is None for name in wanted.values()),
        timeout=60,
    )
    assert policy(cluster, namespace, f"{NAME}-by-hand") is not None
    wait_for_ready(cluster, namespace, NAME)  # the model keeps serving
