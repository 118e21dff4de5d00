"""Configuration errors name the variable and what was expected."""

from __future__ import annotations

import pytest

from reward_gateway.config import ConfigError, load_config

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
        ({"REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway"}, "needs REWARD_GATEWAY_CHAT_TEMPLATE_FILE"),
        ({"REWARD_GATEWAY_AUTH_TOKEN_FILE": "/nonexistent/token"}, "no such file"),
        ({"REWARD_GATEWAY_UPSTREAM_URL": "ftp://x"}, "http:// or https://"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config({**BASE, **override})
