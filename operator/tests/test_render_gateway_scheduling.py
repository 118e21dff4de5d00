"""spec.gateway.scheduling as the gateway's environment, and the gateway's own loader reading what the operator
renders (the two programs never import each other at run time). The whole children are in the golden files
(sequence-scheduling); these say what matters in them. The model's identity: test_render_model_identity.py."""

from __future__ import annotations

import copy

import pytest
from rendered_gateway_settings import PREFIX, env, loadable

from reward_gateway.config.gateway import ConfigError, load_config
from reward_operator.api.schema.rewardmodel.gateway import SCHEDULING
from reward_operator.api.validation import validate
from reward_testing.paths import golden_input

SCHEDULED = golden_input("sequence-scheduling")
PLAIN = golden_input("sequence-standard")


def with_scheduling(scheduling: dict, reward_model: dict = PLAIN) -> dict:
    changed = copy.deepcopy(reward_model)
    changed["spec"].setdefault("gateway", {})["scheduling"] = scheduling
    return changed


def test_the_gateway_runs_the_specs_scheduling(tmp_path):
    config = load_config(loadable(env(SCHEDULED), tmp_path)).coalesce
    assert config.enabled, "the weights turn coalescing on where spec.gateway.scheduling.coalesce is unset"
    assert config.max_wait_s == pytest.approx(0.010)
    assert config.max_items == 128
    assert dict(config.weights) == {"grpo-main": 3.0, "ppo-ablation": 1.0}
    assert config.default_weight == 0.5


def test_every_scheduling_field_reaches_the_gateway_under_the_name_it_reads():
    scheduling = {
        "coalesce": True,
        "maxWaitMilliseconds": 7,
        "maxItemsPerCall": 9,
        "maxCallsInFlight": 3,
        "maxCallMilliseconds": 20,
        "fairShare": True,
        "clients": [{"name": "a", "weight": 2.5}],
        "defaultClientWeight": 0.25,
    }
    assert set(scheduling) == set(SCHEDULING["properties"]), "a new scheduling field needs a case here"
    config = load_config(env(with_scheduling(scheduling))).coalesce
    assert (config.enabled, config.fair_share) == (True, True)
    assert (config.max_wait_s, config.max_items, config.max_batches) == (pytest.approx(0.007), 9, 3)
    assert config.max_call_s == pytest.approx(0.020)
    assert (dict(config.weights), config.default_weight) == ({"a": 2.5}, 0.25)


@pytest.mark.parametrize("flag", [True, False])
def test_coalesce_and_fair_share_are_rendered_as_set(flag):
    rendered = env(with_scheduling({"coalesce": flag, "fairShare": flag}))
    word = "true" if flag else "false"
    assert (rendered[PREFIX + "COALESCE"], rendered[PREFIX + "FAIR_SHARE"]) == (word, word)
    config = load_config(rendered).coalesce
    assert (config.enabled, config.fair_share) == (flag, flag)


def test_unset_fields_leave_the_gateways_own_defaults():
    for reward_model in (PLAIN, with_scheduling({})):
        rendered = env(reward_model)
        assert not [name for name in rendered if "COALESCE" in name or "CLIENT" in name or "FAIR" in name]
    # a tuned wait alone says nothing of whether to coalesce: the gateway decides
    assert PREFIX + "COALESCE" not in env(with_scheduling({"maxWaitMilliseconds": 2}))


def test_a_default_weight_alone_turns_coalescing_on_too():
    rendered = env(with_scheduling({"defaultClientWeight": 2}))
    assert rendered[PREFIX + "COALESCE"] == "true"
    assert load_config(rendered).coalesce.default_weight == 2


def test_a_weighted_client_name_reaches_the_gateway_verbatim():
    names = ["job/\u00e9-1", 'quote"d', "x" * 128]
    clients = [{"name": name, "weight": 1 + index} for index, name in enumerate(names)]
    weights = load_config(env(with_scheduling({"clients": clients}))).coalesce.weights
    assert list(weights) == names


def test_the_schema_refuses_the_weights_the_gateway_would_not_start_with():
    """coalesce: false with weights: the gateway's loader refuses it at start, so the schema refuses it first."""
    refused = with_scheduling({"coalesce": False, "clients": [{"name": "a", "weight": 1}]})
    with pytest.raises(ConfigError, match="needs REWARD_GATEWAY_COALESCE=true"):
        load_config(env(refused))
    assert [problem.path for problem in validate(refused)] == [".spec.gateway.scheduling"]
