"""Golden files of the rendered children, one per model kind and deployment mode.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import pytest
import yaml

from reward_operator.render import render_reward_model
from reward_operator.render.vllm_args import vllm_args
from reward_testing.gateway_process import pod_env
from reward_testing.paths import GOLDEN, assert_matches_golden, golden_cases, golden_input

CASES = {case: golden_input(case) for case in golden_cases()}


def inference_service(reward_model: dict) -> dict:
    """The RewardModel's own InferenceService (Knative mode's rollout adds the candidate's)."""
    name = reward_model["metadata"]["name"]
    children = render_reward_model(reward_model)
    (isvc,) = [c for c in children if c["kind"] == "InferenceService" and c["metadata"]["name"] == name]
    return isvc


def test_every_kind_and_mode_has_a_case():
    assert {"sequence-gateway-auth", "token-no-gateway"} <= set(CASES)
    for kind in ("sequence", "token", "process"):
        for mode in ("standard", "knative"):
            assert f"{kind}-{mode}" in CASES


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_children_match_golden(case: str):
    assert_matches_golden(GOLDEN / f"{case}.yaml", render_reward_model(CASES[case]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_deployment_mode_is_always_explicit_and_children_are_owned(case: str):
    isvc = inference_service(CASES[case])
    mode = CASES[case]["spec"].get("serving", {}).get("mode", "Standard")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
    assert isvc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reward-operator"
    assert isvc["metadata"]["labels"]["serving.rlhf.dev/rewardmodel"] == CASES[case]["metadata"]["name"]
    (owner,) = isvc["metadata"]["ownerReferences"]
    assert owner["controller"] is True and owner["uid"] == CASES[case]["metadata"]["uid"]


def test_sequence_models_return_the_raw_logit():
    args = vllm_args({"kind": "sequence"}, "rm")
    assert "--convert=classify" in args
    pooler = next(a for a in args if a.startswith("--pooler-config="))
    assert '"use_activation":false' in pooler


def test_token_and_process_models_use_their_pooling():
    assert '"pooling_type":"ALL"' in " ".join(vllm_args({"kind": "token"}, "rm"))
    process = " ".join(vllm_args({"kind": "process", "stepTagId": 7}, "rm"))
    assert '"pooling_type":"STEP"' in process and '"step_tag_id":7' in process
    assert "--convert=none" in process


def test_served_name_defaults_to_the_object_name():
    isvc = inference_service(CASES["sequence-standard"])
    assert "--served-model-name=skywork-rm" in isvc["spec"]["predictor"]["model"]["args"]
    isvc = inference_service(CASES["sequence-knative"])
    assert "--served-model-name=skywork" in isvc["spec"]["predictor"]["model"]["args"]


def test_hugging_face_token_is_passed_by_reference_only():
    isvc = inference_service(CASES["sequence-standard"])
    (env,) = isvc["spec"]["predictor"]["model"]["env"]
    assert env == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}


def test_extra_args_come_last():
    isvc = inference_service(CASES["token-standard"])
    assert isvc["spec"]["predictor"]["model"]["args"][-1] == "--trust-remote-code"


def test_gateway_is_on_by_default_and_can_be_turned_off():
    isvc = inference_service(CASES["sequence-standard"])
    assert isvc["spec"]["transformer"]["containers"][0]["command"] == ["python", "-m", "reward_gateway"]
    bare = inference_service(CASES["token-no-gateway"])
    assert "transformer" not in bare["spec"]


def gateway_env(isvc: dict) -> dict[str, str]:
    """The transformer's environment as the kubelet fills it in (the downward API's memory limit in bytes)."""
    return pod_env(isvc["spec"]["transformer"]["containers"][0])


def test_the_gateways_memory_budget_follows_its_container_limit():
    """The gateway reads its limit through the downward API: the default per kind, or the spec's."""
    import copy

    from reward_gateway.config.gateway import PROCESS_RESERVE_BYTES, load_config

    gib = 1024**3
    for case, limit in (("sequence-standard", gib), ("token-standard", 2 * gib), ("process-knative", gib)):
        config = load_config(gateway_env(inference_service(CASES[case])))
        assert config.memory_budget_bytes == limit - PROCESS_RESERVE_BYTES, case
    custom = copy.deepcopy(CASES["sequence-standard"])
    custom["spec"].setdefault("gateway", {})["resources"] = {"memory": "3Gi"}
    assert load_config(gateway_env(inference_service(custom))).memory_budget_bytes == 3 * gib - PROCESS_RESERVE_BYTES


def test_gateway_auth_token_is_mounted_from_the_secret_never_inlined():
    isvc = inference_service(CASES["sequence-gateway-auth"])
    transformer = isvc["spec"]["transformer"]
    (auth,) = [v for v in transformer["volumes"] if v["name"] == "gateway-auth"]
    assert auth["secret"] == {"secretName": "trainer-tokens", "items": [{"key": "token", "path": "token"}]}
    env = gateway_env(isvc)
    assert env["REWARD_GATEWAY_AUTH_TOKEN_FILE"] == "/var/run/secrets/reward-gateway/token"


def test_rendered_gateway_environment_is_one_the_gateway_accepts(tmp_path):
    """The operator's half of the transformer contract, checked by the gateway's own config loader."""
    from reward_gateway.config.gateway import load_config

    token = tmp_path / "token"
    token.write_text("secret\n")
    for case in (
        "sequence-standard",
        "sequence-gateway-auth",
        "process-knative",
        "token-standard",
        "sequence-scheduling",
    ):
        children = render_reward_model(CASES[case])
        isvc = inference_service(CASES[case])
        env = gateway_env(isvc)
        if "REWARD_GATEWAY_AUTH_TOKEN_FILE" in env:
            env["REWARD_GATEWAY_AUTH_TOKEN_FILE"] = str(token)
        if "REWARD_GATEWAY_CHAT_TEMPLATE_FILE" in env:
            # the file the ConfigMap child puts at that path in the pod
            (config_map,) = [child for child in children if child["metadata"]["name"].endswith("-chat-template")]
            template = tmp_path / "chat_template.jinja"
            template.write_text(config_map["data"]["chat_template.jinja"])
            env["REWARD_GATEWAY_CHAT_TEMPLATE_FILE"] = str(template)
        config = load_config(env)
        assert config.model_name == isvc["metadata"]["name"]
        assert config.model_kind == CASES[case]["spec"]["model"].get("kind", "sequence")
        assert config.upstream_url.startswith(f"http://{isvc['metadata']['name']}-predictor.")
        if "REWARD_GATEWAY_CHAT_TEMPLATE_FILE" in env:
            assert config.chat_template.source == CASES[case]["spec"]["model"]["chatTemplate"]


def test_every_optional_gateway_setting_reaches_the_gateway():
    """Each spec.gateway field lands in the gateway's config under the name the gateway reads:
    an unknown REWARD_GATEWAY_* name would be ignored there and fall back to a default."""
    import copy

    from reward_gateway.config.gateway import load_config
    from reward_operator.render.gateway import _OPTIONAL_ENV

    reward_model = copy.deepcopy(CASES["process-standard"])
    settings = {
        "bosToken": "<s>",
        "eosToken": "</s>",
        "stepTag": "<step>",
        "stepAggregate": "last",
        "maxConcurrency": 7,
        "requestTimeoutSeconds": 11,
        "scaleFromZeroTimeoutSeconds": 13,
        "maxHeldRequests": 23,
        "maxItems": 17,
        "truncatePromptTokens": 19,
    }
    assert set(settings) == {field for field, _ in _OPTIONAL_ENV}, "a new optional setting needs a case here"
    reward_model["spec"].setdefault("gateway", {}).update(settings)
    isvc = inference_service(reward_model)
    env = gateway_env(isvc)
    # The special tokens are the chat template's, so they are read with one (here inline).
    env |= {"REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway", "REWARD_GATEWAY_CHAT_TEMPLATE": "{{ messages }}"}
    config = load_config(env)
    assert (config.chat_template.bos_token, config.chat_template.eos_token) == ("<s>", "</s>")
    assert (config.step_tag, config.step_aggregate) == ("<step>", "last")
    assert (config.max_concurrency, config.request_timeout_s, config.scale_from_zero_timeout_s) == (7, 11, 13)
    assert (config.max_items, config.truncate_prompt_tokens, config.max_held_requests) == (17, 19, 23)


def test_chat_template_reaches_vllm_and_the_gateway_as_a_file_never_inline():
    """KServe parses the model container as a Go template: a Jinja '{{' there is refused."""
    reward_model = CASES["sequence-gateway-auth"]
    _, config_map, isvc = render_reward_model(reward_model)  # the identity's ConfigMap first
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == "guarded-rm-chat-template"
    assert config_map["data"]["chat_template.jinja"] == reward_model["spec"]["model"]["chatTemplate"]
    assert config_map["metadata"]["ownerReferences"] == isvc["metadata"]["ownerReferences"]
    predictor, transformer = isvc["spec"]["predictor"], isvc["spec"]["transformer"]
    assert "--chat-template=/etc/reward-model/chat_template.jinja" in predictor["model"]["args"]
    mount = {"name": "chat-template", "mountPath": "/etc/reward-model", "readOnly": True}
    volume = {"name": "chat-template", "configMap": {"name": "guarded-rm-chat-template"}}
    assert mount in predictor["model"]["volumeMounts"] and volume in predictor["volumes"]
    assert mount in transformer["containers"][0]["volumeMounts"] and volume in transformer["volumes"]
    assert "{{" not in yaml.safe_dump(isvc)


def test_protocol_v1_is_explicit_so_kserves_default_of_v2_never_applies():
    for case in CASES:
        assert inference_service(CASES[case])["spec"]["predictor"]["model"]["protocolVersion"] == "v1"


def test_standard_mode_replaces_gpu_pods_and_leaves_scaling_to_cpu():
    predictor = inference_service(CASES["sequence-standard"])["spec"]["predictor"]
    assert predictor["deploymentStrategy"] == {"type": "Recreate"}
    assert "scaleMetric" not in predictor and "scaleTarget" not in predictor
    assert predictor["model"]["resources"]["requests"]["cpu"] == "8"


def test_knative_mode_scales_on_concurrency_and_waits_for_a_cold_model():
    isvc = inference_service(CASES["token-knative"])
    predictor = isvc["spec"]["predictor"]
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 16)
    assert "deploymentStrategy" not in predictor, "Knative's validation refuses it"
    assert predictor["annotations"]["serving.knative.dev/progress-deadline"] == "3600s"
    # the gateway may hold a request through a scale from zero and then one vLLM call
    assert isvc["spec"]["transformer"]["timeout"] == 150 + 180


def test_knative_mode_gives_the_gateway_no_downward_api_which_knatives_webhook_refuses():
    """Knative refuses valueFrom.fieldRef and resourceFieldRef in a Service's environment unless the cluster
    enables kubernetes.podspec-fieldref (off by default): on a real Knative the gateway's Service was refused
    ("must not set the field(s): spec.template.spec.containers[0].env[7].valueFrom.resourceFieldRef") and the
    RewardModel never turned Ready. In Knative mode the memory limit is written as its number of bytes."""
    from kubernetes.utils import parse_quantity

    knative = [case for case in CASES if CASES[case]["spec"].get("serving", {}).get("mode") == "Knative"]
    assert knative
    for case in knative:
        transformer = inference_service(CASES[case])["spec"].get("transformer")
        if transformer is None:
            continue
        (container,) = transformer["containers"]
        assert not [
            v for v in container["env"] if "valueFrom" in v and set(v["valueFrom"]) & {"fieldRef", "resourceFieldRef"}
        ]
        env = {v["name"]: v.get("value") for v in container["env"]}
        limit = container["resources"]["limits"]["memory"]
        assert env["REWARD_GATEWAY_MEMORY_LIMIT_BYTES"] == str(int(parse_quantity(limit))), case


def test_knative_mode_holds_a_call_through_a_cold_start_as_long_as_the_gateway_waits():
    """Knative's activator holds the gateway's call to a predictor at zero until the predictor's revision
    timeout; past it it answers 504 ("activator request timeout", seen on the real node with a timeout shorter
    than vLLM's start: all 64 requests of a burst failed). The wait is inside the call, so the predictor's
    timeout, the gateway's call timeout and its own revision timeout all allow a scale from zero and a call."""
    import copy

    reward_model = copy.deepcopy(CASES["process-knative"])
    reward_model["spec"]["gateway"] = {"scaleFromZeroTimeoutSeconds": 400, "requestTimeoutSeconds": 120}
    spec = inference_service(reward_model)["spec"]
    assert spec["predictor"]["timeout"] == spec["transformer"]["timeout"] == 520
    assert gateway_env({"spec": spec})["REWARD_GATEWAY_REQUEST_TIMEOUT_SECONDS"] == "520"
    # a timeout the spec sets is the user's
    reward_model["spec"]["serving"]["timeoutSeconds"] = 590
    assert inference_service(reward_model)["spec"]["predictor"]["timeout"] == 590
    # Standard mode: the gateway holds the request itself, then makes one call of requestTimeoutSeconds
    standard = copy.deepcopy(CASES["process-standard"])
    standard["spec"]["gateway"] = {**standard["spec"].get("gateway", {}), "requestTimeoutSeconds": 120}
    spec = inference_service(standard)["spec"]
    assert "timeout" not in spec["predictor"]
    assert gateway_env({"spec": spec})["REWARD_GATEWAY_REQUEST_TIMEOUT_SECONDS"] == "120"


def test_transformer_names_the_model_as_vllm_serves_it():
    isvc = inference_service(CASES["sequence-knative"])
    assert isvc["spec"]["transformer"]["containers"][0]["args"] == ["--model_name=skywork"]


def test_hugging_face_token_reaches_kserves_storage_initializer_for_hf_models_only():
    annotations = inference_service(CASES["sequence-standard"])["metadata"]["annotations"]
    assert annotations["serving.kserve.io/storageSecretName"] == "hf-token"
    s3_model = {**CASES["sequence-knative"]}
    s3_model["spec"] = {
        **s3_model["spec"],
        "credentials": {"huggingFaceToken": {"name": "hf-token", "key": "HF_TOKEN"}},
    }
    assert "serving.kserve.io/storageSecretName" not in inference_service(s3_model)["metadata"]["annotations"]
