"""Golden files of the rendered children, one per model kind and deployment mode.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os

import pytest
import yaml

from reward_operator.render import render_reward_model
from reward_operator.render.vllm_args import vllm_args
from reward_testing.paths import GOLDEN, golden_cases, golden_input

CASES = {case: golden_input(case) for case in golden_cases()}


def test_every_kind_and_mode_has_a_case():
    assert {"sequence-gateway-auth", "token-no-gateway"} <= set(CASES)
    for kind in ("sequence", "token", "process"):
        for mode in ("standard", "knative"):
            assert f"{kind}-{mode}" in CASES


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_children_match_golden(case: str):
    rendered = yaml.safe_dump_all(render_reward_model(CASES[case]), sort_keys=False, width=120)
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"missing {golden}; run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_deployment_mode_is_always_explicit_and_children_are_owned(case: str):
    (isvc,) = render_reward_model(CASES[case])
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
    (isvc,) = render_reward_model(CASES["sequence-standard"])
    assert "--served-model-name=skywork-rm" in isvc["spec"]["predictor"]["model"]["args"]
    (isvc,) = render_reward_model(CASES["sequence-knative"])
    assert "--served-model-name=skywork" in isvc["spec"]["predictor"]["model"]["args"]


def test_hugging_face_token_is_passed_by_reference_only():
    (isvc,) = render_reward_model(CASES["sequence-standard"])
    (env,) = isvc["spec"]["predictor"]["model"]["env"]
    assert env == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}


def test_extra_args_come_last():
    (isvc,) = render_reward_model(CASES["token-standard"])
    assert isvc["spec"]["predictor"]["model"]["args"][-1] == "--trust-remote-code"


def test_gateway_is_on_by_default_and_can_be_turned_off():
    (isvc,) = render_reward_model(CASES["sequence-standard"])
    assert isvc["spec"]["transformer"]["containers"][0]["command"] == ["python", "-m", "reward_gateway"]
    (bare,) = render_reward_model(CASES["token-no-gateway"])
    assert "transformer" not in bare["spec"]


def test_gateway_auth_token_is_mounted_from_the_secret_never_inlined():
    (isvc,) = render_reward_model(CASES["sequence-gateway-auth"])
    transformer = isvc["spec"]["transformer"]
    (auth,) = [v for v in transformer["volumes"] if v["name"] == "gateway-auth"]
    assert auth["secret"] == {"secretName": "trainer-tokens", "items": [{"key": "token", "path": "token"}]}
    env = {e["name"]: e["value"] for e in transformer["containers"][0]["env"]}
    assert env["REWARD_GATEWAY_AUTH_TOKEN_FILE"] == "/var/run/secrets/reward-gateway/token"


def test_rendered_gateway_environment_is_one_the_gateway_accepts(tmp_path):
    """The operator's half of the transformer contract, checked by the gateway's own config loader."""
    from reward_gateway.config import load_config

    token = tmp_path / "token"
    token.write_text("secret\n")
    for case in ("sequence-standard", "sequence-gateway-auth", "process-knative", "token-standard"):
        (isvc,) = render_reward_model(CASES[case])
        env = {e["name"]: e["value"] for e in isvc["spec"]["transformer"]["containers"][0]["env"]}
        if "REWARD_GATEWAY_AUTH_TOKEN_FILE" in env:
            env["REWARD_GATEWAY_AUTH_TOKEN_FILE"] = str(token)
        config = load_config(env)
        assert config.model_name == isvc["metadata"]["name"]
        assert config.model_kind == CASES[case]["spec"]["model"].get("kind", "sequence")
        assert config.upstream_url.startswith(f"http://{isvc['metadata']['name']}-predictor.")


def test_every_optional_gateway_setting_reaches_the_gateway():
    """Each spec.gateway field lands in the gateway's config under the name the gateway reads:
    an unknown REWARD_GATEWAY_* name would be ignored there and fall back to a default."""
    import copy

    from reward_gateway.config import load_config
    from reward_operator.render.gateway import _OPTIONAL_ENV

    reward_model = copy.deepcopy(CASES["process-knative"])
    settings = {
        "bosToken": "<s>",
        "stepTag": "<step>",
        "stepAggregate": "last",
        "maxConcurrency": 7,
        "requestTimeoutSeconds": 11,
        "scaleFromZeroTimeoutSeconds": 13,
        "maxItems": 17,
        "truncatePromptTokens": 19,
    }
    assert set(settings) == {field for field, _ in _OPTIONAL_ENV}, "a new optional setting needs a case here"
    reward_model["spec"].setdefault("gateway", {}).update(settings)
    (isvc,) = render_reward_model(reward_model)
    env = {e["name"]: e["value"] for e in isvc["spec"]["transformer"]["containers"][0]["env"]}
    config = load_config(env)
    assert (config.bos_token, config.step_tag, config.step_aggregate) == ("<s>", "<step>", "last")
    assert (config.max_concurrency, config.request_timeout_s, config.scale_from_zero_timeout_s) == (7, 11, 13)
    assert (config.max_items, config.truncate_prompt_tokens) == (17, 19)
