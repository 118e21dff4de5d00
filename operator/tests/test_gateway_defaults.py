"""What the operator writes of the gateway's settings is the gateway's own
(reward_gateway.config.settings, its one table).

The two programs never import each other, so the operator keeps copies: the two timeouts (the Knative timeout
rule, render's worst case), the defaults its schema's prose quotes, and the variables it renders. These tests
are what keep the copies honest.
"""

import pytest
import yaml

from reward_gateway.config.gateway import GatewayConfig, load_config
from reward_gateway.config.settings import BY_NAME, PREFIX, Env, Setting
from reward_gateway.items.kinds import KINDS
from reward_operator.api.crd import all_crds
from reward_operator.api.schema.rewardmodel.gateway import (
    GATEWAY_REQUEST_TIMEOUT_SECONDS,
    GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS,
)
from reward_operator.render.gateway import DEFAULT_GATEWAY_MEMORY_BY_KIND
from reward_testing.paths import GOLDEN

# What a gateway needs to start; every other setting left to the gateway's default.
MINIMAL_ENV = {"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm:8080", "REWARD_GATEWAY_MODEL_NAME": "rm"}


def test_a_gateway_started_without_timeouts_waits_what_the_operator_assumes():
    config = load_config(MINIMAL_ENV)
    assert config.request_timeout_s == GATEWAY_REQUEST_TIMEOUT_SECONDS
    assert config.scale_from_zero_timeout_s == GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS


def test_the_gateways_config_defaults_agree_with_its_reader():
    config = GatewayConfig(upstream_url="http://vllm:8080", model_name="rm")
    assert config.request_timeout_s == GATEWAY_REQUEST_TIMEOUT_SECONDS
    assert config.scale_from_zero_timeout_s == GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS


def test_every_weighted_client_keeps_its_own_metric_series_and_its_name_fits_the_gateways():
    """spec.gateway.scheduling.clients is bounded by what the gateway labels and reads of a client's name."""
    from reward_gateway.config.identity import MAX_CLIENT_CHARS, MAX_CLIENT_LABELS
    from reward_operator.api.schema.rewardmodel.gateway import CLIENT_NAME_MAX_LENGTH, MAX_WEIGHTED_CLIENTS

    assert MAX_WEIGHTED_CLIENTS <= MAX_CLIENT_LABELS
    assert CLIENT_NAME_MAX_LENGTH == MAX_CLIENT_CHARS


def _description(path: str) -> str:
    node = all_crds()["serving.rlhf.dev_rewardmodels.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        node = node["properties"][part]
    return " ".join(node["description"].split())


# The RewardModel fields whose description quotes a gateway default, and how it quotes it.
QUOTED_DEFAULTS: list[tuple[str, Setting, str]] = [
    ("spec.model.stepTagId", Env.STEP_TAG, "gateway.stepTag (default {})"),
    ("spec.gateway.maxHeldRequests", Env.MAX_HELD_REQUESTS, "(default {})"),
    ("spec.gateway.scheduling.defaultClientWeight", Env.CLIENT_DEFAULT_WEIGHT, "(the gateway's default: {})"),
    ("spec.canary.clientHeader", Env.CANARY_CLIENT_HEADER, "(default {})"),
]


@pytest.mark.parametrize(("path", "setting", "quoted"), QUOTED_DEFAULTS, ids=[row[0] for row in QUOTED_DEFAULTS])
def test_the_schema_quotes_the_gateways_own_defaults(path, setting, quoted):
    assert quoted.format(setting.default) in _description(path)


def test_every_variable_the_operator_renders_is_one_the_gateway_reads():
    rendered = set()
    for golden in GOLDEN.rglob("*.yaml"):
        for child in yaml.safe_load_all(golden.read_text()):
            rendered |= {match for match in _env_names(child) if match.startswith(PREFIX)}
    assert rendered, "no gateway variables found in the goldens"
    unknown = sorted(name for name in rendered if name.removeprefix(PREFIX) not in BY_NAME)
    assert not unknown, f"rendered but not in reward_gateway.config.settings: {unknown}"


def _env_names(node) -> set[str]:
    if isinstance(node, dict):
        an_env_var = isinstance(node.get("name"), str) and ("value" in node or "valueFrom" in node)
        found = {node["name"]} if an_env_var else set()
        for value in node.values():
            found |= _env_names(value)
        return found
    if isinstance(node, list):
        return set().union(*(_env_names(value) for value in node)) if node else set()
    return set()


def test_the_operator_gives_more_memory_to_exactly_the_kinds_whose_answers_cost_more():
    """A kind whose vLLM answer carries a value per token is charged more per request by the gateway."""
    assert set(DEFAULT_GATEWAY_MEMORY_BY_KIND) == {name for name, kind in KINDS.items() if kind.answer_cost_per_byte}


def test_the_kinds_the_schema_offers_are_the_gateways():
    assert tuple(_model_kinds()) == tuple(KINDS)


def _model_kinds() -> list[str]:
    node = all_crds()["serving.rlhf.dev_rewardmodels.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return node["properties"]["spec"]["properties"]["model"]["properties"]["kind"]["enum"]
