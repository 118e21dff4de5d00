"""Ready, decided from what KServe reports on the InferenceService."""

from __future__ import annotations

from typing import Any

from ..api import conditions
from .conditions import Condition


def ready_from_inference_service(isvc: dict[str, Any] | None) -> Condition:
    """Mirror the InferenceService's Ready condition, keeping KServe's reason and message."""
    if isvc is None:
        return Condition(conditions.READY, "False", conditions.AWAITING_KSERVE, "InferenceService not created yet")
    name = isvc["metadata"]["name"]
    for condition in isvc.get("status", {}).get("conditions", []) or []:
        if condition.get("type") == "Ready":
            status = condition.get("status", "Unknown")
            if status == "True":
                return Condition(
                    conditions.READY, "True", conditions.INFERENCE_SERVICE_READY, f"InferenceService {name} is Ready"
                )
            reason = condition.get("reason") or conditions.INFERENCE_SERVICE_NOT_READY
            message = condition.get("message") or f"InferenceService {name} is not Ready"
            return Condition(conditions.READY, status if status in ("False", "Unknown") else "Unknown", reason, message)
    return Condition(
        conditions.READY,
        "Unknown",
        conditions.AWAITING_KSERVE,
        f"waiting for KServe to report on InferenceService {name}",
    )


def inference_service_fields(isvc: dict[str, Any] | None) -> dict[str, Any]:
    """The status fields a RewardModel takes from its InferenceService: its name and URL."""
    if isvc is None:
        return {}
    fields: dict[str, Any] = {"inferenceService": isvc["metadata"]["name"]}
    url = isvc.get("status", {}).get("url") or isvc.get("status", {}).get("address", {}).get("url")
    if url:
        fields["url"] = url
    return fields
