"""The machinery every kind's controller shares.

A kind brings only its sync function: read what it needs, render, apply, and
say what Ready is (an :class:`Outcome`). The runner does the rest, the same way
for every kind: one reconcile at a time per object (locks dropped when the
object goes), API errors mapped to a calm retry, the status written only when it
changed, one event per Ready transition, and the metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from ..cluster import ClusterError, events, objects
from ..metrics import OperatorMetrics
from ..policy import conditions

Logger = logging.Logger | logging.LoggerAdapter

# Seconds before kopf retries a reconcile that hit an API error (5xx,
# throttling, conflicts): soon, but without a retry storm.
RETRY_DELAY = 10


@dataclass(frozen=True)
class Outcome:
    """What one sync decided."""

    ready: conditions.Condition
    # The kind's own status fields (url, replicas, ...): stored ones missing here are cleared.
    fields: dict[str, Any] = field(default_factory=dict)
    # For reward_operator_reconcile_total: ready | progressing | invalid | apply_failed.
    result: str = "progressing"


# (the object, defaults applied; its logger) -> Outcome
Sync = Callable[[dict[str, Any], Logger], Outcome]


class Runner:
    def __init__(
        self,
        api_version: str,
        kind: str,
        sync: Sync,
        prepare: Callable[[dict[str, Any]], dict[str, Any]],
        metrics: OperatorMetrics,
    ):
        self.api_version = api_version
        self.kind = kind
        self.sync = sync
        # Fills schema defaults: the API server does it too, but not for objects
        # stored before a default existed.
        self.prepare = prepare
        self.metrics = metrics
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def reconcile(self, namespace: str, name: str, logger: Logger) -> str:
        """Bring one object's children and status in line with its spec; returns the result."""
        kind = self.kind
        with self._lock(namespace, name), self.metrics.duration.labels(kind=kind).time():
            try:
                found = objects.get(self.api_version, kind, name, namespace)
                if found is None or found["metadata"].get("deletionTimestamp"):
                    return "deleted"
                found = self.prepare(found)
                outcome = self.sync(found, logger)
                self._write_status(found, outcome, logger)
            except ClusterError as error:
                self.metrics.errors.labels(kind=kind).inc()
                self.metrics.reconciles.labels(kind=kind, result="error").inc()
                raise kopf.TemporaryError(str(error), delay=RETRY_DELAY) from error
        self.metrics.reconciles.labels(kind=kind, result=outcome.result).inc()
        return outcome.result

    def _write_status(self, obj: dict[str, Any], outcome: Outcome, logger: Logger) -> None:
        metadata = obj["metadata"]
        current = obj.get("status") or {}
        desired = conditions.desired_status(
            current, metadata["generation"], outcome.ready, outcome.fields, conditions.now_rfc3339()
        )
        if desired != current:
            objects.patch_status(
                self.api_version, self.kind, metadata["namespace"], metadata["name"],
                conditions.status_patch(current, desired),
            )  # fmt: skip
        ready = outcome.ready
        if conditions.ready_transition(current, ready):
            logger.info("Ready=%s (%s): %s", ready.status, ready.reason, ready.message)
            events.post_event(obj, conditions.event_type(ready), ready.reason, ready.message)
        self.metrics.objects.record_ready(self.kind, metadata["namespace"], metadata["name"], ready.status)

    def observe(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """A watch event: record how far the status lags the spec."""
        generation = body.get("metadata", {}).get("generation") or 0
        observed = (body.get("status") or {}).get("observedGeneration") or 0
        self.metrics.objects.record_generation_lag(self.kind, namespace, name, generation, observed)

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop its lock and its metric series.

        Under the object's lock, so a reconcile that read it just before the
        deletion finishes (and records) first and cannot outlive this."""
        with self._lock(namespace, name):
            self.metrics.objects.forget(self.kind, namespace, name)
            with self._guard:
                self._locks.pop((namespace, name), None)
