"""A RewardModel reconcile's decision: pure policy on what the observe stage read (controllers/rewardmodel.py).

The controller reads the cluster once into an :class:`Observation`; :func:`decide` turns it into a
:class:`Decision` (the cache's plan, the rollout's next state and the share rendered, which children are
applied and whether anything is pruned) without a call to the cluster. The rollout's own phases are
:mod:`.canary`'s; the cache's rules :mod:`.cache`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..api import kserve
from ..api.cache import cache_identity
from ..api.canary import CanaryIdentity
from ..api.duration import interval_seconds
from ..api.naming import candidate_isvc_name
from . import cache as cache_policy
from . import canary as canary_policy
from .status import Condition, settled


@dataclass(frozen=True)
class Observation:
    """What the cluster holds that this reconcile decides from, read once."""

    stored: dict[str, Any] | None = None  # the InferenceService, where a decision reads it
    candidate: dict[str, Any] | None = None  # Knative mode's candidate InferenceService
    cache: dict[str, Any] | None = None  # the shared cache, made or brought to the spec
    cache_conflict: str | None = None
    figures: list[dict[str, Any]] | None = None  # the gateways' GET /canary, while the candidate is Ready
    released: tuple[str, str, str | None] | None = None  # a cache this RewardModel no longer uses


@dataclass(frozen=True)
class CachePlan:
    """What the shared model cache asks of this reconcile."""

    cached: Condition | None = None  # ModelCached, with spec.cache
    bound: bool = True  # the InferenceService reads from the cache (rendered with it)
    hold: bool = False  # the InferenceService is not created before the cache is filled
    release: tuple[str, str, str | None] | None = None  # a cache this RewardModel left: swept
    unbind: bool = False  # KServe's opt-out set first: the left cache is still bound
    rebind: bool = False  # an opt-out of an earlier release cleared: bound at that admission
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    percent: int  # the candidate's share the gateways run from now (0 without a rollout)
    cache: CachePlan
    rollout: canary_policy.Rollout | None  # None without spec.canary, or while the cache holds it back
    child_only: bool  # only the InferenceService changed and the spec is as last reconciled
    share_moved: bool = False  # the rollout's ConfigMap tells the gateways a new share
    prune: bool = True  # what it owns and no longer renders is deleted after the apply


def candidate_ready(
    reward_model: dict[str, Any], stored: dict[str, Any] | None, candidate: dict[str, Any] | None
) -> bool | None:
    """KServe's word on the candidate: Knative mode's own InferenceService, or Standard mode's canary entry."""
    if reward_model["spec"]["serving"]["mode"] == "Knative":
        return canary_policy.candidate_isvc_ready(candidate)
    return canary_policy.candidate_ready(stored)


def running_share(reward_model: dict[str, Any], identity: CanaryIdentity | None) -> int:
    """The share the gateways run now: the rollout's status, if it is this rollout's (``identity``)."""
    previous = (reward_model.get("status") or {}).get("canary") or {}
    if identity is None or previous.get("revision") != identity.revision:
        return 0
    return int(previous.get("percent") or 0)


def plan_cache(reward_model: dict[str, Any], seen: Observation) -> CachePlan:
    """ModelCached, and whether the InferenceService reads from the cache yet (see policy.cache)."""
    release = seen.released
    unbind = release is not None and cache_policy.bound_to(seen.stored) == release[1]
    if "cache" not in reward_model["spec"]:
        return CachePlan(release=release, unbind=unbind)
    cached = cache_policy.model_cached(seen.cache, seen.cache_conflict)
    bound = cache_policy.bound(cached, seen.stored, seen.cache["metadata"]["name"])  # type: ignore[index]
    return CachePlan(
        cached=cached,
        bound=bound,
        hold=not bound and seen.stored is None,  # never started on a partly filled cache
        release=release,
        unbind=unbind,
        rebind=bound and cache_policy.opted_out(seen.stored),
        fields={"modelCache": cache_policy.identity_status(cache_identity(reward_model))},  # type: ignore[arg-type]
    )


def as_created(reward_model: dict[str, Any]) -> bool:
    """The spec is the one it was created with and no reconcile has written the status yet: nothing
    of it can be pruned (a reconcile that failed before writing applied what this one renders)."""
    observed = (reward_model.get("status") or {}).get("observedGeneration")
    return reward_model["metadata"].get("generation") == 1 and not observed


def decide(
    reward_model: dict[str, Any],
    seen: Observation,
    identity: CanaryIdentity | None,
    changed_child: dict[str, Any] | None,
    now: datetime,
) -> Decision:
    """``identity``: the rollout's (None without spec.canary), as render derived it from the candidate;
    ``changed_child``: the InferenceService whose change triggered this reconcile, or None."""
    cache = plan_cache(reward_model, seen)
    running = percent = running_share(reward_model, identity)
    rollout = None
    if identity is not None and not cache.hold:
        metadata, canary = reward_model["metadata"], reward_model["spec"]["canary"]
        knative = reward_model["spec"]["serving"]["mode"] == "Knative"
        status = reward_model.get("status") or {}
        rollout = canary_policy.decide(
            canary_policy.RolloutInput(
                canary=canary,
                candidate=identity.candidate,
                revision=identity.revision,
                previous=status.get("canary"),
                previous_conditions=tuple(status.get("conditions") or ()),
                ready=candidate_ready(reward_model, seen.stored, seen.candidate),
                figures=None
                if seen.figures is None
                else canary_policy.pool(seen.figures, identity.candidate, canary["mode"], percent),
                interval_s=interval_seconds(canary["interval"]),
                now=now,
                deployment=f"InferenceService {candidate_isvc_name(metadata['name'])}"
                if knative
                else kserve.canary_predictor_name(metadata["name"]),
            )
        )
        percent = rollout.percent
    child_only = changed_child is not None and settled(reward_model)
    return Decision(
        percent,
        cache,
        rollout,
        child_only,
        share_moved=percent != running,
        prune=not child_only and not as_created(reward_model),
    )
