"""The cluster the operator runs against: :class:`.protocol.Cluster` over the API modules of this package."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..policy.dependencies import Observed, References
from ..policy.scaling import PredictorReplicas
from . import caches, events, gateways, gather, objects
from .protocol import Logger


class KubernetesCluster:
    """Stateless: each method is one of this package's functions (whose caches are module-wide)."""

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return objects.get(api_version, kind, name, namespace)

    def observe(self, namespace: str, wanted: References) -> Observed:
        return gather.observe(namespace, wanted)

    def keda_served(self) -> bool:
        return gather.keda_served()

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

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return objects.apply(manifest)

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
