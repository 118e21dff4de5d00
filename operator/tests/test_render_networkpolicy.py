"""spec.gateway.allowedClients -> two NetworkPolicies (the gateway's clients, vLLM's one client).

The goldens `sequence-allowed-clients` (Standard) and `token-knative-allowed-clients`
(Knative) hold the whole rendering; these tests state what matters in it. That the
API server accepts the policies and that their selectors pick exactly KServe's pods
is shown in e2e/tests/cluster/test_network_policy.py.
"""

from __future__ import annotations

import copy
import logging

import pytest
import yaml

from reward_operator.api.defaults import apply_defaults
from reward_operator.cluster import objects
from reward_operator.controllers.apply import prune
from reward_operator.render import Owned, render_reward_model, rendered_reward_model
from reward_operator.render.gateway import GATEWAY_PORT
from reward_operator.render.networkpolicy import VLLM_PORT
from reward_testing.fake_cluster import FakeCluster
from reward_testing.paths import REPO, golden_cases, golden_input

STANDARD = golden_input("sequence-allowed-clients")
KNATIVE = golden_input("token-knative-allowed-clients")
KNATIVE_SYSTEM = {
    "namespaceSelector": {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["knative-serving", "istio-system"]}
        ]
    }
}


def policies(reward_model: dict) -> dict[str, dict]:
    """The rendered NetworkPolicies by the component they guard."""
    found = {}
    for child in render_reward_model(reward_model):
        if child["kind"] == "NetworkPolicy":
            selected = child["spec"]["podSelector"]["matchLabels"]["component"]
            found[selected] = child
    return found


def ports(rule: dict) -> list[int]:
    return [port["port"] for port in rule.get("ports", [])]


def without_allowed_clients(reward_model: dict) -> dict:
    changed = copy.deepcopy(reward_model)
    del changed["spec"]["gateway"]["allowedClients"]
    changed["spec"]["gateway"].pop("monitoringNamespaceSelector", None)
    return changed


@pytest.mark.parametrize("case", [c for c in golden_cases() if "allowed-clients" not in c])
def test_no_policies_without_allowed_clients(case):
    assert policies(golden_input(case)) == {}


def test_pods_are_selected_by_the_labels_kserve_puts_on_them():
    for reward_model in (STANDARD, KNATIVE):
        name = reward_model["metadata"]["name"]
        rendered = policies(reward_model)
        assert set(rendered) == {"transformer", "predictor"}
        for component, policy in rendered.items():
            assert policy["spec"]["podSelector"] == {
                "matchLabels": {"serving.kserve.io/inferenceservice": name, "component": component}
            }
            assert policy["spec"]["policyTypes"] == ["Ingress"], "egress (downloads) stays open"


def test_standard_gateway_admits_the_listed_peers_on_its_port_only():
    gateway = policies(STANDARD)["transformer"]
    clients, monitoring = gateway["spec"]["ingress"]
    assert clients["from"] == STANDARD["spec"]["gateway"]["allowedClients"], "peers are passed through verbatim"
    assert ports(clients) == [GATEWAY_PORT]
    assert monitoring == {
        "from": [{"namespaceSelector": STANDARD["spec"]["gateway"]["monitoringNamespaceSelector"]}],
        "ports": [{"protocol": "TCP", "port": GATEWAY_PORT}],
    }


def test_standard_predictor_admits_only_its_own_gateway():
    predictor = policies(STANDARD)["predictor"]
    from_gateway, monitoring = predictor["spec"]["ingress"]
    gateway_pods = {"serving.kserve.io/inferenceservice": "skywork-rm", "component": "transformer"}
    assert from_gateway["from"] == [{"podSelector": {"matchLabels": gateway_pods}}]
    assert ports(from_gateway) == [VLLM_PORT] and ports(monitoring) == [VLLM_PORT]


def test_knative_mode_admits_knatives_data_path_and_serves_on_queue_proxys_ports():
    rendered = policies(KNATIVE)
    for component in ("transformer", "predictor"):
        clients, knative = rendered[component]["spec"]["ingress"]
        assert ports(clients) == [8012, 8112], "requests reach a revision's pods through queue-proxy"
        # the activator and local gateway forward requests, the autoscaler scrapes queue-proxy: every port
        assert knative == {"from": [KNATIVE_SYSTEM]}
    assert rendered["transformer"]["spec"]["ingress"][0]["from"] == KNATIVE["spec"]["gateway"]["allowedClients"]


def test_knative_monitoring_reaches_the_container_and_queue_proxy_metrics():
    reward_model = copy.deepcopy(KNATIVE)
    reward_model["spec"]["gateway"]["monitoringNamespaceSelector"] = {"matchLabels": {"monitoring": "true"}}
    for policy in policies(reward_model).values():
        _, monitoring, _ = policy["spec"]["ingress"]
        assert ports(monitoring) == [8080, 9091]


def test_policies_are_owned_labelled_and_applied_before_the_inference_service():
    children = [child for child in render_reward_model(STANDARD) if child["kind"] != "ConfigMap"]
    kinds = [child["kind"] for child in children]
    assert kinds == ["NetworkPolicy", "NetworkPolicy", "InferenceService"], "pods never run unprotected"
    isvc = children[-1]
    for policy in children[:2]:
        assert policy["metadata"]["ownerReferences"] == isvc["metadata"]["ownerReferences"]
        assert policy["metadata"]["namespace"] == "rlhf"
        labels = policy["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "reward-operator"
        assert labels["serving.rlhf.dev/rewardmodel"] == "skywork-rm"
    assert [p["metadata"]["name"] for p in children[:2]] == ["skywork-rm-gateway", "skywork-rm-predictor"]


def test_removing_allowed_clients_renders_no_policies_and_they_are_a_pruned_kind():
    assert policies(without_allowed_clients(STANDARD)) == {}
    assert policies(without_allowed_clients(KNATIVE)) == {}
    assert (
        Owned("networking.k8s.io/v1", "NetworkPolicy")
        in rendered_reward_model(apply_defaults(without_allowed_clients(STANDARD)), None).owned
    )


def test_no_gateway_no_policies():
    reward_model = copy.deepcopy(STANDARD)
    reward_model["spec"]["gateway"]["enabled"] = False  # the schema refuses this pairing; render stays safe
    assert policies(reward_model) == {}


def test_an_empty_namespace_selector_is_kept_as_every_namespace():
    reward_model = copy.deepcopy(STANDARD)
    reward_model["spec"]["gateway"]["allowedClients"] = [{"namespaceSelector": {}}]
    (clients, _) = policies(reward_model)["transformer"]["spec"]["ingress"]
    assert clients["from"] == [{"namespaceSelector": {}}]


def test_ports_match_the_runtime_and_the_rendered_gateway():
    runtime = yaml.safe_load((REPO / "runtimes" / "vllm-reward.yaml").read_text())
    (container,) = runtime["spec"]["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [VLLM_PORT]
    isvc = render_reward_model(STANDARD)[-1]
    assert isvc["spec"]["transformer"]["containers"][0]["ports"][0]["containerPort"] == GATEWAY_PORT


def test_plural_of_kinds_the_operator_applies():
    assert objects.plural_of("NetworkPolicy") == "networkpolicies"
    assert objects.plural_of("InferenceService") == "inferenceservices"
    assert objects.plural_of("ConfigMap") == "configmaps"
    assert objects.plural_of("Gateway") == "gateways"
    assert objects.plural_of("RewardBatch") == "rewardbatches"
    assert objects.plural_of("Job") == "jobs"
    assert objects.plural_of("PersistentVolumeClaim") == "persistentvolumeclaims"


def test_the_controller_prunes_policies_it_no_longer_renders():
    """After a successful apply, sync deletes its own NetworkPolicies that the spec no longer renders, by
    our labels and its uid; a NetworkPolicy someone else made, with our labels, stays."""
    defaulted = apply_defaults(STANDARD)
    cluster = FakeCluster(keda=False)
    for child in render_reward_model(defaulted):
        cluster.apply(child)
    someone_elses = copy.deepcopy(cluster.stored("NetworkPolicy", "skywork-rm-gateway"))
    someone_elses["metadata"].update(name="hand-made", ownerReferences=[])
    cluster.put(someone_elses)
    for reward_model, kept in ((STANDARD, {"skywork-rm-gateway", "skywork-rm-predictor", "hand-made"}),
                               (without_allowed_clients(STANDARD), {"hand-made"})):  # fmt: skip
        defaulted = apply_defaults(reward_model)
        prune(defaulted, rendered_reward_model(defaulted, None), cluster, logging.getLogger("test"))
        assert cluster.pruned[-1:] == ["NetworkPolicy"]
        assert {n for (_, kind, _, n) in cluster.objects if kind == "NetworkPolicy"} == kept
