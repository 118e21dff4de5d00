"""A RewardModel reconcile's decision over plain dicts (policy/rewardmodel.py): the share the gateways run,
the cache's plan, and what the reconcile applies and prunes. The rollout's phases: test_policy_canary.py."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from reward_operator.api import conditions
from reward_operator.api.canary import CanaryIdentity
from reward_operator.api.defaults import apply_defaults
from reward_operator.api.kserve import DISABLE_LOCAL_MODEL, LOCAL_MODEL_LABEL
from reward_operator.policy.rewardmodel import (
    Observation,
    as_created,
    candidate_ready,
    decide,
    plan_cache,
    running_share,
)
from reward_testing.paths import golden_input

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
IDENTITY = CanaryIdentity("rm-candidate-0123abcd", "rev-1")
READY = [{"type": "Ready", "status": "True", "reason": conditions.INFERENCE_SERVICE_READY}]


def reward_model(case: str = "sequence-standard", generation: int = 2, **status) -> dict:
    body = apply_defaults(golden_input(case))
    body["metadata"].update(generation=generation, namespace="rlhf")
    body["status"] = status
    return body


def stored_isvc(labels: dict | None = None, annotations: dict | None = None, canary_ready: bool | None = None) -> dict:
    isvc = {"kind": "InferenceService", "metadata": {"name": "rm", "labels": labels or {}}, "status": {}}
    if annotations:
        isvc["metadata"]["annotations"] = annotations
    if canary_ready is not None:
        isvc["status"]["canaryStatuses"] = [{"name": "canary", "ready": canary_ready}]
    return isvc


def cache(available: int, total: int = 1, name: str = "the-cache") -> dict:
    return {"metadata": {"name": name}, "status": {"copies": {"total": total, "available": available}}}


@pytest.mark.parametrize(
    ("status_canary", "identity", "share"),
    [
        (None, IDENTITY, 0),  # no rollout recorded
        ({"revision": "rev-1", "percent": 25}, IDENTITY, 25),  # this rollout's share
        ({"revision": "rev-0", "percent": 25}, IDENTITY, 0),  # another rollout's: it starts over at 0
        ({"revision": "rev-1", "percent": 25}, None, 0),  # spec.canary gone
        ({"revision": "rev-1"}, IDENTITY, 0),  # shadowing: no share
    ],
)
def test_the_running_share_is_the_status_of_this_rollout_only(status_canary, identity, share):
    body = reward_model(**({"canary": status_canary} if status_canary else {}))
    assert running_share(body, identity) == share


@pytest.mark.parametrize(
    ("mode", "stored", "candidate", "ready"),
    [
        ("Standard", stored_isvc(canary_ready=True), None, True),
        ("Standard", stored_isvc(canary_ready=False), None, False),
        ("Standard", stored_isvc(), None, None),  # KServe has not reported on the canary entry
        ("Standard", None, None, None),
        ("Knative", None, {"status": {"conditions": READY}}, True),
        ("Knative", stored_isvc(canary_ready=True), None, None),  # its own InferenceService speaks, not the entry
    ],
)
def test_kserves_word_on_the_candidate_comes_from_where_the_mode_puts_it(mode, stored, candidate, ready):
    body = reward_model()
    body["spec"]["serving"]["mode"] = mode
    assert candidate_ready(body, stored, candidate) is ready


# (the cache's copies, the InferenceService as stored) -> (bound, hold, rebind, ModelCached's status)
@pytest.mark.parametrize(
    ("found", "stored", "bound", "hold", "rebind", "cached"),
    [
        (cache(1), None, True, False, False, "True"),  # filled: created bound
        (cache(0), None, False, True, False, "Unknown"),  # filling, nothing served yet: held back
        (cache(0), stored_isvc(), False, False, False, "Unknown"),  # filling, served meanwhile from its download
        (cache(0), stored_isvc({LOCAL_MODEL_LABEL: "the-cache"}), True, False, False, "Unknown"),  # bound: stays
        # an opt-out of an earlier release cleared
        (cache(1), stored_isvc(annotations={DISABLE_LOCAL_MODEL: "true"}), True, False, True, "True"),
    ],
)
def test_the_cache_plan_binds_only_a_filled_cache_and_never_starts_on_a_partly_filled_one(
    found, stored, bound, hold, rebind, cached
):
    body = reward_model("sequence-standard-cache")
    plan = plan_cache(body, Observation(stored=stored, cache=found))
    assert (plan.bound, plan.hold, plan.rebind, plan.cached.status) == (bound, hold, rebind, cached)
    assert plan.fields["modelCache"]["kind"] == "LocalModelNamespaceCache" and plan.release is None


def test_a_cache_left_is_released_and_unbound_first_while_still_bound():
    body = reward_model(modelCache={"kind": "LocalModelNamespaceCache", "name": "old-cache", "namespace": "rlhf"})
    left = ("LocalModelNamespaceCache", "old-cache", "rlhf")
    bound_to_it = Observation(stored=stored_isvc({LOCAL_MODEL_LABEL: "old-cache"}), released=left)
    assert (plan_cache(body, bound_to_it).release, plan_cache(body, bound_to_it).unbind) == (left, True)
    unbound = Observation(stored=stored_isvc(), released=left)
    assert (plan_cache(body, unbound).release, plan_cache(body, unbound).unbind) == (left, False)
    assert plan_cache(body, Observation()).fields == {}, "without spec.cache no modelCache is reported"


@pytest.mark.parametrize(
    ("generation", "observed", "created"),
    [(1, None, True), (1, 0, True), (1, 1, False), (2, None, False), (2, 1, False)],
)
def test_nothing_is_pruned_while_the_spec_is_the_one_created_and_no_status_was_written(generation, observed, created):
    body = reward_model(generation=generation, **({} if observed is None else {"observedGeneration": observed}))
    assert as_created(body) is created
    assert decide(body, Observation(), None, None, NOW).prune is not created


def settled(body: dict) -> dict:
    body["status"] = {
        "observedGeneration": body["metadata"]["generation"],
        "conditions": [{"type": conditions.READY, "status": "True", "reason": conditions.INFERENCE_SERVICE_READY}],
    }
    return body


@pytest.mark.parametrize(
    ("changed_child", "is_settled", "child_only"),
    [
        (None, True, False),  # the RewardModel's own trigger: everything
        (stored_isvc(), True, True),  # the InferenceService alone changed, the spec as last reconciled
        (stored_isvc(), False, False),  # the spec moved on meanwhile: everything
    ],
)
def test_only_a_change_of_the_inference_service_with_the_spec_settled_is_a_child_only_reconcile(
    changed_child, is_settled, child_only
):
    body = settled(reward_model()) if is_settled else reward_model()
    decision = decide(body, Observation(), None, changed_child, NOW)
    assert (decision.child_only, decision.prune) == (child_only, not child_only)
    assert (decision.percent, decision.rollout, decision.share_moved) == (0, None, False), "no rollout"


def test_a_rollout_is_decided_with_the_identity_given_and_its_share_move_noticed():
    body = settled(reward_model("sequence-canary-split-allowed-clients"))
    body["spec"]["canary"].update(steps=[10, 50, 100], interval="30s")
    body["spec"]["canary"].pop("percent", None)
    starting = decide(body, Observation(stored=stored_isvc(canary_ready=True)), IDENTITY, None, NOW)
    assert starting.rollout is not None and starting.rollout.status["candidate"] == IDENTITY.candidate
    assert starting.rollout.status["revision"] == IDENTITY.revision
    assert (starting.percent, starting.share_moved) == (10, True), "the first step, from 0"
    body["status"]["canary"] = copy.deepcopy(starting.rollout.status)
    again = decide(body, Observation(stored=stored_isvc(canary_ready=True)), IDENTITY, None, NOW)
    assert (again.percent, again.share_moved) == (10, False), "the same step a moment later"


def test_a_rollout_waits_while_the_cache_holds_the_inference_service_back():
    body = reward_model("sequence-standard-cache")
    body["spec"]["canary"] = apply_defaults(golden_input("sequence-canary-shadow"))["spec"]["canary"]
    decision = decide(body, Observation(cache=cache(0)), IDENTITY, None, NOW)
    assert decision.cache.hold and decision.rollout is None and decision.percent == 0
