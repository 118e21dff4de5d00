"""Objects-by-Ready-state counts move with each object's transitions."""

from __future__ import annotations

from prometheus_client import REGISTRY

from reward_operator import metrics


def count(kind: str, state: str) -> float:
    return metrics.OBJECTS.labels(kind=kind, ready=state)._value.get()


def test_counts_follow_transitions_and_deletions():
    kind = "CountTest"
    metrics.record_ready(kind, "ns", "a", "Unknown")
    metrics.record_ready(kind, "ns", "b", "True")
    assert (count(kind, "True"), count(kind, "False"), count(kind, "Unknown")) == (1, 0, 1)

    metrics.record_ready(kind, "ns", "a", "True")  # Unknown -> True
    metrics.record_ready(kind, "ns", "a", "True")  # no change, counted once
    assert (count(kind, "True"), count(kind, "Unknown")) == (2, 0)

    metrics.record_ready(kind, "ns", "b", None)  # deleted
    metrics.record_ready(kind, "ns", "b", None)  # a second DELETED event changes nothing
    assert (count(kind, "True"), count(kind, "False"), count(kind, "Unknown")) == (1, 0, 0)
    assert metrics.OBJECT_READY.labels(kind=kind, namespace="ns", name="a")._value.get() == 1


def series(metric: str, labels: dict[str, str]) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_generation_lag_follows_the_object_and_leaves_with_it():
    kind = "LagTest"
    labels = {"kind": kind, "namespace": "ns", "name": "a"}
    metrics.record_generation_lag(kind, "ns", "a", {"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
    assert series("reward_operator_object_generation_lag", labels) == 1
    metrics.record_generation_lag(kind, "ns", "a", {"metadata": {"generation": 3}, "status": {"observedGeneration": 3}})
    assert series("reward_operator_object_generation_lag", labels) == 0
    metrics.record_ready(kind, "ns", "a", "False")
    metrics.record_ready(kind, "ns", "a", None)  # deleted: no series left to keep an alert firing
    assert series("reward_operator_object_generation_lag", labels) is None
    assert series("reward_operator_object_ready", labels) is None
