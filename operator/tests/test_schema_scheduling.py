"""spec.gateway.scheduling: what the offline validation (the API server's rules, api.validation) admits and
refuses, with the words a user reads. The same cases on the real API server are in
e2e/tests/cluster/test_rewardmodel_schema.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from reward_operator.api.validation import validate

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
REWARD_MODEL = yaml.safe_load((SAMPLES / "rewardmodel-sequence-standard.yaml").read_text())


def _with_gateway(gateway: dict) -> dict:
    document = copy.deepcopy(REWARD_MODEL)
    document["spec"]["gateway"] = gateway
    return document


def _problems(scheduling: dict, **gateway) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in validate(_with_gateway({**gateway, "scheduling": scheduling}))]


@pytest.mark.parametrize(
    "scheduling",
    [
        {},
        {"coalesce": True},
        {"coalesce": False},
        {"coalesce": False, "fairShare": False},
        {"coalesce": True, "maxWaitMilliseconds": 0, "maxItemsPerCall": 1, "maxCallsInFlight": 1},
        {"maxWaitMilliseconds": 1000, "maxItemsPerCall": 65536, "maxCallsInFlight": 4096},
        {"maxCallMilliseconds": 0},
        {"coalesce": True, "maxCallMilliseconds": 60000},
        # weights with coalescing left to the operator: it turns coalescing on for them
        {"clients": [{"name": "grpo-job", "weight": 3}, {"name": "ppo-job", "weight": 0.5}]},
        {"coalesce": True, "fairShare": True, "defaultClientWeight": 0.001},
        {"clients": [{"name": "x" * 128, "weight": 1000}]},
    ],
)
def test_a_scheduling_the_gateway_can_run_is_admitted(scheduling):
    assert _problems(scheduling) == []


@pytest.mark.parametrize(
    ("scheduling", "path", "words"),
    [
        (
            {"coalesce": False, "maxWaitMilliseconds": 5},
            ".spec.gateway.scheduling",
            "maxWaitMilliseconds, maxItemsPerCall, maxCallsInFlight and maxCallMilliseconds tune coalescing, which "
            "gateway.scheduling.coalesce: false turns off",
        ),
        (
            {"coalesce": False, "clients": [{"name": "a", "weight": 2}]},
            ".spec.gateway.scheduling",
            "gateway.scheduling.clients and defaultClientWeight weigh clients in the gateway's queue, which only "
            "coalescing has",
        ),
        (
            {"coalesce": False, "defaultClientWeight": 2},
            ".spec.gateway.scheduling",
            "need gateway.scheduling.coalesce: true (or unset)",
        ),
        (
            {"fairShare": False, "clients": [{"name": "a", "weight": 2}]},
            ".spec.gateway.scheduling",
            "are fair-share weights: they need gateway.scheduling.fairShare: true (or unset)",
        ),
        (
            {"clients": [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}]},
            ".spec.gateway.scheduling.clients[1]",
            "Duplicate value",
        ),
        # 0 as an integer passes the API server's minimum (cut to an integer there): the rule refuses it
        (
            {"clients": [{"name": "a", "weight": 0}]},
            ".spec.gateway.scheduling.clients[0].weight",
            "gateway.scheduling.clients[].weight must be at least 0.001",
        ),
        ({"clients": [{"name": "a", "weight": 0.0001}]}, ".spec.gateway.scheduling.clients[0].weight", "greater than"),
        ({"clients": [{"name": "a", "weight": 1001}]}, ".spec.gateway.scheduling.clients[0].weight", "less than"),
        ({"clients": [{"name": "a"}]}, ".spec.gateway.scheduling.clients[0].weight", "Required value"),
        ({"clients": [{"name": "two words", "weight": 1}]}, ".spec.gateway.scheduling.clients[0].name", "match"),
        ({"clients": [{"name": "x" * 129, "weight": 1}]}, ".spec.gateway.scheduling.clients[0].name", "Too long"),
        (
            {"clients": [{"name": f"c{i}", "weight": 1} for i in range(33)]},
            ".spec.gateway.scheduling.clients",
            "Too many",
        ),
        ({"clients": []}, ".spec.gateway.scheduling.clients", "at least 1"),
        ({"defaultClientWeight": -1}, ".spec.gateway.scheduling.defaultClientWeight", "must be at least 0.001"),
        ({"defaultClientWeight": -0.5}, ".spec.gateway.scheduling.defaultClientWeight", "greater than"),
        ({"maxWaitMilliseconds": 1001}, ".spec.gateway.scheduling.maxWaitMilliseconds", "less than"),
        ({"maxItemsPerCall": 0}, ".spec.gateway.scheduling.maxItemsPerCall", "greater than"),
        ({"maxCallsInFlight": 0}, ".spec.gateway.scheduling.maxCallsInFlight", "greater than"),
        ({"maxCallMilliseconds": -1}, ".spec.gateway.scheduling.maxCallMilliseconds", "greater than"),
        ({"coalesce": "yes"}, ".spec.gateway.scheduling.coalesce", "must be of type boolean"),
    ],
)
def test_a_scheduling_the_gateway_cannot_run_is_refused_saying_why(scheduling, path, words):
    problems = _problems(scheduling)
    assert any(where == path and words in message for where, message in problems), problems


def test_scheduling_a_gateway_that_is_not_deployed_is_refused():
    problems = _problems({"coalesce": True}, enabled=False)
    [(path, message)] = problems
    assert path == ".spec.gateway"
    assert message.endswith("gateway.scheduling tunes how the gateway calls vLLM, so it needs gateway.enabled: true")
