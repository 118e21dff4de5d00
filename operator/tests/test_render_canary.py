"""The candidate's rendering (render/canary.py): KServe's spec.canary[] entry and the gateway's settings.
The whole children are in the golden files (sequence-canary-*); these say what matters in them."""

from __future__ import annotations

import copy

import pytest

from reward_operator.api.defaults import apply_defaults
from reward_operator.api.duration import interval_seconds
from reward_operator.render import canary_identity, render_reward_model, rendered_reward_model, reward_model_candidate
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


def rollout_config_map(reward_model: dict, **kwargs) -> dict:
    (found,) = [c for c in render_reward_model(reward_model, **kwargs) if c["metadata"]["name"].endswith("-rollout")]
    return found


def test_the_share_is_in_the_rollout_config_map_never_in_the_gateways_environment():
    shadow = gateway_env(SHADOW)
    assert shadow["CANARY_MODE"] == "shadow" and "CANARY_PERCENT" not in shadow
    assert rollout_config_map(SHADOW)["data"] == {"percent": "0"}
    assert "CANARY_MODEL_NAME" not in shadow
    assert rollout_config_map(SPLIT, canary_percent=50)["data"] == {"percent": "50"}
    assert rollout_config_map(SPLIT)["data"] == {"percent": "25"}, "offline, the share in status.canary"
    split = gateway_env(SPLIT)
    assert "CANARY_PERCENT" not in split and split["CANARY_PERCENT_FILE"] == "/etc/reward-rollout/percent"
    assert (split["CANARY_STICKY"], split["CANARY_CLIENT_HEADER"]) == ("client", "X-Training-Job")
    assert split["CANARY_MODEL_NAME"] == "internlm2-rm-v2"
    assert split["CANARY_HALF_LIFE_SECONDS"] == "900"


@pytest.mark.parametrize(
    "case", ["sequence-canary-shadow", "sequence-canary-split-allowed-clients", "token-knative-canary"]
)
def test_a_share_step_changes_only_the_rollout_config_map_so_no_gateway_restarts(case):
    reward_model = golden_input(case)
    before, after = (
        render_reward_model(reward_model, canary_percent=25),
        render_reward_model(reward_model, canary_percent=50),
    )
    changed = [b["metadata"]["name"] for b, a in zip(before, after, strict=True) if b != a]
    split = reward_model["spec"]["canary"].get("mode", "shadow") == "split"
    assert changed == ([f"{reward_model['metadata']['name']}-rollout"] if split else []), "no pod template moves"


def test_the_gateway_mounts_the_rollout_config_map_which_is_applied_first():
    children = render_reward_model(SPLIT)
    config_map = children[0]
    assert (config_map["kind"], config_map["metadata"]["name"]) == ("ConfigMap", "internlm2-rm-rollout")
    assert config_map["metadata"]["ownerReferences"] == isvc(SPLIT)["metadata"]["ownerReferences"]
    transformer = isvc(SPLIT)["spec"]["transformer"]
    (container,) = transformer["containers"]
    assert {"name": "rollout", "configMap": {"name": "internlm2-rm-rollout"}} in transformer["volumes"]
    # a directory, not a subPath: only a directory mount is re-projected when the ConfigMap changes
    assert {"name": "rollout", "mountPath": "/etc/reward-rollout", "readOnly": True} in container["volumeMounts"]
    assert "subPath" not in str(container["volumeMounts"])
    assert gateway_env(SPLIT)["CANARY_PERCENT_FILE"] == "/etc/reward-rollout/" + next(iter(config_map["data"]))
    assert not any(
        c["metadata"]["name"].endswith("-rollout") for c in render_reward_model(golden_input("sequence-standard"))
    )


def test_pruning_the_rollouts_config_maps_selects_it_and_never_a_chat_template():
    """The controller prunes the rollout's ConfigMaps by the owner's labels plus the set's own."""
    owner_labels = {"app.kubernetes.io/managed-by": "reward-operator", "serving.rlhf.dev/rewardmodel": "internlm2-rm"}
    split = apply_defaults(SPLIT)  # as the runner prepares it
    rendered = rendered_reward_model(split, reward_model_candidate(split))
    (owned,) = [o for o in rendered.owned if (o.api_version, o.kind) == ("v1", "ConfigMap")]
    selector = {**owner_labels, **owned.labels}
    config_maps = [c for c in rendered.children if (c["apiVersion"], c["kind"]) == ("v1", "ConfigMap")]
    assert len(config_maps) == 4, "the two chat templates', the rollout's and the identity's"
    selected = [c["metadata"]["name"] for c in config_maps if selector.items() <= c["metadata"]["labels"].items()]
    assert selected == ["internlm2-rm-rollout"] and rendered.kept(owned) == {"internlm2-rm-rollout"}


def test_the_gateway_takes_the_rendered_share_from_the_mounted_config_map(tmp_path):
    """The operator's half of the share's contract, read by the gateway's own loader and share reader."""
    from reward_gateway.config.gateway import load_config
    from reward_gateway.config.share import followed
    from reward_testing.projected_volume import project

    env = {f"REWARD_GATEWAY_{key}": value for key, value in gateway_env(SPLIT, canary_percent=50).items() if value}
    ((key, percent),) = rollout_config_map(SPLIT, canary_percent=50)["data"].items()
    (tmp_path / "rollout").mkdir()
    (tmp_path / "template").mkdir()
    path = project(tmp_path / "rollout", percent, key)
    env["REWARD_GATEWAY_CANARY_PERCENT_FILE"] = str(path)  # where the pod sees it, here
    template = project(tmp_path / "template", "{{ messages }}", "chat_template.jinja")
    env["REWARD_GATEWAY_CHAT_TEMPLATE_FILE"] = env["REWARD_GATEWAY_CANARY_CHAT_TEMPLATE_FILE"] = str(template)
    canary = load_config(env).canary
    assert canary.percent_file == path
    assert followed(str(canary.percent_file), canary.mode).percent == 50


def test_the_candidates_own_template_reaches_its_vllm_and_the_gateway():
    children = render_reward_model(SPLIT)
    names = [c["metadata"]["name"] for c in children if c["kind"] == "ConfigMap"]
    assert names == [
        "internlm2-rm-rollout",
        "internlm2-rm-identity",
        "internlm2-rm-chat-template",
        "internlm2-rm-candidate-chat-template",
    ]
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
    assert env["CANARY_MODE"] == "split" and rollout_config_map(KNATIVE)["data"] == {"percent": "20"}


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
