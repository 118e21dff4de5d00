"""Status policy: Ready mirrors KServe, lastTransitionTime moves only on a flip,
a status is rewritten only when it changed, an event only on a transition."""

from __future__ import annotations

import pytest

from reward_operator.api import conditions as api_conditions
from reward_operator.policy import status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_transition_time_moves_only_when_status_flips():
    first = status.merge_condition([], status.Condition("Ready", "False", "A", "a"), 1, T0)
    same_status = status.merge_condition(first, status.Condition("Ready", "False", "B", "b"), 2, T1)
    assert same_status[0]["lastTransitionTime"] == T0
    assert same_status[0]["reason"] == "B" and same_status[0]["observedGeneration"] == 2
    flipped = status.merge_condition(same_status, status.Condition("Ready", "True", "C", "c"), 2, T1)
    assert flipped[0]["lastTransitionTime"] == T1


def test_other_conditions_are_kept():
    existing = [{"type": "ModelCached", "status": "True", "lastTransitionTime": T0}]
    merged = status.merge_condition(existing, status.Condition("Ready", "True", "R", "m"), 1, T1)
    assert [c["type"] for c in merged] == ["ModelCached", "Ready"]


def test_desired_status_carries_url_generation_and_replicas():
    ready = status.Condition("Ready", "True", api_conditions.INFERENCE_SERVICE_READY, "ok")
    fields = {"inferenceService": "rm", "url": "http://rm-transformer.rlhf.svc.cluster.local", "replicas": 2}
    desired = status.desired_status({}, 3, ready, fields, T0)
    assert desired["observedGeneration"] == 3
    assert desired["url"] == "http://rm-transformer.rlhf.svc.cluster.local"
    assert desired["replicas"] == 2
    assert desired["inferenceService"] == "rm"
    assert desired["conditions"][0]["observedGeneration"] == 3


def test_unchanged_inputs_give_an_identical_status():
    ready = status.Condition("Ready", "True", api_conditions.INFERENCE_SERVICE_READY, "ok")
    fields = {"inferenceService": "rm", "url": "http://x"}
    first = status.desired_status({}, 1, ready, fields, T0)
    again = status.desired_status(first, 1, ready, dict(fields), T1)
    assert again == first, "no status write (and no event) when nothing changed"


def test_events_only_on_transitions():
    ready = status.Condition("Ready", "False", api_conditions.INVALID_SPEC, "missing runtime")
    assert status.ready_transition({}, ready)
    current = {"conditions": status.merge_condition([], ready, 1, T0)}
    assert not status.ready_transition(current, ready)
    assert status.ready_transition(current, status.Condition("Ready", "True", "R", "ok"))


def test_a_cleared_field_is_sent_as_null():
    current = {"url": "http://old", "observedGeneration": 1, "conditions": []}
    desired = {"observedGeneration": 2, "conditions": []}
    assert status.status_patch(current, desired) == {"url": None, "observedGeneration": 2, "conditions": []}


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        (status.Condition("Ready", "True", api_conditions.INFERENCE_SERVICE_READY, ""), "Normal"),
        (status.Condition("Ready", "Unknown", api_conditions.AWAITING_KSERVE, ""), "Normal"),
        (status.Condition("Ready", "False", api_conditions.AWAITING_KSERVE, ""), "Normal"),
        (status.Condition("Ready", "False", api_conditions.INVALID_SPEC, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.APPLY_FAILED, ""), "Warning"),
        (status.Condition("Ready", "False", "NoSupportingRuntime", ""), "Warning"),
        (status.Condition("Ready", "Unknown", "PredictorReadyUnknown", ""), "Normal"),
        (status.Condition("Ready", "False", api_conditions.GATEWAY_NOT_READY, ""), "Normal"),
        # progress while KServe starts the InferenceService: a component's reason, KServe's own
        (status.Condition("Ready", "False", "Predictor ingress not created", ""), "Normal"),
        (status.Condition("Ready", "False", "MinimumReplicasUnavailable", ""), "Normal"),
        (status.Condition("Ready", "False", "PredictorReadyFalse", ""), "Normal"),
        (status.Condition("Ready", "False", api_conditions.INFERENCE_SERVICE_NOT_READY, ""), "Normal"),
        (status.Condition("Ready", "Unknown", api_conditions.AWAITING_MODEL_CACHE, ""), "Normal"),
        (status.Condition("Ready", "False", api_conditions.REWARD_MODEL_NOT_READY, ""), "Normal"),
        # what needs a person
        (status.Condition("Ready", "False", "ModelLoadFailed", ""), "Warning"),
        (status.Condition("Ready", "False", "RevisionFailed", ""), "Warning"),  # Knative's, by its suffix
        (status.Condition("Ready", "False", api_conditions.CRASH_LOOP_BACK_OFF, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.OOM_KILLED, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.IMAGE_PULL_BACK_OFF, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.MODEL_CACHE_FAILED, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.CACHE_DOWNLOAD_FAILED, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.REWARD_MODEL_NOT_FOUND, ""), "Warning"),
        (status.Condition("Ready", "False", api_conditions.ROLLED_BACK, ""), "Warning"),
    ],
)
def test_event_type_per_reason(ready, expected):
    assert status.event_type(ready) == expected


def _body(generation: int, observed: int | None, reason: str | None) -> dict:
    status = {} if observed is None else {"observedGeneration": observed}
    if reason is not None:
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": reason}]
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("generation", "observed", "reason", "settled"),
    [
        (1, None, None, False),  # never reconciled
        (2, 1, api_conditions.AWAITING_KSERVE, False),  # a spec change not reconciled yet
        (2, 2, api_conditions.INVALID_SPEC, False),  # waiting on a Secret or runtime
        (2, 2, api_conditions.APPLY_FAILED, False),  # a child refused
        (2, 2, api_conditions.AWAITING_KSERVE, True),  # KServe's turn: its events wake us
        (2, 2, api_conditions.INFERENCE_SERVICE_READY, True),
    ],
)
def test_settled_objects_need_no_recheck(generation, observed, reason, settled):
    assert status.settled(_body(generation, observed, reason)) is settled
