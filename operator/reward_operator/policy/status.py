"""Conditions and the status that carries them (KEP-1623).

``lastTransitionTime`` moves only when a condition's status flips; a status is
written only when it differs from the one stored; an event is worth posting
only when Ready's status or reason changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..api import conditions


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_ready(reason: str, message: str) -> Condition:
    return Condition(conditions.READY, "False", reason, message)


def merge_condition(existing: list[dict[str, Any]], new: Condition, generation: int, now: str) -> list[dict[str, Any]]:
    """Replace the condition of ``new.type``; lastTransitionTime moves only when status flips."""
    merged = []
    previous = next((c for c in existing if c.get("type") == new.type), None)
    transition = now
    if previous is not None and previous.get("status") == new.status and previous.get("lastTransitionTime"):
        transition = previous["lastTransitionTime"]
    for condition in existing:
        if condition.get("type") != new.type:
            merged.append(condition)
    merged.append(
        {
            "type": new.type,
            "status": new.status,
            "reason": new.reason,
            "message": new.message,
            "lastTransitionTime": transition,
            "observedGeneration": generation,
        }
    )
    return sorted(merged, key=lambda c: c["type"])


def merge_conditions(
    existing: list[dict[str, Any]],
    new: tuple[Condition, ...] | list[Condition],
    removed: tuple[str, ...] | list[str],
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """``existing`` with each of ``new`` merged in (see :func:`merge_condition`) and the types in
    ``removed`` dropped (a rollout's conditions once spec.canary is gone)."""
    merged = [c for c in existing if c.get("type") not in removed]
    for condition in new:
        merged = merge_condition(merged, condition, generation, now)
    return merged


def desired_status(
    current: dict[str, Any], generation: int, ready: Condition, fields: dict[str, Any], now: str
) -> dict[str, Any]:
    """The whole status an object should have; compare with ``current`` to decide on a write.

    ``fields`` are the kind's own status fields (url, replicas, ...); any stored
    field missing from them is dropped (see :func:`status_patch`).
    """
    return {
        "observedGeneration": generation,
        "conditions": merge_condition(current.get("conditions", []) or [], ready, generation, now),
        **fields,
    }


def status_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """A merge patch from ``current`` to ``desired``: fields that should be gone are sent as null."""
    return {**{key: None for key in current if key not in desired}, **desired}


def ready_transition(current: dict[str, Any], ready: Condition) -> bool:
    """True when Ready's status or reason differs from what the status says now (worth one event). ``ready``
    is the kind's main condition: Ready, or a RewardBatch's Complete."""
    previous = next((c for c in current.get("conditions", []) or [] if c.get("type") == ready.type), None)
    return previous is None or (previous.get("status"), previous.get("reason")) != (
        ready.status,
        ready.reason,
    )


def event_type(ready: Condition) -> str:
    """Warning for a Ready=False that needs a person (:data:`~reward_operator.api.conditions.WARNING_REASONS`,
    or a reason ending in Failed); Normal for Ready, and for progress while KServe works."""
    needs_a_person = ready.reason in conditions.WARNING_REASONS or ready.reason.endswith(conditions.DEGRADED_SUFFIX)
    return "Warning" if ready.status == "False" and needs_a_person else "Normal"


def spec_reconciled(obj: Mapping[str, Any]) -> bool:
    """The status was written for the spec as it is now."""
    return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation")


# Ready=False reasons that wait on something outside the spec (a Secret or runtime made later, a
# webhook that refused and may accept later, a pod's container failing: no watch follows pods):
# worth re-checking without a change to the object.
UNSETTLED_REASONS = (conditions.INVALID_SPEC, conditions.APPLY_FAILED, *conditions.POD_FAILURE_REASONS)
# Not-Ready reasons that only a change of a watched object moves on (the InferenceService, the cache, the
# RewardModels a pipeline names), or KServe's own verdict on the spec. Any other Ready that is not True
# (KServe's component reasons such as MinimumReplicasUnavailable, InferenceServiceNotReady,
# GatewayNotReady) may become a pod failure that KServe never reports: see :func:`recheck`.
WATCHED_REASONS = (
    conditions.AWAITING_KSERVE,
    conditions.AWAITING_MODEL_CACHE,
    conditions.MODEL_CACHE_FAILED,
    *conditions.KSERVE_FAILURE_REASONS,
    conditions.REWARD_MODEL_NOT_FOUND,
    conditions.REWARD_MODEL_WITHOUT_GATEWAY,
    conditions.REWARD_MODEL_NOT_READY,
    conditions.AWAITING_REWARD_MODELS,
)


def settled(obj: Mapping[str, Any]) -> bool:
    """Nothing to wait for but a change: the status is for the current spec, and Ready is not held
    up by something outside it."""
    if not spec_reconciled(obj):
        return False
    found = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in found if c.get("type") == conditions.READY), None)
    return ready is not None and ready.get("reason") not in UNSETTLED_REASONS


def recheck(obj: Mapping[str, Any]) -> bool:
    """Worth the short re-check timer: not settled, or not Ready for a reason the pods may change with
    no event of a watched object (a predictor that starts, then crash-loops, while KServe's status stays
    MinimumReplicasUnavailable). Unlike :func:`settled`, this does not make an InferenceService event a
    full reconcile."""
    if not settled(obj):
        return True
    found = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in found if c.get("type") == conditions.READY), None) or {}
    reason = ready.get("reason") or ""
    return (
        ready.get("status") != "True"
        and reason not in WATCHED_REASONS
        and not reason.endswith(conditions.DEGRADED_SUFFIX)
    )
