"""Status policy: Ready mirrors KServe, lastTransitionTime moves only on a flip."""

from __future__ import annotations

from reward_operator import status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def isvc(conditions=None, url=None) -> dict:
    body = {"metadata": {"name": "rm"}, "status": {}}
    if conditions is not None:
        body["status"]["conditions"] = conditions
    if url:
        body["status"]["url"] = url
    return body


def test_ready_true_when_kserve_says_ready():
    ready = status.ready_from_inference_service(isvc([{"type": "Ready", "status": "True"}]))
    assert (ready.status, ready.reason) == ("True", status.INFERENCE_SERVICE_READY)


def test_not_ready_keeps_kserves_reason_and_message():
    ready = status.ready_from_inference_service(
        isvc([{"type": "Ready", "status": "False", "reason": "ContainerCrashLoop", "message": "oom"}])
    )
    assert (ready.status, ready.reason, ready.message) == ("False", "ContainerCrashLoop", "oom")


def test_unknown_until_kserve_reports():
    ready = status.ready_from_inference_service(isvc())
    assert (ready.status, ready.reason) == ("Unknown", status.AWAITING_KSERVE)


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
    ready = status.Condition("Ready", "True", status.INFERENCE_SERVICE_READY, "ok")
    desired = status.desired_status({}, 3, ready, isvc([], url="http://rm.rlhf.example"), 2, T0)
    assert desired["observedGeneration"] == 3
    assert desired["url"] == "http://rm.rlhf.example"
    assert desired["replicas"] == 2
    assert desired["inferenceService"] == "rm"
    assert desired["conditions"][0]["observedGeneration"] == 3


def test_unchanged_inputs_give_an_identical_status():
    ready = status.Condition("Ready", "True", status.INFERENCE_SERVICE_READY, "ok")
    first = status.desired_status({}, 1, ready, isvc([], url="http://x"), None, T0)
    again = status.desired_status(first, 1, ready, isvc([], url="http://x"), None, T1)
    assert again == first, "no status write (and no event) when nothing changed"


def test_events_only_on_transitions():
    ready = status.Condition("Ready", "False", status.INVALID_SPEC, "missing runtime")
    assert status.ready_transition({}, ready)
    current = {"conditions": status.merge_condition([], ready, 1, T0)}
    assert not status.ready_transition(current, ready)
    assert status.ready_transition(current, status.Condition("Ready", "True", "R", "ok"))
