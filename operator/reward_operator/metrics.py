"""The operator's Prometheus metrics (prefix reward_operator_)."""

from __future__ import annotations

import contextlib
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

OBJECT_READY = Gauge(
    "reward_operator_object_ready",
    "1 while an object's Ready condition is True, else 0; alerts on objects not Ready for long.",
    ["kind", "namespace", "name"],
)
GENERATION_LAG = Gauge(
    "reward_operator_object_generation_lag",
    "metadata.generation minus status.observedGeneration, as last seen on the watch: above 0 for long "
    "means spec changes are not being acted on.",
    ["kind", "namespace", "name"],
)

READY_STATES = ("True", "False", "Unknown")
# Each object's last Ready status, so a change moves one count from one state to another.
_ready_by_object: dict[tuple[str, str, str], str] = {}
_lock = threading.Lock()


def record_ready(kind: str, namespace: str, name: str, ready: str | None) -> None:
    """Remember an object's Ready status (None: the object is gone) and refresh the gauge."""
    key = (kind, namespace, name)
    with _lock:
        for state in READY_STATES:  # every state has a series, zero included
            OBJECTS.labels(kind=kind, ready=state)
        previous = _ready_by_object.pop(key, None)
        if previous is not None:
            OBJECTS.labels(kind=kind, ready=previous).dec()
        if ready is None:
            for gauge in (OBJECT_READY, GENERATION_LAG):
                with contextlib.suppress(KeyError):
                    gauge.remove(kind, namespace, name)
            return
        _ready_by_object[key] = ready
        OBJECTS.labels(kind=kind, ready=ready).inc()
        OBJECT_READY.labels(kind=kind, namespace=namespace, name=name).set(1 if ready == "True" else 0)


def record_generation_lag(kind: str, namespace: str, name: str, body: dict) -> None:
    generation = body.get("metadata", {}).get("generation") or 0
    observed = (body.get("status") or {}).get("observedGeneration") or 0
    GENERATION_LAG.labels(kind=kind, namespace=namespace, name=name).set(max(0, generation - observed))


def serve(port: int) -> None:
    if port:
        start_http_server(port)
