"""A pipeline role's configuration, and the running normalisation's arithmetic."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from reward_gateway.config.gateway import ConfigError, PipelineReward, load_config, parse_kserve_args
from reward_gateway.items.outcomes import Failure
from reward_gateway.pipeline.combine import Combiner, Part, RunningStats, best_by_group
from reward_testing.paths import golden_children

BASE = {"REWARD_GATEWAY_UPSTREAM_URL": "policy-predictor.ns", "REWARD_GATEWAY_MODEL_NAME": "policy"}
REWARDS = json.dumps(
    [
        {"step": "reward-helpful", "weight": 0.7, "normalise": "none"},
        {"step": "reward-harmless", "weight": 0.3, "normalise": "running"},
    ]
)
ACTOR = {**BASE, "REWARD_GATEWAY_PIPELINE_ROLE": "actor", "REWARD_GATEWAY_PIPELINE_REWARDS": REWARDS}


def test_the_actors_rewards_and_best_of_n_are_read_as_the_operator_renders_them():
    config = load_config({**ACTOR, "REWARD_GATEWAY_PIPELINE_BEST_OF_N": "8"})
    assert config.pipeline_role == "actor"
    assert config.pipeline_rewards == (
        PipelineReward("reward-helpful", 0.7, "none"),
        PipelineReward("reward-harmless", 0.3, "running"),
    )
    assert [reward.name for reward in config.pipeline_rewards] == ["helpful", "harmless"]
    assert config.pipeline_best_of_n == 8
    assert load_config(ACTOR).pipeline_best_of_n is None


def test_a_reward_models_gateway_has_no_role():
    config = load_config(BASE)
    assert (config.pipeline_role, config.pipeline_rewards, config.pipeline_best_of_n) == (None, (), None)


@pytest.mark.parametrize("role", ["reference", "critic"])
def test_the_reference_and_the_critic_need_only_their_vllm(role):
    config = load_config({**BASE, "REWARD_GATEWAY_PIPELINE_ROLE": role, "REWARD_GATEWAY_MAX_CONCURRENCY": "8"})
    assert (config.pipeline_role, config.max_concurrency) == (role, 8)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**BASE, "REWARD_GATEWAY_PIPELINE_ROLE": "judge"}, "expected one of actor, reference, critic"),
        ({**BASE, "REWARD_GATEWAY_PIPELINE_ROLE": "actor"}, "PIPELINE_REWARDS is required for pipeline role actor"),
        ({**BASE, "REWARD_GATEWAY_PIPELINE_REWARDS": REWARDS}, "the actor's setting"),
        ({**BASE, "REWARD_GATEWAY_PIPELINE_BEST_OF_N": "4"}, "not a RewardModel's gateway's"),
        (
            {**BASE, "REWARD_GATEWAY_PIPELINE_ROLE": "critic", "REWARD_GATEWAY_PIPELINE_REWARDS": REWARDS},
            "not pipeline role critic's",
        ),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_BEST_OF_N": "0"}, "PIPELINE_BEST_OF_N=0: expected at least 1"),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": "[{"}, "not valid JSON"),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": "[]"}, "a non-empty JSON list"),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"helpful","weight":1}]'}, "expected reward-<reward"),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"reward-a","weight":"1"}]'}, "weight='1'"),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"reward-a","weight":true}]'}, "weight=True"),
        (
            {**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"reward-a","weight":1,"normalise":"z"}]'},
            "expected one of none, running",
        ),
        ({**ACTOR, "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"reward-a","weight":1,"scale":2}]'}, "[0]: expected"),
        (
            {
                **ACTOR,
                "REWARD_GATEWAY_PIPELINE_REWARDS": '[{"step":"reward-a","weight":1},{"step":"reward-a","weight":2}]',
            },
            "listed twice",
        ),
        ({**ACTOR, "REWARD_GATEWAY_MODEL_KIND": "token"}, "REWARD_GATEWAY_MODEL_KIND: a RewardModel's setting"),
        ({**ACTOR, "REWARD_GATEWAY_CHAT_TEMPLATE": "{{ x }}"}, "not used in pipeline role actor"),
        ({**ACTOR, "REWARD_GATEWAY_REWARD_TOKEN_ID": "7"}, "REWARD_GATEWAY_REWARD_TOKEN_ID: a RewardModel's setting"),
        ({**ACTOR, "REWARD_GATEWAY_CANARY_URL": "http://c"}, "REWARD_GATEWAY_CANARY_URL: a RewardModel's setting"),
        ({**ACTOR, "REWARD_GATEWAY_SCALER_PORT": "9090"}, "REWARD_GATEWAY_SCALER_PORT: a RewardModel's setting"),
    ],
)
def test_a_role_misconfigured_is_refused_with_the_variable_named(env, message):
    with pytest.raises(ConfigError, match=_literal(message)):
        load_config(env)


def _literal(text: str) -> str:
    return "".join("\\" + char if char in "[]().*+?{}^$|\\" else char for char in text)


@pytest.mark.parametrize("case", ["minimal", "full"])
def test_every_role_of_the_operators_golden_renders_loads(case):
    """The operator's rendered environment (render/pipeline_gateway.py) is what this gateway reads."""
    roles = {}
    for child in golden_children(f"pipeline/{case}"):
        if child["kind"] != "InferenceService":
            continue
        container = child["spec"]["transformer"]["containers"][0]
        env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
        env["REWARD_GATEWAY_MEMORY_LIMIT_BYTES"] = str(2 * 2**30)  # the downward API's, in a pod
        config = load_config(env, parse_kserve_args(container["args"])[0])
        roles[config.pipeline_role] = config
    assert set(roles) >= {"actor", "reference"}
    assert roles["actor"].pipeline_rewards
    assert all(reward.step.startswith("reward-") for reward in roles["actor"].pipeline_rewards)
    if case == "full":
        assert roles["actor"].pipeline_best_of_n == 8
        assert "critic" in roles
        assert [r.normalise for r in roles["actor"].pipeline_rewards] == ["none", "running"]


def test_running_stats_match_the_population_mean_and_deviation():
    values = [random.Random(seed).gauss(3, 7) for seed in range(500)]
    stats = RunningStats()
    for start in range(0, 500, 37):  # batches of uneven size
        stats.update(values[start : start + 37])
    assert stats.count == 500
    assert stats.mean == pytest.approx(statistics.fmean(values))
    assert stats.std == pytest.approx(statistics.pstdev(values))


def test_no_deviation_yet_centres_without_dividing():
    stats = RunningStats()
    assert stats.standardise([5.0]) == [5.0]  # nothing seen: mean 0, deviation 0
    stats.update([2.0, 2.0])
    assert stats.standardise([2.0, 3.0]) == [0.0, 1.0]


def test_a_weight_of_zero_keeps_the_part_out_of_the_sum_but_in_the_answer():
    combiner = Combiner([PipelineReward("reward-a", 0.0), PipelineReward("reward-b", 2.0)])
    combined = combiner.combine({"reward-a": Part([100.0]), "reward-b": Part([1.5])}, 1)
    assert combined.rewards == [3.0]
    assert combined.parts == {"a": [100.0], "b": [1.5]}
    assert combined.normalised == {}


def test_an_item_with_a_failed_part_is_a_failure_not_a_partial_sum():
    """A reward model's null for an item (its reason in its part's failures): no combined reward for that item,
    the reason carried on, the running statistics fed only what was scored, and never chosen as best."""
    combiner = Combiner([PipelineReward("reward-a", 1.0, "running"), PipelineReward("reward-b", 2.0)])
    failed = {1: Failure("too_long", "over the context", retry=False)}
    combined = combiner.combine({"reward-a": Part([1.0, 5.0, 3.0]), "reward-b": Part([0.5, None, 1.5], failed)}, 3)
    assert combined.rewards[1] is None and None not in (combined.rewards[0], combined.rewards[2])
    [failure] = combined.failure_list()
    assert (failure["index"], failure["reason"], failure["retry"]) == (1, "part_failed", False)
    assert "'b': too_long: over the context" in failure["message"]
    assert combiner.stats["reward-a"].count == 3  # a's own rewards were all scored
    results = best_by_group(["p"] * 3, ["x", "y", "z"], [0, 0, 0], combined)
    assert results[0]["best"]["index"] == 2 and results[0]["candidates"][1]["reward"] is None
    none = combiner.combine({"reward-a": Part([None]), "reward-b": Part([None])}, 1)
    assert best_by_group(["p"], ["x"], [0], none)[0]["best"] is None
    assert none.failures[0].message == "reward model 'a' answered no reward for this item"
