"""What the controllers ask of a cluster, as one interface they are given.

The controllers never call the API modules of this package directly: they take a
:class:`Cluster`, so the real one (:class:`.kubernetes.KubernetesCluster`) and the
unit tests' fake (``reward_testing.fake_cluster.FakeCluster``) are interchangeable,
as KubeRay passes its reconcilers a client provider. The clock is part of it: a
rollout's steps are timed, and tests move time instead of waiting for it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Protocol

from ..policy.dependencies import Observed, References
from ..policy.scaling import PredictorReplicas

Logger = logging.Logger | logging.LoggerAdapter


class Cluster(Protocol):
    # ---- reads ----
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """An object (cluster-scoped when ``namespace`` is None), or None."""

    def lookup(self, namespace: str, wanted: References) -> Observed:
        """What a spec references (runtimes, Secret keys, node groups, ServiceAccount), looked up."""

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the cluster serves this kind (KEDA's ScaledObject: KEDA is installed)."""

    def predictor_replicas(self, namespace: str, isvc: str) -> PredictorReplicas | None:
        """Ready and wanted pods of the predictor KServe made for ``isvc``, or None before it made one."""

    def inference_service_pods(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        """The pods KServe made for ``isvc``, as plain dicts."""

    def rollout_figures(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        """Each Ready reward gateway replica's GET /canary answer."""

    def nudge_gateways(self, namespace: str, isvc: str, annotations: dict[str, str]) -> list[str]:
        """``annotations`` (a moved share, generation) set on each gateway pod of ``isvc``, so that the
        kubelet projects the ConfigMaps into it now; the pods nudged (best effort, never raises)."""

    def reward_models(self, namespace: str, names: list[str]) -> dict[str, dict[str, Any] | None]:
        """The RewardModels of these names, as stored (None: not found)."""

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The pods with all of ``labels``, as plain dicts (a batch's Job's pods)."""

    # ---- writes ----
    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object unless one of its name exists; returns it as stored (the one found, untouched,
        where it exists: a Job is made once, and Kueue owns its suspension from then on).
        Raises ``Refused`` when the API server or a webhook refuses it."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with the operator's field manager; returns the object as stored.
        Raises ``Refused`` when the API server or a webhook refuses it."""

    def prune(
        self, api_version: str, kind: str, namespace: str, labels: dict[str, str], owner_uid: str, keep: set[str]
    ) -> list[str]:
        """Delete the objects of ``kind`` with ``labels`` controlled by ``owner_uid`` not named in ``keep``."""

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch an object's status; returns the object as stored."""

    def post_event(self, owner: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """One core/v1 Event about ``owner``."""

    # ---- the shared model cache (KServe's LocalModelCache, used by several RewardModels) ----
    def ensure_cache(self, manifest: dict[str, Any], reward_model: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The cache made or brought to ``manifest``, ``reward_model`` recorded as a user: (as stored,
        a conflict message or None)."""

    def sweep_cache(self, kind: str, name: str, namespace: str | None, logger: Logger) -> str:
        """Drop the cache's users that are gone, and the cache with the last; never raises."""

    def opt_out_of_cache(self, isvc: str, namespace: str) -> None:
        """KServe's opt-out annotation set on the InferenceService: unbound at that admission."""

    def opt_into_cache(self, isvc: str, namespace: str) -> None:
        """The opt-out annotation cleared: bound at that admission."""

    # ---- the clock ----
    def now(self) -> datetime:
        """The time, timezone-aware (UTC)."""
