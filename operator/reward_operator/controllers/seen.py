"""What the operator last saw of its children, so a watch event that changes none of it costs nothing.

KServe writes each InferenceService several times that no reconcile of ours can act
on: its finalizer at creation, and status rewrites whose only news is a timestamp.
At a thousand objects those were about half of all reconciles (make bench-operator).
A predictor's Deployment is rewritten far more often than its replicas move.
"""

from __future__ import annotations

import threading
from typing import Any

from ..policy.children import read_digest


class SeenChildren:
    """Per child (namespace, name): the digest of what a reconcile read of it, as of the last one that
    did (:func:`read_digest`). Kept for every child while it exists: a key and 32 characters each."""

    def __init__(self) -> None:
        self._digests: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(child: dict[str, Any]) -> tuple[str, str]:
        metadata = child["metadata"]
        return metadata.get("namespace") or "", metadata["name"]

    def unchanged(self, child: dict[str, Any]) -> bool:
        """True when the last reconcile that read this child saw everything a reconcile reads as it is now."""
        digest = read_digest(child)
        with self._lock:
            return self._digests.get(self._key(child)) == digest

    def record(self, child: dict[str, Any]) -> None:
        """A reconcile decided from ``child`` as given (an apply's answer, or the watch's copy)."""
        digest = read_digest(child)
        with self._lock:
            self._digests[self._key(child)] = digest

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._digests.pop((namespace, name), None)


class SeenReplicas:
    """Per predictor Deployment (uid): its replicas wanted and ready, as last seen.

    KEDA, KServe's HPA and Knative scale the predictor without a word to the RewardModel or its
    InferenceService, so status.replicas and ScaledToZero follow the Deployments' watch. A change needs
    the count before the event: not a kopf index, which kopf fills before any handler of the same event
    runs, so that a handler reading it sees only the new count. Touched on the event loop only."""

    def __init__(self) -> None:
        self._replicas: dict[str, tuple[int | None, int]] = {}

    def changed(self, deployment: dict[str, Any], deleted: bool = False) -> bool:
        """Whether this event moved the replicas wanted or ready (or removed a Deployment seen before). A
        Deployment first seen (the watch's initial listing, a new revision) is only recorded: the reconcile
        that made it reads it."""
        uid = deployment["metadata"]["uid"]
        if deleted:
            return self._replicas.pop(uid, None) is not None
        now = (deployment.get("spec", {}).get("replicas"), deployment.get("status", {}).get("readyReplicas") or 0)
        previous = self._replicas.get(uid)
        self._replicas[uid] = now
        return previous is not None and previous != now
