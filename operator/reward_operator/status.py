"""Pure status policy: what a RewardModel's status should say, given what is seen.

Condition types and reasons are declared here, each with its meaning, so that
`kubectl describe` readers and alert authors have one place to look.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"  # the reward model answers requests at status.url

# Reasons for Ready.
INFERENCE_SERVICE_READY = "InferenceServiceReady"  # KServe reports the InferenceService Ready
INFERENCE_SERVICE_NOT_READY = "InferenceServiceNotReady"  # KServe reports it not Ready, without a reason
AWAITING_KSERVE = "AwaitingKServe"  # applied; KServe has not reported on it yet
INVALID_SPEC = "InvalidSpec"  # the schema accepted the spec but the cluster cannot honour it
APPLY_FAILED = "ApplyFailed"  # the API server refused the rendered InferenceService


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_from_inference_service(isvc: dict[str, Any] | None) -> Condition:
    """Mirror the InferenceService's Ready condition, keeping KServe's reason and message."""
    if isvc is None:
        return Condition(READY, "False", AWAITING_KSERVE, "InferenceService not created yet")
    name = isvc["metadata"]["name"]
    for condition in isvc.get("status", {}).get("conditions", []) or []:
        if condition.get("type") == "Ready":
            status = condition.get("status", "Unknown")
            if status == "True":
                return Condition(READY, "True", INFERENCE_SERVICE_READY, f"InferenceService {name} is Ready")
            reason = condition.get("reason") or INFERENCE_SERVICE_NOT_READY
            message = condition.get("message") or f"InferenceService {name} is not Ready"
            return Condition(READY, status if status in ("False", "Unknown") else "Unknown", reason, message)
    return Condition(READY, "Unknown", AWAITING_KSERVE, f"waiting for KServe to report on InferenceService {name}")


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


def desired_status(
    current: dict[str, Any],
    generation: int,
    ready: Condition,
    isvc: dict[str, Any] | None,
    replicas: int | None,
    now: str,
) -> dict[str, Any]:
    """The whole status a RewardModel should have; compare with ``current`` to decide on a write."""
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_condition(current.get("conditions", []) or [], ready, generation, now),
    }
    if isvc is not None:
        status["inferenceService"] = isvc["metadata"]["name"]
        url = isvc.get("status", {}).get("url") or isvc.get("status", {}).get("address", {}).get("url")
        if url:
            status["url"] = url
    if replicas is not None:
        status["replicas"] = replicas
    return status


def ready_transition(current: dict[str, Any], ready: Condition) -> bool:
    """True when Ready's status or reason differs from what the status says now (worth one event)."""
    previous = next((c for c in current.get("conditions", []) or [] if c.get("type") == READY), None)
    return previous is None or (previous.get("status"), previous.get("reason")) != (
        ready.status,
        ready.reason,
    )
