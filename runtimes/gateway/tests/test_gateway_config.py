"""Configuration errors name the variable and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from reward_gateway.config.gateway import ConfigError, KServeArgs, load_config, parse_kserve_args

BASE = {"REWARD_GATEWAY_UPSTREAM_URL": "rm-predictor.ns", "REWARD_GATEWAY_MODEL_NAME": "rm"}


def test_defaults_and_bare_predictor_host():
    config = load_config(BASE)
    assert config.upstream_url == "http://rm-predictor.ns"
    assert (config.model_kind, config.template_mode, config.max_concurrency, config.port) == (
        "sequence",
        "upstream",
        64,
        8080,
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"REWARD_GATEWAY_MODEL_NAME": ""}, "REWARD_GATEWAY_MODEL_NAME is required"),
        ({"REWARD_GATEWAY_MODEL_KIND": "outcome"}, "expected one of sequence, token, process"),
        ({"REWARD_GATEWAY_MAX_CONCURRENCY": "0"}, "at least 1"),
        ({"REWARD_GATEWAY_REQUEST_TIMEOUT_SECONDS": "soon"}, "number of seconds"),
        ({"REWARD_GATEWAY_PORT": "70000"}, "between 1 and 65535"),
        ({"REWARD_GATEWAY_LISTEN_ADDRESS": "localhost"}, "expected an IP address"),
        ({"REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway"}, "needs REWARD_GATEWAY_CHAT_TEMPLATE_FILE"),
        ({"REWARD_GATEWAY_AUTH_TOKEN_FILE": "/nonexistent/token"}, "no such file"),
        ({"REWARD_GATEWAY_UPSTREAM_URL": "ftp://x"}, "http:// or https://"),
        ({"REWARD_GATEWAY_REWARD_TOKEN_ID": "92527"}, "REWARD_TOKEN_ID applies only to .*MODEL_KIND=token"),
        ({"REWARD_GATEWAY_MODEL_KIND": "token", "REWARD_GATEWAY_REWARD_TOKEN_ID": "-1"}, "at least 0"),
        ({"REWARD_GATEWAY_MODEL_KIND": "token", "REWARD_GATEWAY_REWARD_TOKEN_ID": "last"}, "expected an integer"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config({**BASE, **override})


def test_a_listen_address_is_taken_as_given_and_all_interfaces_by_default():
    assert load_config(BASE).listen_address == ""
    assert load_config({**BASE, "REWARD_GATEWAY_LISTEN_ADDRESS": "127.0.3.4"}).listen_address == "127.0.3.4"
    assert load_config({**BASE, "REWARD_GATEWAY_LISTEN_ADDRESS": "::1"}).listen_address == "::1"


KSERVE_ARGS = ["--model_name", "rm", "--predictor_host", "rm-predictor.ns", "--http_port", "8080"]


def test_kserve_transformer_args_are_read_and_others_ignored():
    args, ignored = parse_kserve_args([*KSERVE_ARGS, "--workers", "4", "--protocol", "v1", "--model", "x"])
    assert args == KServeArgs(model_name="rm", predictor_host="rm-predictor.ns", http_port=8080, workers=4)
    assert ignored == ["--protocol", "v1", "--model", "x"]  # --model is not taken for --model_name


def test_kserve_args_stand_in_for_unset_variables():
    args, _ = parse_kserve_args(KSERVE_ARGS)
    config = load_config({}, args)
    assert (config.upstream_url, config.model_name, config.port) == ("http://rm-predictor.ns", "rm", 8080)
    assert config.v1_names == ("rm",)


def test_variables_win_over_kserve_args_and_v1_routes_answer_both_names():
    args, _ = parse_kserve_args([*KSERVE_ARGS[:-1], "9000"])
    env = {**BASE, "REWARD_GATEWAY_MODEL_NAME": "served-rm", "REWARD_GATEWAY_UPSTREAM_URL": "http://vllm:8000"}
    config = load_config({**env, "REWARD_GATEWAY_PORT": "8081"}, args)
    assert (config.upstream_url, config.model_name, config.port) == ("http://vllm:8000", "served-rm", 8081)
    assert config.v1_names == ("served-rm", "rm")
    assert load_config(env, args).port == 9000  # --http_port where the variable is unset


def test_without_variable_or_arg_the_message_names_both():
    with pytest.raises(ConfigError, match=r"REWARD_GATEWAY_UPSTREAM_URL is required \(or --predictor_host\)"):
        load_config({"REWARD_GATEWAY_MODEL_NAME": "rm"})
    with pytest.raises(ConfigError, match=r"--predictor_host='ftp://x': expected an http"):
        load_config({}, KServeArgs(model_name="rm", predictor_host="ftp://x"))


# OpenRLHF's reward client gives up on one try after 180 s in all (aiohttp ClientTimeout(total=180),
# openrlhf/utils/agent.py in 0.11.2; ../shared/trainers.md), then tries again, 5 times.
OPENRLHF_CLIENT_TIMEOUT_S = 180


def test_a_cold_start_is_answered_503_before_openrlhfs_client_gives_up():
    """The scale-from-zero wait ends in 503 + Retry-After while OpenRLHF still listens, with time
    left for the call that follows a predictor that came up at the last moment to begin."""
    config = load_config({"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm", "REWARD_GATEWAY_MODEL_NAME": "rm"})
    assert config.scale_from_zero_timeout_s <= OPENRLHF_CLIENT_TIMEOUT_S - 30


CANARY = {**BASE, "REWARD_GATEWAY_CANARY_URL": "rm-v2-predictor.ns"}


def test_no_canary_unless_its_url_is_set_and_its_defaults():
    assert load_config(BASE).canary is None
    canary = load_config(CANARY).canary
    assert canary is not None
    assert (canary.upstream_url, canary.model_name, canary.name) == ("http://rm-v2-predictor.ns", "rm", "rm-candidate")
    assert (canary.mode, canary.percent, canary.sticky) == ("shadow", 0, "group")
    assert load_config(CANARY).client_header == "x-reward-client"
    assert (canary.shadow_wait_s, canary.half_life_s, canary.chat_template) == (2.0, 600.0, None)


def test_canary_settings_are_read():
    env = {
        **CANARY,
        "REWARD_GATEWAY_CANARY_MODEL_NAME": "rm-v2",
        "REWARD_GATEWAY_CANARY_MODE": "split",
        "REWARD_GATEWAY_CANARY_PERCENT": "25",
        "REWARD_GATEWAY_CANARY_STICKY": "client",
        "REWARD_GATEWAY_CANARY_CLIENT_HEADER": "X-Job-Id",
        "REWARD_GATEWAY_CANARY_SHADOW_WAIT_SECONDS": "0.5",
        "REWARD_GATEWAY_CANARY_HALF_LIFE_SECONDS": "0",
        "REWARD_GATEWAY_CANARY_CHAT_TEMPLATE": "{{ messages }}",
        "REWARD_GATEWAY_CANARY_BOS_TOKEN": "<|begin_of_text|>",
    }
    canary = load_config(env).canary
    assert (canary.model_name, canary.name, canary.mode, canary.percent) == ("rm-v2", "rm-v2", "split", 25)
    assert (canary.sticky, canary.shadow_wait_s) == ("client", 0.5)
    assert load_config(env).client_header == "x-job-id"
    assert canary.half_life_s is None  # 0: everything since start
    assert (canary.chat_template.source, canary.chat_template.bos_token) == ("{{ messages }}", "<|begin_of_text|>")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"REWARD_GATEWAY_CANARY_MODE": "mirror"}, "expected one of shadow, split"),
        ({"REWARD_GATEWAY_CANARY_PERCENT": "101"}, "between 0 and 100"),
        ({"REWARD_GATEWAY_CANARY_PERCENT": "12.5"}, "expected an integer"),
        ({"REWARD_GATEWAY_CANARY_PERCENT": "10"}, "PERCENT=10 applies to REWARD_GATEWAY_CANARY_MODE=split"),
        ({"REWARD_GATEWAY_CANARY_STICKY": "pod"}, "expected one of group, client"),
        ({"REWARD_GATEWAY_CANARY_CLIENT_HEADER": "X Client"}, "expected an HTTP header name"),
        ({"REWARD_GATEWAY_CANARY_NAME": "rm"}, "is the stable model's name"),
        ({"REWARD_GATEWAY_CANARY_URL": "ftp://x"}, "REWARD_GATEWAY_CANARY_URL='ftp://x': expected an http"),
        ({"REWARD_GATEWAY_CANARY_SHADOW_WAIT_SECONDS": "-1"}, "positive number of seconds"),
        ({"REWARD_GATEWAY_CANARY_CHAT_TEMPLATE_FILE": "/nonexistent/t.jinja"}, "CANARY_CHAT_TEMPLATE_FILE="),
        (
            {
                "REWARD_GATEWAY_CANARY_PERCENT": "10",
                "REWARD_GATEWAY_CANARY_PERCENT_FILE": "/etc/reward-rollout/percent",
            },
            "PERCENT and REWARD_GATEWAY_CANARY_PERCENT_FILE are both set",
        ),
    ],
)
def test_bad_canary_values_are_refused_with_the_variable_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config({**CANARY, **override})


def test_the_canary_share_may_come_from_a_file_followed_at_run_time():
    env = {**CANARY, "REWARD_GATEWAY_CANARY_MODE": "split", "REWARD_GATEWAY_CANARY_PERCENT_FILE": "/etc/r/percent"}
    canary = load_config(env).canary
    # read by the running gateway (reward_gateway.config.share), not here: a bad file never stops it from starting
    assert (canary.percent_file, canary.percent) == (Path("/etc/r/percent"), 0)
    assert load_config(CANARY).canary.percent_file is None


def test_canary_settings_without_its_url_are_refused():
    env = {**BASE, "REWARD_GATEWAY_CANARY_MODE": "split", "REWARD_GATEWAY_CANARY_PERCENT": "10"}
    with pytest.raises(
        ConfigError,
        match="REWARD_GATEWAY_CANARY_MODE, REWARD_GATEWAY_CANARY_PERCENT set without REWARD_GATEWAY_CANARY_URL",
    ):
        load_config(env)
    assert load_config({**BASE, "REWARD_GATEWAY_CANARY_MODE": ""}).canary is None  # empty is unset


def test_a_token_model_scored_at_a_reward_token_knows_its_id():
    assert load_config({**BASE, "REWARD_GATEWAY_MODEL_KIND": "token"}).reward_token_id is None
    config = load_config({**BASE, "REWARD_GATEWAY_MODEL_KIND": "token", "REWARD_GATEWAY_REWARD_TOKEN_ID": "92527"})
    assert config.reward_token_id == 92527
