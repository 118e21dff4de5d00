"""KEDA in Standard mode: serving.minReplicas 0 (scale to zero) or serving.targetConcurrency (scale on
load above zero) -> autoscalerClass external, the gateway's scaler (env and port), a headless Service over
the gateway's pods and KEDA's ScaledObject.

The goldens `sequence-standard-scale-to-zero`, `token-standard-scale-to-zero-allowed-clients` and
`sequence-standard-keda-concurrency` hold the whole rendering; these tests state the contract between
the pieces (runtimes/gateway/README.md, "What the operator renders"). That KServe's webhook and KEDA's
CRD accept them: e2e/tests."""

from __future__ import annotations

import copy
import logging

import pytest

from reward_gateway.config.gateway import load_config
from reward_operator.api.defaults import apply_defaults
from reward_operator.controllers.apply import prune
from reward_operator.policy.dependencies import Observed, missing, references
from reward_operator.render import render_reward_model, rendered_reward_model
from reward_testing.fake_cluster import FakeCluster
from reward_testing.paths import golden_input

NAMESPACE = "rlhf"
SCALER_HOST = f"skywork-rm-gateway-scaler.{NAMESPACE}.svc.cluster.local"


def scale_to_zero(**serving) -> dict:
    reward_model = copy.deepcopy(golden_input("sequence-standard-scale-to-zero"))
    reward_model["spec"]["serving"].update(serving)
    return reward_model


def by_kind(children: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for child in children:
        assert child["kind"] not in found or child["kind"] == "NetworkPolicy", f"two {child['kind']}s"
        found[child["kind"]] = child
    return found


def transformer_container(isvc: dict) -> dict:
    (container,) = isvc["spec"]["transformer"]["containers"]
    return container


def plain_env(container: dict) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in container["env"] if "value" in variable}


def test_minimum_zero_in_standard_mode_hands_the_predictor_to_keda():
    children = by_kind(render_reward_model(scale_to_zero()))
    isvc, scaled, service = children["InferenceService"], children["ScaledObject"], children["Service"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    # KEDA scales KServe's predictor Deployment, from 0 to serving.maxReplicas
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "skywork-rm-predictor",
    }
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 4)
    assert scaled["spec"]["cooldownPeriod"] == 600  # scaleDownDelay: 10m
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger == {"type": "external-push", "metadata": {"scalerAddress": f"{SCALER_HOST}:9090"}}
    # the headless Service the address names selects the gateway's pods on the scaler port
    assert service["metadata"]["name"] == SCALER_HOST.split(".")[0]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {
        "serving.kserve.io/inferenceservice": "skywork-rm",
        "component": "transformer",
    }
    assert [port["port"] for port in service["spec"]["ports"]] == [9090]
    # every child is the RewardModel's, so the garbage collector removes it with its owner
    for child in (scaled, service):
        assert child["metadata"]["ownerReferences"][0]["uid"] == isvc["metadata"]["ownerReferences"][0]["uid"]
    # the Service exists before the gateway starts (it resolves its peers), the ScaledObject after its target
    order = [child["kind"] for child in render_reward_model(scale_to_zero())]
    assert order.index("Service") < order.index("InferenceService") < order.index("ScaledObject")


def test_the_gateway_serves_the_scaler_the_scaled_object_calls_and_never_sleeps():
    children = by_kind(render_reward_model(scale_to_zero()))
    isvc, scaled = children["InferenceService"], children["ScaledObject"]
    container = transformer_container(isvc)
    # KServe's Service and readiness probe take ports[0]: the HTTP port stays first
    assert [port["containerPort"] for port in container["ports"]] == [8080, 9090]
    # KServe's transformer Service takes every port: a Service of two ports needs their names, and a first
    # port named grpc or h2c would be marked h2c
    assert [port["name"] for port in container["ports"]] == ["http", "grpc-scaler"]
    env = plain_env(container)
    config = load_config(env)
    assert config.scaler is not None
    assert (config.scaler.port, config.scaler.peers) == (9090, SCALER_HOST)
    assert config.scaler.active_s == scaled["spec"]["pollingInterval"]
    assert (config.scale_from_zero_timeout_s, config.max_held_requests) == (300, 512)
    # the gateway holds the requests while the predictor sleeps: it is never at zero itself
    assert (isvc["spec"]["transformer"]["minReplicas"], isvc["spec"]["transformer"]["maxReplicas"]) == (1, 1)


def test_target_concurrency_is_the_gateways_requests_per_predictor_replica():
    isvc = by_kind(render_reward_model(scale_to_zero(targetConcurrency=16)))["InferenceService"]
    scaler = load_config(plain_env(transformer_container(isvc))).scaler
    assert scaler is not None and (scaler.metric, scaler.target) == ("requests", 16)
    without = plain_env(transformer_container(by_kind(render_reward_model(scale_to_zero()))["InferenceService"]))
    assert "REWARD_GATEWAY_SCALER_METRIC" not in without and "REWARD_GATEWAY_SCALER_TARGET" not in without


def test_keda_waits_five_minutes_idle_unless_told():
    reward_model = scale_to_zero()
    del reward_model["spec"]["serving"]["scaleDownDelay"]
    assert by_kind(render_reward_model(reward_model))["ScaledObject"]["spec"]["cooldownPeriod"] == 300
    assert (
        by_kind(render_reward_model(scale_to_zero(scaleDownDelay="1h30s")))["ScaledObject"]["spec"]["cooldownPeriod"]
        == 3630
    )


def test_a_concurrency_target_above_zero_scales_between_the_bounds_through_keda():
    """Standard mode, minReplicas 1 with targetConcurrency: the same KEDA path as scale to zero, from the
    minimum (never below it) to the maximum, on the gateway's requests in flight; no HPA of KServe's."""
    reward_model = golden_input("sequence-standard-keda-concurrency")
    children = by_kind(render_reward_model(reward_model))
    isvc, scaled = children["InferenceService"], children["ScaledObject"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 4)
    assert (isvc["spec"]["predictor"]["minReplicas"], isvc["spec"]["predictor"]["maxReplicas"]) == (1, 4)
    # KServe refuses a concurrency metric for its HPA: none is rendered for KServe to judge
    assert "scaleMetric" not in isvc["spec"]["predictor"] and "scaleTarget" not in isvc["spec"]["predictor"]
    scaler = load_config(plain_env(transformer_container(isvc))).scaler
    assert scaler is not None and (scaler.metric, scaler.target) == ("requests", 32)
    assert scaler.peers == SCALER_HOST  # several gateway replicas answer KEDA for all of them
    # scaleDownDelay 2m: the idle time before zero, and the HPA's wait before it drops a replica
    assert scaled["spec"]["cooldownPeriod"] == 120
    assert scaled["spec"]["advanced"] == {
        "horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}}}
    }
    assert "Service" in children
    # without KEDA: InvalidSpec, naming the field that asked for it and the way out
    message = missing(
        NAMESPACE,
        references(apply_defaults(reward_model), "vllm-reward"),
        Observed(runtime_found=True, keda_served=False),
    )
    assert message is not None and message.startswith("spec.serving.targetConcurrency")
    assert "install KEDA" in message and "resources.cpu" in message and "Knative" in message


def test_the_hpas_window_follows_the_delay_up_to_its_limit_and_is_left_alone_unless_told():
    reward_model = scale_to_zero()
    del reward_model["spec"]["serving"]["scaleDownDelay"]
    assert "advanced" not in by_kind(render_reward_model(reward_model))["ScaledObject"]["spec"]
    scaled = by_kind(render_reward_model(scale_to_zero(scaleDownDelay="2h")))["ScaledObject"]["spec"]
    assert scaled["cooldownPeriod"] == 7200
    # Kubernetes refuses an HPA stabilization window above an hour
    assert scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 3600
    }


def test_knatives_autoscaling_settings_are_annotations_on_the_inference_service():
    """KServe copies the InferenceService's annotations onto the predictor's and the gateway's revisions
    (they scale together in Knative mode) and checks initial-scale there against allow-zero-initial-scale."""
    isvc = by_kind(render_reward_model(golden_input("sequence-knative-autoscaling")))["InferenceService"]
    annotations = isvc["metadata"]["annotations"]
    assert annotations == {
        "serving.kserve.io/deploymentMode": "Knative",
        "autoscaling.knative.dev/initial-scale": "0",
        "autoscaling.knative.dev/scale-down-delay": "600s",
        "autoscaling.knative.dev/window": "120s",
    }
    # the concurrency target is KServe's own field: it writes Knative's target and metric annotations
    predictor = isvc["spec"]["predictor"]
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 8)
    assert not any(key.startswith("autoscaling.knative.dev/") for key in predictor["annotations"])
    # unset, Knative's defaults stand: nothing is rendered
    plain = by_kind(render_reward_model(golden_input("sequence-knative")))["InferenceService"]
    assert not any(key.startswith("autoscaling.knative.dev/") for key in plain["metadata"]["annotations"])


@pytest.mark.parametrize(("given", "rendered"), [("90s", "90s"), ("1m30s", "90s"), ("1.5m", "90s"), ("1h", "3600s")])
def test_knative_durations_are_rendered_in_whole_seconds(given: str, rendered: str):
    reward_model = golden_input("sequence-knative-autoscaling")
    reward_model["spec"]["serving"].update(scalingWindow=given, scaleDownDelay=given)
    isvc = by_kind(render_reward_model(reward_model))["InferenceService"]
    assert isvc["metadata"]["annotations"]["autoscaling.knative.dev/window"] == rendered
    assert isvc["metadata"]["annotations"]["autoscaling.knative.dev/scale-down-delay"] == rendered


@pytest.mark.parametrize("case", ["sequence-standard", "token-knative", "process-knative"])
def test_only_standard_mode_at_zero_uses_keda(case: str):
    """Standard mode with a minimum of 1 or more and no concurrency target stays on KServe's HPA; Knative mode
    on Knative."""
    children = render_reward_model(golden_input(case))
    assert not {"ScaledObject", "Service"} & {child["kind"] for child in children}
    (isvc,) = [child for child in children if child["kind"] == "InferenceService"]
    assert isvc["metadata"]["annotations"].get("serving.kserve.io/autoscalerClass") in (None, "hpa")
    if isvc["spec"].get("transformer"):
        container = transformer_container(isvc)
        assert [port["containerPort"] for port in container["ports"]] == [8080]
        assert not any(name.startswith("REWARD_GATEWAY_SCALER_") for name in plain_env(container))


def test_policies_admit_keda_and_the_peers_to_the_scaler_port_only():
    reward_model = golden_input("token-standard-scale-to-zero-allowed-clients")
    for keda_namespace in ("keda", "autoscaling"):
        children = render_reward_model(reward_model, keda_namespace=keda_namespace)
        gateway_policy = next(c for c in children if c["metadata"]["name"] == "token-rm-gateway")
        scaler_rules = [
            rule for rule in gateway_policy["spec"]["ingress"] if {"protocol": "TCP", "port": 9090} in rule["ports"]
        ]
        (rule,) = scaler_rules
        assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]
        assert rule["from"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": keda_namespace}}},
            {
                "podSelector": {
                    "matchLabels": {"serving.kserve.io/inferenceservice": "token-rm", "component": "transformer"}
                }
            },
        ]
    # without scale to zero, nobody is admitted to a port the gateway does not open
    reward_model = copy.deepcopy(reward_model)
    reward_model["spec"]["serving"] = {"minReplicas": 1, "maxReplicas": 1}
    for child in render_reward_model(reward_model):
        if child["kind"] == "NetworkPolicy":
            assert all({"protocol": "TCP", "port": 9090} not in rule["ports"] for rule in child["spec"]["ingress"])


def test_a_cluster_without_keda_is_an_invalid_spec_that_says_what_to_do():
    wanted = references(apply_defaults(scale_to_zero()), "vllm-reward")
    assert wanted.keda
    message = missing(NAMESPACE, wanted, Observed(runtime_found=True, keda_served=False))
    assert message is not None
    assert "install KEDA" in message and "serving.minReplicas" in message and "Knative" in message
    assert missing(NAMESPACE, wanted, Observed(runtime_found=True, keda_served=True)) is None
    # a RewardModel that does not scale through KEDA never asks for it
    plain = references(apply_defaults(golden_input("token-standard")), "vllm-reward")
    assert not plain.keda
    assert missing(NAMESPACE, plain, Observed(runtime_found=True, keda_served=False)) is None


@pytest.mark.parametrize(
    ("case", "keda_installed", "scaler_kinds_pruned"),
    [
        ("sequence-standard-scale-to-zero", True, True),
        # back above zero: the ScaledObject and the Service go, where KEDA may have left them
        ("sequence-standard", True, True),
        # no KEDA, no scale to zero: no list of a kind the cluster does not serve
        ("sequence-standard", False, False),
    ],
)
def test_the_scaler_children_are_pruned_where_they_can_exist(case, keda_installed, scaler_kinds_pruned):
    cluster = FakeCluster(keda=keda_installed)
    reward_model = apply_defaults(golden_input(case))
    prune(reward_model, rendered_reward_model(reward_model, None), cluster, logging.getLogger("test"))
    assert cluster.pruned == ["NetworkPolicy", *(["Service", "ScaledObject"] if scaler_kinds_pruned else [])]
    keep = cluster.kept
    if case.endswith("scale-to-zero"):
        assert keep["Service"] == {"skywork-rm-gateway-scaler"}
        assert keep["ScaledObject"] == {"skywork-rm-predictor"}
    elif scaler_kinds_pruned:
        assert keep["Service"] == set() and keep["ScaledObject"] == set()
