"""One in-memory cluster for the controllers' unit tests, and a clock they move.

:class:`FakeCluster` implements ``reward_operator.cluster.Cluster``: objects kept
by (apiVersion, kind, namespace, name); an apply keeps the stored status (as a
server-side apply of a spec does) and gives back the object as stored; a prune
deletes by labels and controller uid as the API server's would. What the tests
set (``observed``, ``replicas``, ``pods``, ``figures``, ``refused``) stands in
for the parts of a cluster a unit test does not hold. Every call is recorded in
``calls``, so a test counts what one reconcile asked of the API server.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from reward_operator.api.keda import SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND
from reward_operator.cluster import Logger, Refused
from reward_operator.policy.dependencies import Observed, References
from reward_operator.policy.scaling import PredictorReplicas

Key = tuple[str, str, str | None, str]  # apiVersion, kind, namespace (None: cluster-scoped), name
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class FakeClock:
    """The time the controllers read; tests move it instead of waiting."""

    moment: datetime = START

    def now(self) -> datetime:
        return self.moment

    def advance(self, seconds: float) -> None:
        self.moment += timedelta(seconds=seconds)


@dataclass
class FakeCluster:
    clock: FakeClock = field(default_factory=FakeClock)
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # (method, kind or "", name or "") per call, in order
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    # what the spec references, as found: a value, a function of (namespace, References), or None: looked
    # up in `runtimes` and `secrets` (None: every runtime, every Secret key named exists)
    observed: Observed | Callable[[str, References], Observed] | None = None
    runtimes: set[str] | None = None
    secrets: dict[str, set[str]] | None = None
    keda: bool = True  # KEDA's ScaledObject served
    # the predictor's replicas per InferenceService name; missing names get `default_replicas`
    replicas: dict[str, PredictorReplicas | None] = field(default_factory=dict)
    default_replicas: PredictorReplicas | None = field(default_factory=lambda: PredictorReplicas(ready=1, wanted=1))
    pods: list[dict[str, Any]] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)  # every gateway's GET /canary
    refused: dict[str, str] = field(default_factory=dict)  # kind -> the API server's message on apply
    # the shared cache: ensure_cache returns this (None: the manifest as applied) and this conflict
    cache: dict[str, Any] | None = None
    cache_conflict: str | None = None
    cache_opt_outs: list[bool] = field(default_factory=list)  # True: opted out, False: opted back in
    swept: list[tuple[str, str, str | None]] = field(default_factory=list)
    kept: dict[str, set[str]] = field(default_factory=dict)  # kind -> the names the last prune kept
    status_patches: list[dict[str, Any]] = field(default_factory=list)
    _uids: Any = field(default_factory=lambda: itertools.count(1))

    # ---- what the tests read ----
    @property
    def applied(self) -> list[str]:
        """The kinds applied, in order."""
        return [kind for method, kind, _ in self.calls if method == "apply"]

    @property
    def pruned(self) -> list[str]:
        """The kinds listed for pruning, in order."""
        return [kind for method, kind, _ in self.calls if method == "prune"]

    @property
    def applied_names(self) -> list[tuple[str, str]]:
        """(kind, name) of each apply, in order."""
        return [(kind, name) for method, kind, name in self.calls if method == "apply"]

    @property
    def event_reasons(self) -> list[tuple[str, str]]:
        """(type, reason) of each event posted."""
        return [(event_type, reason) for event_type, reason, _ in self.events]

    def count(self, method: str) -> int:
        return sum(1 for called, _, _ in self.calls if called == method)

    def stored(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return next(
            (
                obj
                for (_, k, ns, n), obj in self.objects.items()
                if k == kind and n == name and (namespace is None or ns == namespace)
            ),
            None,
        )

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as another writer (KServe, a person) left it."""
        stored = copy.deepcopy(obj)
        metadata = stored.setdefault("metadata", {})
        metadata.setdefault("uid", f"uid-{next(self._uids)}")
        metadata.setdefault("resourceVersion", "1")
        self.objects[_key(stored)] = stored
        return copy.deepcopy(stored)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Another writer (a person, the garbage collector) deleted it."""
        for key in [k for k in self.objects if k[1:] == (kind, namespace, name)]:
            del self.objects[key]

    # ---- reads ----
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self.calls.append(("get", kind, name))
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def lookup(self, namespace: str, wanted: References) -> Observed:
        self.calls.append(("lookup", "", wanted.runtime))
        if callable(self.observed):
            return self.observed(namespace, wanted)
        if self.observed is not None:
            return copy.deepcopy(self.observed)

        def runtime_found(runtime: str | None) -> bool:
            return runtime is None or self.runtimes is None or runtime in self.runtimes

        named = {ref.secret: set() for ref in wanted.secrets}
        for ref in wanted.secrets:
            named[ref.secret].add(ref.key)
        return Observed(
            runtime_found=runtime_found(wanted.runtime),
            candidate_runtime_found=runtime_found(wanted.candidate_runtime),
            secret_keys={
                name: keys if self.secrets is None else self.secrets.get(name) for name, keys in named.items()
            },
            keda_served=self.keda,
            node_groups={group: [] for group in wanted.node_groups},
        )

    def serves(self, api_version: str, kind: str) -> bool:
        return self.keda if (api_version, kind) == (SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND) else True

    def predictor_replicas(self, namespace: str, isvc: str) -> PredictorReplicas | None:
        self.calls.append(("predictor_replicas", "", isvc))
        return self.replicas.get(isvc, self.default_replicas)

    def inference_service_pods(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        self.calls.append(("inference_service_pods", "", isvc))
        return copy.deepcopy(self.pods)

    def rollout_figures(self, namespace: str, isvc: str) -> list[dict[str, Any]]:
        self.calls.append(("rollout_figures", "", isvc))
        return copy.deepcopy(self.figures)

    def nudge_gateways(self, namespace: str, isvc: str, annotations: dict[str, str]) -> list[str]:
        self.calls.append(("nudge_gateways", json.dumps(annotations, sort_keys=True), isvc))
        return []

    def reward_models(self, namespace: str, names: list[str]) -> dict[str, dict[str, Any] | None]:
        found = {}
        for name in names:
            self.calls.append(("get", "RewardModel", name))
            obj = next(
                (o for (_, k, ns, n), o in self.objects.items() if (k, ns, n) == ("RewardModel", namespace, name)),
                None,
            )
            found[name] = copy.deepcopy(obj)
        return found

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        self.calls.append(("pods", "", ",".join(f"{k}={v}" for k, v in sorted(labels.items()))))
        return [
            copy.deepcopy(pod)
            for pod in self.pods
            if all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    # ---- writes ----
    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", manifest["kind"], manifest["metadata"]["name"]))
        if manifest["kind"] in self.refused:
            raise Refused(422, "Invalid", self.refused[manifest["kind"]])
        key = _key(manifest)
        if key not in self.objects:
            self.put(manifest)
        return copy.deepcopy(self.objects[key])

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("apply", manifest["kind"], manifest["metadata"]["name"]))
        if manifest["kind"] in self.refused:
            raise Refused(422, "Invalid", self.refused[manifest["kind"]])
        key = _key(manifest)
        before = self.objects.get(key)
        stored = copy.deepcopy(manifest)
        metadata = stored["metadata"]
        if before is None:
            metadata["uid"] = f"uid-{next(self._uids)}"
            metadata["resourceVersion"] = "1"
        else:
            # fields another writer set stay (KServe's status, its annotations)
            metadata["uid"] = before["metadata"]["uid"]
            metadata["resourceVersion"] = str(int(before["metadata"].get("resourceVersion", "1")) + 1)
            metadata["annotations"] = {
                **(before["metadata"].get("annotations") or {}),
                **(metadata.get("annotations") or {}),
            }
            if "status" in before:
                stored["status"] = before["status"]
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def prune(
        self, api_version: str, kind: str, namespace: str, labels: dict[str, str], owner_uid: str, keep: set[str]
    ) -> list[str]:
        self.calls.append(("prune", kind, ""))
        self.kept[kind] = set(keep)
        deleted = []
        for key, obj in list(self.objects.items()):
            metadata = obj["metadata"]
            if key[:3] != (api_version, kind, namespace) or metadata["name"] in keep:
                continue
            if any((metadata.get("labels") or {}).get(k) != v for k, v in labels.items()):
                continue
            references = metadata.get("ownerReferences") or []
            if any(ref.get("controller") and ref.get("uid") == owner_uid for ref in references):
                del self.objects[key]
                deleted.append(metadata["name"])
        return deleted

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("patch_status", kind, name))
        self.status_patches.append(copy.deepcopy(status))
        obj = self.objects.setdefault(
            (api_version, kind, namespace, name),
            {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}},
        )
        obj["status"] = _merge(obj.get("status") or {}, status)
        return copy.deepcopy(obj)

    def post_event(self, owner: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.calls.append(("post_event", reason, owner["metadata"]["name"]))
        self.events.append((event_type, reason, message))

    # ---- the shared model cache ----
    def ensure_cache(self, manifest: dict[str, Any], reward_model: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        self.calls.append(("ensure_cache", manifest["kind"], manifest["metadata"]["name"]))
        if manifest["kind"] in self.refused:
            raise Refused(422, "Invalid", self.refused[manifest["kind"]])
        return copy.deepcopy(self.cache if self.cache is not None else manifest), self.cache_conflict

    def sweep_cache(self, kind: str, name: str, namespace: str | None, logger: Logger) -> str:
        self.calls.append(("sweep_cache", kind, name))
        self.swept.append((kind, name, namespace))
        return "kept"

    def opt_out_of_cache(self, isvc: str, namespace: str) -> None:
        self.calls.append(("opt_out_of_cache", "", isvc))
        self.cache_opt_outs.append(True)

    def opt_into_cache(self, isvc: str, namespace: str) -> None:
        self.calls.append(("opt_into_cache", "", isvc))
        self.cache_opt_outs.append(False)

    # ---- the clock ----
    def now(self) -> datetime:
        return self.clock.now()


def _key(obj: dict[str, Any]) -> Key:
    metadata = obj["metadata"]
    return obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"]


def _merge(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386), as the API server applies a status patch."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
