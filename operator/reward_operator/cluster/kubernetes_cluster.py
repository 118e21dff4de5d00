"""The cluster the operator runs against: :class:`.protocol.Cluster` over the API modules of this package."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..policy.dependencies import Observed, References
from ..policy.scaling import PredictorReplicas
from . import caches, events, gateways, gather, objects
from .protocol import Logger

# A runtime found is taken as present for this long without another read: every reconcile checks
# one, and runtimes are installed once and rarely removed (a removal is noticed this much later).
# A runtime not found is read again each time, so one made later is noticed at the next reconcile.
RUNTIME_SEEN_SECONDS = 300.0
# Whether a kind is served (KEDA's ScaledObject: KEDA installed), for this long without another discovery
# read: checked for every RewardModel KEDA scales and before pruning; an install or removal is noticed
# this much later.
SERVED_SEEN_SECONDS = 60.0


class KubernetesCluster:
    """Each method is one of this package's functions. The few facts that change rarely (a runtime
    found, a kind served) are remembered for a while by this object: the operator makes one and
    passes it to every controller."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._runtimes_seen: dict[tuple[str, str], float] = {}  # (namespace, runtime) -> when it expires
        self._served_seen: dict[tuple[str, str], tuple[bool, float]] = {}  # kind -> (served, when it expires)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return objects.get(api_version, kind, name, namespace)

    def lookup(self, namespace: str, wanted: References) -> Observed:
        return gather.lookup(namespace, wanted, self.runtime_exists, self.serves)

    def runtime_exists(self, namespace: str, runtime: str) -> bool:
        """:func:`.gather.runtime_exists`, a runtime found taken as present for RUNTIME_SEEN_SECONDS."""
        key, now = (namespace, runtime), self._monotonic()
        with self._lock:
            if self._runtimes_seen.get(key, 0.0) > now:
                return True
        found = gather.runtime_exists(namespace, runtime)
        if found:
            with self._lock:
                self._runtimes_seen[key] = now + RUNTIME_SEEN_SECONDS
        return found

    def serves(self, api_version: str, kind: str) -> bool:
        key, now = (api_version, kind), self._monotonic()
        with self._lock:
            seen = self._served_seen.get(key)
        if seen is not None and seen[1] > now:
            return seen[0]
        found = objects.served(api_version, kind)
        with self._lock:
            self._served_seen[key] = (found, now + SERVED_SEEN_SECONDS)
        return found

    def predictor_replicas(self, namespace: str, isvc: str) -> PredictorReplicas | None:
        return gather.predictor_replicas(namespace, isvc)

    def inference_service_pods(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        return gather.inference_service_pods(namespace, isvc)

    def rollout_figures(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        return gateways.rollout_figures(namespace, isvc)

    def nudge_gateways(self, namespace: str, isvc: str, annotations: dict[str, str]) -> list[str]:
        return gateways.nudge(namespace, isvc, annotations)

    def reward_models(self, namespace: str, names: list[str]) -> dict[str, dict[str, Any] | None]:
        return gather.reward_models(namespace, names)

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        return gather.pods(namespace, labels)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return objects.apply(manifest)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return objects.create(manifest)

    def prune(
        self, api_version: str, kind: str, namespace: str, labels: dict[str, str], owner_uid: str, keep: set[str]
    ) -> list[str]:
        return objects.prune(api_version, kind, namespace, labels, owner_uid, keep)

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        return objects.patch_status(api_version, kind, namespace, name, status)

    def post_event(self, owner: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        events.post_event(owner, event_type, reason, message)

    def ensure_cache(self, manifest: dict[str, Any], reward_model: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        return caches.ensure(manifest, reward_model)

    def sweep_cache(self, kind: str, name: str, namespace: str | None, logger: Logger) -> str:
        return caches.sweep_quietly(kind, name, namespace, logger)

    def opt_out_of_cache(self, isvc: str, namespace: str) -> None:
        caches.set_cache_opt_out(isvc, namespace, True)

    def opt_into_cache(self, isvc: str, namespace: str) -> None:
        caches.set_cache_opt_out(isvc, namespace, False)

    def now(self) -> datetime:
        return datetime.now(UTC)
