"""Objects-by-Ready-state counts move with each object's transitions."""

from __future__ import annotations

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
