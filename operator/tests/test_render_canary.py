"""The candidate's rendering (render/canary.py): KServe's spec.canary[] entry and the gateway's settings.
The whole children are in the golden files (sequence-canary-*); these say what matters in them."""

from __future__ import annotations

import copy

import pytest

from reward_operator.api.duration import interval_seconds
from reward_operator.render import canary_identity, render_reward_model
from reward_testing.paths import golden_input

SHADOW = golden_input("sequence-canary-shadow")
SPLIT = golden_input("sequence-canary-split-allowed-clients")


def isvc(reward_model: dict, **kwargs) -> dict:
    """The RewardModel's own InferenceService."""
    name = reward_model["metadata"]["name"]
    children = render_reward_model(reward_model, **kwargs)
    (found,) = [c for c in children if c["kind"] == "InferenceService" and c["metadata"]["name"] == name]
    return found


def gateway_env(reward_model: dict, **kwargs) -> dict[str, str]:
    (container,) = isvc(reward_model, **kwargs)["spec"]["transformer"]["containers"]
    return {e["name"].removeprefix("REWARD_GATEWAY_"): e.get("value") for e in container["env"]}


def test_the_candidate_is_kserves_canary_predictor_with_no_traffic_of_kserves():
    (entry,) = isvc(SHADOW)["spec"]["canary"]
    assert entry["trafficPercent"] == 0, "the gateway splits, never KServe"
    predictor = entry["predictor"]
    assert predictor["name"] == "canary" and predictor["minReplicas"] == 1
    assert gateway_env(SHADOW)["CANARY_URL"] == "http://skywork-rm-canary-predictor.rlhf.svc.cluster.local"


def test_the_candidate_takes_the_stable_models_fields_it_does_not_set():
    model = isvc(SHADOW)["spec"]["canary"][0]["predictor"]["model"]
    assert model["storageUri"] == "hf://Skywork/Skywork-Reward-V2-Qwen3-8B"
    assert "--max-model-len=32768" in model["args"] and "--dtype=bfloat16" in model["args"]
    assert model["args"][-1] == "--gpu-memory-utilization=0.85"
    assert "--served-model-name=skywork-rm" in model["args"], "both models answer to one name by default"
    assert model["resources"]["limits"] == {"cpu": "8", "memory": "80Gi", "nvidia.com/gpu": "1"}
    assert model["runtime"] == "vllm-reward"


def test_shadow_sends_no_share_and_split_sends_the_current_step():
    shadow = gateway_env(SHADOW)
    assert shadow["CANARY_MODE"] == "shadow" and "CANARY_PERCENT" not in shadow
    assert "CANARY_MODEL_NAME" not in shadow
    assert gateway_env(SPLIT, canary_percent=50)["CANARY_PERCENT"] == "50"
    assert gateway_env(SPLIT)["CANARY_PERCENT"] == "25", "offline, the share in status.canary"
    split = gateway_env(SPLIT)
    assert (split["CANARY_STICKY"], split["CANARY_CLIENT_HEADER"]) == ("client", "X-Training-Job")
    assert split["CANARY_MODEL_NAME"] == "internlm2-rm-v2"
    assert split["CANARY_HALF_LIFE_SECONDS"] == "900"


def test_the_candidates_own_template_reaches_its_vllm_and_the_gateway():
    children = render_reward_model(SPLIT)
    names = [c["metadata"]["name"] for c in children if c["kind"] == "ConfigMap"]
    assert names == ["internlm2-rm-chat-template", "internlm2-rm-candidate-chat-template"]
    predictor = isvc(SPLIT)["spec"]["canary"][0]["predictor"]
    assert predictor["volumes"] == [
        {"name": "chat-template", "configMap": {"name": "internlm2-rm-candidate-chat-template"}}
    ]
    assert gateway_env(SPLIT)["CANARY_CHAT_TEMPLATE_FILE"] == "/etc/reward-model-candidate/chat_template.jinja"


def test_the_candidates_name_and_the_rollouts_revision():
    name, revision = canary_identity(SHADOW)
    assert name.startswith("skywork-rm-candidate-")
    assert (canary_identity(SHADOW).candidate, canary_identity(SHADOW).revision) == (name, revision)
    assert canary_identity(golden_input("sequence-standard")) is None, "no spec.canary, no rollout"
    other = copy.deepcopy(SHADOW)
    other["spec"]["canary"]["model"]["uri"] = "hf://Skywork/another"
    assert canary_identity(other)[0] != name, "a new candidate is a new name: its figures are never pooled"
    gates = copy.deepcopy(SHADOW)
    gates["spec"]["canary"].update(minAgreement=0.5, interval="1h")
    assert canary_identity(gates) == (name, revision), "gates and interval change within one rollout"
    split = copy.deepcopy(SHADOW)
    split["spec"]["canary"].update(mode="split", steps=[50, 100])
    assert canary_identity(split)[0] == name and canary_identity(split)[1] != revision
    again = copy.deepcopy(SHADOW)
    again["spec"]["canary"]["attempt"] = 2
    assert canary_identity(again)[0] == name and canary_identity(again)[1] != revision, "a retry starts over"


def test_the_operator_is_admitted_to_the_gateways_only_during_a_rollout():
    def gateway_policy(reward_model: dict) -> dict:
        (found,) = [
            c for c in render_reward_model(reward_model, operator_namespace="reward-operator")
            if c["kind"] == "NetworkPolicy" and c["metadata"]["name"].endswith("-gateway")
        ]  # fmt: skip
        return found

    operator_rule = {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "reward-operator"}},
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/name": "reward-operator",
                        "app.kubernetes.io/component": "operator",
                    }
                },
            }
        ],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    assert operator_rule in gateway_policy(SPLIT)["spec"]["ingress"]
    without = copy.deepcopy(SPLIT)
    del without["spec"]["canary"]
    assert operator_rule not in gateway_policy(without)["spec"]["ingress"]


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("10m", 600), ("1h30m", 5400), ("1.5s", 1.5)])
def test_intervals_read_as_go_durations(text, seconds):
    assert interval_seconds(text) == seconds


def test_a_malformed_interval_is_refused():
    with pytest.raises(ValueError):
        interval_seconds("10 minutes")


def test_a_rollout_doubles_the_gateways_default_memory_not_a_memory_set_in_the_spec():
    def limits(reward_model: dict) -> dict:
        (container,) = isvc(reward_model)["spec"]["transformer"]["containers"]
        return container["resources"]["limits"]

    assert limits(SHADOW)["memory"] == "2Gi", "each request is charged twice while two models score it"
    without = copy.deepcopy(SHADOW)
    del without["spec"]["canary"]
    assert limits(without)["memory"] == "1Gi"
    token = copy.deepcopy(SHADOW)
    token["spec"]["model"]["kind"] = "token"
    assert limits(token)["memory"] == "4Gi"
    chosen = copy.deepcopy(SHADOW)
    chosen["spec"]["gateway"] = {"resources": {"memory": "3Gi"}}
    assert limits(chosen)["memory"] == "3Gi"


KNATIVE = golden_input("token-knative-canary")


def test_knatives_candidate_is_a_second_inference_service_the_gateway_calls():
    children = render_reward_model(KNATIVE)
    stable, candidate = [c for c in children if c["kind"] == "InferenceService"]
    assert stable["metadata"]["name"] == "internlm2-rm" and "canary" not in stable["spec"]
    assert candidate["metadata"]["name"] == "internlm2-rm-canary"
    assert "transformer" not in candidate["spec"], "one gateway, the stable InferenceService's, routes both"
    assert candidate["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"
    assert candidate["spec"]["predictor"]["model"]["storageUri"] == "pvc://models/internlm2-v2"
    assert candidate["spec"]["predictor"]["minReplicas"] == 1
    # KServe names a Knative predictor's Service <isvc>-predictor: the same name as Standard mode's canary
    env = gateway_env(KNATIVE)
    assert env["CANARY_URL"] == "http://internlm2-rm-canary-predictor.rlhf.svc.cluster.local"
    assert (env["CANARY_MODE"], env["CANARY_PERCENT"]) == ("split", "20")


@pytest.mark.parametrize(
    ("uri", "token_secret"),
    [("hf://internlm/internlm2-v2", "hf-token"), ("pvc://models/internlm2-v2", None)],
)
def test_knatives_candidate_hands_the_hugging_face_token_to_kserve_for_an_hf_model_only(uri, token_secret):
    candidate_on = copy.deepcopy(KNATIVE)
    candidate_on["spec"]["credentials"] = {"huggingFaceToken": {"name": "hf-token", "key": "HF_TOKEN"}}
    candidate_on["spec"]["canary"]["model"]["uri"] = uri
    _, candidate = [c for c in render_reward_model(candidate_on) if c["kind"] == "InferenceService"]
    assert candidate["metadata"]["annotations"].get("serving.kserve.io/storageSecretName") == token_secret


def test_knatives_candidate_admits_only_the_gateway_when_policies_guard_the_pods():
    guarded = copy.deepcopy(KNATIVE)
    guarded["spec"]["gateway"] = {"allowedClients": [{"podSelector": {"matchLabels": {"app": "trainer"}}}]}
    policies = {c["metadata"]["name"]: c for c in render_reward_model(guarded) if c["kind"] == "NetworkPolicy"}
    assert set(policies) == {"internlm2-rm-gateway", "internlm2-rm-predictor", "internlm2-rm-candidate-predictor"}
    candidate = policies["internlm2-rm-candidate-predictor"]["spec"]
    assert candidate["podSelector"]["matchLabels"] == {
        "serving.kserve.io/inferenceservice": "internlm2-rm-canary",
        "component": "predictor",
    }
    assert candidate["ingress"] == policies["internlm2-rm-predictor"]["spec"]["ingress"]
