"""The operator's Prometheus metrics (prefix reward_operator_).

Counters and the reconcile histogram are plain prometheus-client metrics.
Per-object state (Ready, generation lag, counts by Ready status, a RewardBatch's figures) is computed at
scrape time from :class:`ObjectStates`, the operator's own record of what it
manages: an object forgotten there has no series left, so no stale series can
keep an alert firing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

READY_STATES = ("True", "False", "Unknown")


@dataclass
class _ObjectState:
    ready: str | None = None  # None until the first reconcile decides it
    generation_lag: int | None = None  # None until the first watch event
    # a RewardBatch's: rows of its finished shards by outcome, shards by state, rows per second
    batch: BatchFigures | None = None


@dataclass(frozen=True)
class BatchFigures:
    rows: dict[str, int]  # total, scored, failed, scored_twice
    shards: dict[str, int]  # succeeded, failed, active
    rows_per_second: float | None


class ObjectStates(Collector):
    """What the operator knows of each object it manages, exported when scraped."""

    def __init__(self, kinds: Iterable[str]):
        self.kinds = tuple(kinds)  # every kind has a count per Ready state, zero included
        self._states: dict[tuple[str, str, str], _ObjectState] = {}
        self._lock = threading.Lock()

    def record_ready(self, kind: str, namespace: str, name: str, ready: str) -> None:
        with self._lock:
            self._states.setdefault((kind, namespace, name), _ObjectState()).ready = ready

    def record_generation_lag(self, kind: str, namespace: str, name: str, generation: int, observed: int) -> None:
        with self._lock:
            self._states.setdefault((kind, namespace, name), _ObjectState()).generation_lag = max(
                0, generation - observed
            )

    def record_batch(self, kind: str, namespace: str, name: str, figures: BatchFigures) -> None:
        with self._lock:
            self._states.setdefault((kind, namespace, name), _ObjectState()).batch = figures

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._states.pop((kind, namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            states = dict(self._states)
        objects = GaugeMetricFamily(
            "reward_operator_objects",
            "Objects the operator manages, by kind and Ready status (True, False, Unknown).",
            labels=["kind", "ready"],
        )
        counts = {(kind, ready): 0 for kind in self.kinds for ready in READY_STATES}
        for (kind, _, _), state in states.items():
            if state.ready is not None:
                counts[(kind, state.ready)] = counts.get((kind, state.ready), 0) + 1
        for (kind, ready), count in sorted(counts.items()):
            objects.add_metric([kind, ready], count)
        ready = GaugeMetricFamily(
            "reward_operator_object_ready",
            "1 while an object's Ready condition (a RewardBatch's Complete) is True, else 0; alerts on objects not "
            "Ready for long.",
            labels=["kind", "namespace", "name"],
        )
        lag = GaugeMetricFamily(
            "reward_operator_object_generation_lag",
            "metadata.generation minus status.observedGeneration, as last seen on the watch: above 0 for long "
            "means spec changes are not being acted on.",
            labels=["kind", "namespace", "name"],
        )
        for key, state in sorted(states.items()):
            if state.ready is not None:
                ready.add_metric(list(key), 1 if state.ready == "True" else 0)
            if state.generation_lag is not None:
                lag.add_metric(list(key), state.generation_lag)
        yield from (objects, ready, lag)
        yield from _batch_families(states)


def _batch_families(states: dict[tuple[str, str, str], _ObjectState]) -> Iterator[Metric]:
    rows = GaugeMetricFamily(
        "reward_operator_batch_rows",
        "A RewardBatch's rows of its finished shards, by outcome (total, scored, failed, scored_twice: scored again "
        "after a lost pod).",
        labels=["namespace", "name", "outcome"],
    )
    shards = GaugeMetricFamily(
        "reward_operator_batch_shards",
        "A RewardBatch's shards by state (succeeded, failed, active).",
        labels=["namespace", "name", "state"],
    )
    rate = GaugeMetricFamily(
        "reward_operator_batch_rows_per_second",
        "A RewardBatch's rows of its finished shards over the time from its Job's start to the last shard's end.",
        labels=["namespace", "name"],
    )
    for (_, namespace, name), state in sorted(states.items()):
        if state.batch is None:
            continue
        for outcome, count in sorted(state.batch.rows.items()):
            rows.add_metric([namespace, name, outcome], count)
        for shard_state, count in sorted(state.batch.shards.items()):
            shards.add_metric([namespace, name, shard_state], count)
        if state.batch.rows_per_second is not None:
            rate.add_metric([namespace, name], state.batch.rows_per_second)
    yield from (rows, shards, rate)


class OperatorMetrics:
    """Every metric the operator exports, registered on one registry."""

    def __init__(self, kinds: Iterable[str], registry: CollectorRegistry = REGISTRY):
        counter = partial(Counter, registry=registry)
        self.reconciles = counter(
            "reward_operator_reconcile_total",
            "Reconciles, by kind, result (ready, progressing, invalid, apply_failed, error) and scope (full: every "
            "child rendered and applied; child: only a changed InferenceService checked; held: all but the "
            "InferenceService, held for its model cache; none: nothing applied).",
            ["kind", "result", "scope"],
        )
        self.errors = counter(
            "reward_operator_reconcile_errors_total",
            "Reconciles that failed on an API error and will be retried.",
            ["kind"],
        )
        self.duration = Histogram(
            "reward_operator_reconcile_duration_seconds",
            "Time one reconcile takes, API calls included.",
            ["kind"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.objects = ObjectStates(kinds)
        registry.register(self.objects)


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    if port:
        start_http_server(port, registry=registry)
