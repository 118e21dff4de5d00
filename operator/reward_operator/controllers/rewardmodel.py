"""The RewardModel controller: read, render, apply, summarise status.

Every trigger (create, update, resume, a change to the InferenceService, the
drift timer) calls the same idempotent :func:`reconcile`, so a child deleted or
edited by hand is restored by the same code path that created it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from .. import kube, metrics, status
from ..api import API_VERSION, GROUP, REWARD_MODEL_KIND, REWARD_MODEL_PLURAL, VERSION
from ..api.defaults import apply_defaults
from ..render.inferenceservice import ISVC_API_VERSION, render_inference_service
from ..render.metadata import MANAGED_BY, owner_label
from ..settings import SETTINGS

KIND = REWARD_MODEL_KIND
RUNTIME_API_VERSION = "serving.kserve.io/v1alpha1"

# Triggers for one object may arrive together (its own update and its child's
# event); reconciles of one object run one at a time.
_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def _missing_dependencies(reward_model: dict[str, Any]) -> str | None:
    """What the cluster lacks to honour an otherwise valid spec, in words, or None."""
    namespace = reward_model["metadata"]["namespace"]
    spec = reward_model["spec"]
    runtime = spec["runtime"]
    if kube.get_cluster(RUNTIME_API_VERSION, "ClusterServingRuntime", runtime) is None and (
        kube.get_namespaced(RUNTIME_API_VERSION, "ServingRuntime", namespace, runtime) is None
    ):
        return (
            f"spec.runtime: no ClusterServingRuntime (or ServingRuntime in {namespace}) named {runtime!r}; "
            "install the reward runtimes or name an existing runtime"
        )
    credentials = spec.get("credentials", {})
    references = []
    if token := credentials.get("huggingFaceToken"):
        references.append(("spec.credentials.huggingFaceToken", token["name"], token["key"]))
    for item in spec.get("env", []):
        if ref := item.get("valueFrom", {}).get("secretKeyRef"):
            references.append((f"spec.env[{item['name']}]", ref["name"], ref["key"]))
    if auth := spec.get("gateway", {}).get("authSecretRef"):
        references.append(("spec.gateway.authSecretRef", auth["name"], auth["key"]))
    keys_of: dict[str, set[str] | None] = {}  # one read per Secret, however often it is named
    for field, secret, key in references:
        if secret not in keys_of:
            keys_of[secret] = kube.secret_keys(namespace, secret)
        keys = keys_of[secret]
        if keys is None:
            return f"{field}: Secret {secret!r} not found in namespace {namespace}"
        if key not in keys:
            return f"{field}: Secret {secret!r} has no key {key!r}"
    account = credentials.get("serviceAccountName")
    if account and not kube.service_account_exists(namespace, account):
        return f"spec.credentials.serviceAccountName: ServiceAccount {account!r} not found in namespace {namespace}"
    return None


def _apply_error_message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message") or str(error.reason)
    except (TypeError, ValueError):
        return str(error.reason)


def _write_status(
    reward_model: dict[str, Any],
    ready: status.Condition,
    isvc: dict[str, Any] | None,
    replicas: int | None,
    logger: logging.Logger | logging.LoggerAdapter,
) -> None:
    metadata = reward_model["metadata"]
    current = reward_model.get("status") or {}
    desired = status.desired_status(current, metadata["generation"], ready, isvc, replicas, status.now_rfc3339())
    if desired != current:
        # a merge patch: fields that should be gone are sent as null
        patch = {**{key: None for key in current if key not in desired}, **desired}
        kube.patch_status(API_VERSION, KIND, metadata["namespace"], metadata["name"], patch)
    if status.ready_transition(current, ready):
        event_type = "Normal" if ready.status == "True" or ready.reason == status.AWAITING_KSERVE else "Warning"
        logger.info("Ready=%s (%s): %s", ready.status, ready.reason, ready.message)
        kube.post_event(reward_model, event_type, ready.reason, ready.message)
    metrics.record_ready(KIND, metadata["namespace"], metadata["name"], ready.status)


def _write_not_ready(
    reward_model: dict[str, Any],
    reason: str,
    message: str,
    isvc: dict[str, Any] | None,
    logger: logging.Logger | logging.LoggerAdapter,
) -> None:
    _write_status(reward_model, status.Condition(status.READY, "False", reason, message), isvc, None, logger)


def reconcile(namespace: str, name: str, logger: logging.Logger | logging.LoggerAdapter) -> str:
    """Bring one RewardModel's children and status in line with its spec; returns the result."""
    with _locks[(namespace, name)], metrics.DURATION.labels(kind=KIND).time():
        try:
            result = _reconcile(namespace, name, logger)
        except ApiException as error:
            metrics.ERRORS.labels(kind=KIND).inc()
            metrics.RECONCILES.labels(kind=KIND, result="error").inc()
            # the API server is unhappy (5xx, throttling, conflicts): retry soon, calmly
            raise kopf.TemporaryError(f"API error {error.status}: {error.reason}", delay=10) from error
        metrics.RECONCILES.labels(kind=KIND, result=result).inc()
        return result


def _reconcile(namespace: str, name: str, logger: logging.Logger | logging.LoggerAdapter) -> str:
    reward_model = kube.get_namespaced(API_VERSION, KIND, namespace, name)
    if reward_model is None or reward_model["metadata"].get("deletionTimestamp"):
        return "deleted"
    # The API server defaults from the same schema; this only matters for objects
    # stored before a new default existed.
    reward_model = apply_defaults(reward_model)

    problem = _missing_dependencies(reward_model)
    if problem:
        # the InferenceService stays as it was: nothing already serving is lost
        existing = kube.get_namespaced(ISVC_API_VERSION, "InferenceService", namespace, name)
        _write_not_ready(reward_model, status.INVALID_SPEC, problem, existing, logger)
        return "invalid"

    desired = render_inference_service(reward_model, SETTINGS.gateway_image)
    try:
        isvc = kube.apply(desired)
    except ApiException as error:
        if error.status is None or error.status >= 500 or error.status in (409, 429):
            raise
        message = f"InferenceService {name} rejected: {_apply_error_message(error)}"
        _write_not_ready(reward_model, status.APPLY_FAILED, message, None, logger)
        return "apply_failed"

    replicas = None
    if reward_model["spec"]["serving"]["mode"] == "Standard":
        replicas = kube.ready_replicas(namespace, f"{name}-predictor")
    ready = status.ready_from_inference_service(isvc)
    _write_status(reward_model, ready, isvc, replicas, logger)
    return "ready" if ready.status == "True" else "progressing"


# ---- kopf wiring ----------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, REWARD_MODEL_PLURAL)
@kopf.on.create(GROUP, VERSION, REWARD_MODEL_PLURAL)
@kopf.on.update(GROUP, VERSION, REWARD_MODEL_PLURAL)
def reward_model_changed(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
    reconcile(namespace, name, logger)


@kopf.timer(
    GROUP,
    VERSION,
    REWARD_MODEL_PLURAL,
    interval=SETTINGS.drift_interval,
    initial_delay=SETTINGS.drift_interval,
)
def drift_backstop(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
    """A slow, level-based safety net for anything a missed watch event would leave behind."""
    reconcile(namespace, name, logger)


@kopf.on.event(GROUP, VERSION, REWARD_MODEL_PLURAL)
def reward_model_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
    if event.get("type") == "DELETED":
        # Under the object's lock: a reconcile that read it just before deletion
        # finishes (and records) first, so its series cannot outlive this removal.
        with _locks[(namespace, name)]:
            metrics.record_ready(KIND, namespace, name, None)
    else:
        metrics.record_generation_lag(KIND, namespace, name, dict(body))


@kopf.on.event(
    "serving.kserve.io",
    "v1beta1",
    "inferenceservices",
    labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT},
)
def inference_service_event(
    event: dict[str, Any], namespace: str, labels: dict[str, str], logger: logging.Logger, **_: Any
) -> None:
    """A child changed (status, a hand edit) or vanished: reconcile its owner promptly."""
    owner = labels[owner_label(KIND)]
    started = time.monotonic()
    result = reconcile(namespace, owner, logger)
    if event.get("type") == "DELETED" and result != "deleted":
        logger.info("InferenceService %s was deleted; restored in %.2fs", owner, time.monotonic() - started)
