"""Ready, decided from what KServe reports on the InferenceService.

KServe's own Ready covers the predictor and the ingress only (its transformer
is not part of it), and its real diagnosis of a failure sits in
``status.modelStatus`` (InvalidSpec, BlockedByFailedLoad, with lastFailureInfo)
and in the component conditions, while Ready itself may stay Unknown with no
reason. This module reads all of it, so the RewardModel says what is wrong.
"""

from __future__ import annotations

from typing import Any

from ..api import conditions
from ..api.kserve import PREDICTOR_COMPONENT, TRANSFORMER_COMPONENT
from . import pods as pod_policy
from .status import Condition

# KServe's transitionStatus values that mean "this spec will not serve" (not "not yet").
FAILED_TRANSITIONS = ("InvalidSpec", "BlockedByFailedLoad")


def not_created(condition_type: str, kind: str) -> Condition:
    """``condition_type`` while the object of ``kind`` is not created yet (KServe has nothing to report)."""
    return Condition(condition_type, "False", conditions.AWAITING_KSERVE, f"{kind} not created yet")


def awaiting_report(condition_type: str, kind: str, name: str) -> Condition:
    """``condition_type`` while KServe has not reported on its ``kind`` ``name`` (no Ready condition yet)."""
    return Condition(
        condition_type, "Unknown", conditions.AWAITING_KSERVE, f"waiting for KServe to report on {kind} {name}"
    )


def _conditions_by_type(isvc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (isvc.get("status") or {}).get("conditions") or []}


def model_failure(isvc: dict[str, Any]) -> dict[str, Any] | None:
    """The only part of ``status.modelStatus`` the operator reads: KServe's diagnosis, when it is a failure.
    (Its states and copies change at every step of a healthy start, after Ready too.)"""
    model_status = (isvc.get("status") or {}).get("modelStatus") or {}
    transition = model_status.get("transitionStatus")
    if transition not in FAILED_TRANSITIONS:
        return None
    return {"transitionStatus": transition, "lastFailureInfo": model_status.get("lastFailureInfo") or {}}


def _failure(isvc: dict[str, Any]) -> Condition | None:
    """KServe's diagnosis of a spec that will not serve, from modelStatus."""
    failure = model_failure(isvc)
    if failure is None:
        return None
    transition, info = failure["transitionStatus"], failure["lastFailureInfo"]
    message = info.get("message") or f"KServe reports {transition}"
    details = []
    if info.get("location"):
        details.append(f"in {info['location']}")
    if info.get("exitCode"):
        details.append(f"exit code {info['exitCode']}")
    if details:
        message = f"{message} ({', '.join(details)})"
    return Condition(conditions.READY, "False", info.get("reason") or transition, message)


def _not_ready_component(found: dict[str, dict[str, Any]], components: tuple[str, ...]) -> Condition | None:
    """The first component condition that is not True and says why."""
    for component in components:
        condition = found.get(component)
        if condition is None or condition.get("status") == "True":
            continue
        if condition.get("reason") or condition.get("message"):
            status = "False" if condition.get("status") == "False" else "Unknown"
            reason = condition.get("reason") or f"{component}{status}"
            return Condition(conditions.READY, status, reason, f"{component}: {condition.get('message') or reason}")
    return None


def ready_from_inference_service(isvc: dict[str, Any] | None, gateway_enabled: bool = True) -> Condition:
    """Ready for the owner of ``isvc``: KServe's Ready, and the gateway's, with KServe's diagnosis."""
    if isvc is None:
        return not_created(conditions.READY, "InferenceService")
    name = isvc["metadata"]["name"]
    failure = _failure(isvc)
    if failure is not None:
        return failure
    found = _conditions_by_type(isvc)
    components = (
        ("PredictorReady", "TransformerReady", "IngressReady")
        if gateway_enabled
        else ("PredictorReady", "IngressReady")
    )
    ready = found.get("Ready")
    if ready is None:
        return awaiting_report(conditions.READY, "InferenceService", name)
    if ready.get("status") == "True":
        gateway = found.get("TransformerReady")
        if not gateway_enabled or (gateway or {}).get("status") == "True":
            return Condition(
                conditions.READY, "True", conditions.INFERENCE_SERVICE_READY, f"InferenceService {name} is Ready"
            )
        # KServe's Ready ignores the transformer: the gateway is what trainers call
        why = _not_ready_component(found, ("TransformerReady",))
        return why or Condition(
            conditions.READY,
            "Unknown",
            conditions.GATEWAY_NOT_READY,
            f"InferenceService {name}: the predictor is Ready, the reward gateway (transformer) is not yet",
        )
    why = _not_ready_component(found, components)
    if why is not None:
        return why
    status = "False" if ready.get("status") == "False" else "Unknown"
    reason = ready.get("reason") or conditions.INFERENCE_SERVICE_NOT_READY
    return Condition(conditions.READY, status, reason, ready.get("message") or f"InferenceService {name} is not Ready")


# KServe's component condition for each component label its pods carry.
_COMPONENT_CONDITIONS = {PREDICTOR_COMPONENT: "PredictorReady", TRANSFORMER_COMPONENT: "TransformerReady"}


def _explained_by_kserve(reason: str) -> bool:
    """KServe (or Knative beneath it) gave a failure reason of its own: it is kept, and no pod is read."""
    return reason in conditions.KSERVE_FAILURE_REASONS or reason.endswith(conditions.DEGRADED_SUFFIX)


def kserve_reported(isvc: dict[str, Any] | None) -> bool:
    """KServe has reported on ``isvc`` (its Ready condition is there). KServe writes it in the reconcile
    that makes the predictor: before, there are no replicas and no pods to read."""
    return isvc is not None and "Ready" in _conditions_by_type(isvc)


def pod_components(isvc: dict[str, Any] | None, ready: Condition, gateway_enabled: bool = True) -> tuple[str, ...]:
    """The components whose pods may explain ``ready`` (decided from ``isvc`` alone): none while it is
    True, or KServe gave a failure reason of its own, or there is no InferenceService, or KServe has not
    reported on it yet (:func:`kserve_reported`); else the ones KServe does not report Ready (the
    predictor and the gateway when it reports neither yet). Empty: no pod is read, so a settled Ready
    object costs nothing more."""
    if isvc is None or not kserve_reported(isvc) or ready.status == "True" or _explained_by_kserve(ready.reason):
        return ()
    found = _conditions_by_type(isvc)
    wanted = (PREDICTOR_COMPONENT, TRANSFORMER_COMPONENT) if gateway_enabled else (PREDICTOR_COMPONENT,)
    reported = [c for c in wanted if _COMPONENT_CONDITIONS[c] in found]
    if not reported:
        return wanted
    return tuple(c for c in wanted if (found.get(_COMPONENT_CONDITIONS[c]) or {}).get("status") != "True")


def ready_with_pods(
    ready: Condition,
    isvc: dict[str, Any],
    pods: list[dict[str, Any]],
    components: tuple[str, ...],
    previous_reason: str | None = None,
) -> Condition:
    """``ready`` as KServe's report gave it, or Ready=False with Kubernetes' reason for the worst container
    of ``pods`` (as the API serves them) among ``components`` (see :func:`pod_components`).
    ``previous_reason``: Ready's reason as stored, so alternating reasons of one state do not flap."""
    failure = pod_policy.worst_container(pods, isvc["metadata"]["name"], components)
    if failure is None:
        return ready
    reason = pod_policy.reason_kept(failure.reason, previous_reason)
    return Condition(ready.type, "False", reason, failure.message())


def inference_service_fields(isvc: dict[str, Any] | None) -> dict[str, Any]:
    """The status fields a RewardModel takes from its InferenceService.

    ``url`` is the in-cluster address (the gateway's Service when there is one),
    which is what trainers in the cluster can reach in either mode and with any
    ingress; KServe's ``status.url`` is built from its ingress domain template
    (example.com by default) and is published as ``externalURL``.
    """
    if isvc is None:
        return {}
    status = isvc.get("status") or {}
    fields: dict[str, Any] = {"inferenceService": isvc["metadata"]["name"]}
    address = (status.get("address") or {}).get("url")
    external = status.get("url")
    if address:
        fields["url"] = address
    if external and external != address:
        fields["externalURL"] = external
    return fields
