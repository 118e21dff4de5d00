"""The operator's Prometheus metrics (prefix reward_operator_)."""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter(
    "reward_operator_reconcile_total",
    "Reconciles, by kind and result (ready, progressing, invalid, apply_failed, error).",
    ["kind", "result"],
)
ERRORS = Counter(
    "reward_operator_reconcile_errors_total",
    "Reconciles that failed on an API error and will be retried.",
    ["kind"],
)
DURATION = Histogram(
    "reward_operator_reconcile_duration_seconds",
    "Time one reconcile takes, API calls included.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
OBJECTS = Gauge(
    "reward_operator_objects",
    "Objects the operator manages, by kind and Ready status (True, False, Unknown).",
    ["kind", "ready"],
)

_ready_by_object: dict[tuple[str, str, str], str] = {}
_lock = threading.Lock()


def record_ready(kind: str, namespace: str, name: str, ready: str | None) -> None:
    """Remember an object's Ready status (None: the object is gone) and refresh the gauge."""
    with _lock:
        if ready is None:
            _ready_by_object.pop((kind, namespace, name), None)
        else:
            _ready_by_object[(kind, namespace, name)] = ready
        counts = {"True": 0, "False": 0, "Unknown": 0}
        for (object_kind, _, _), state in _ready_by_object.items():
            if object_kind == kind:
                counts[state] = counts.get(state, 0) + 1
        for state, count in counts.items():
            OBJECTS.labels(kind=kind, ready=state).set(count)


def serve(port: int) -> None:
    if port:
        start_http_server(port)
