"""The RewardModel controller: gather, decide, render, apply, summarise.

Every trigger (create, update, resume, a change to its InferenceService, the
drift timer) runs the same idempotent reconcile, so a child deleted or edited by
hand is restored by the code path that created it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from ..api import API_VERSION, GROUP, REWARD_MODEL_KIND, REWARD_MODEL_PLURAL, VERSION, conditions, kserve
from ..api.defaults import apply_defaults
from ..api.names import MANAGED_BY, owner_label
from ..cluster import Refused, gather, objects
from ..metrics import OperatorMetrics
from ..policy import dependencies, names, readiness
from ..policy.conditions import not_ready
from ..render import PRUNED_KINDS, render_reward_model
from ..settings import Settings
from .runner import Logger, Outcome, Runner

KIND = REWARD_MODEL_KIND


def _inference_service(children: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((child for child in children if child["kind"] == kserve.INFERENCE_SERVICE_KIND), None)


def _prune(reward_model: dict[str, Any], children: list[dict[str, Any]], logger: Logger) -> None:
    """Delete the children of the kinds that come and go with the spec which it no longer renders
    (the NetworkPolicies once gateway.allowedClients is removed)."""
    metadata = reward_model["metadata"]
    labels = {**MANAGED_BY, owner_label(KIND): metadata["name"]}
    for api_version, kind in PRUNED_KINDS:
        keep = {c["metadata"]["name"] for c in children if (c["apiVersion"], c["kind"]) == (api_version, kind)}
        for name in objects.prune(api_version, kind, metadata["namespace"], labels, metadata["uid"], keep):
            logger.info("%s %s is no longer rendered; deleted", kind, name)


def sync(reward_model: dict[str, Any], settings: Settings, logger: Logger) -> Outcome:
    metadata = reward_model["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]

    spec = reward_model["spec"]
    gateway_enabled = spec["gateway"]["enabled"]
    problem = names.host_label_problem(name, namespace, spec["serving"]["mode"], gateway_enabled)
    if problem is None:
        wanted = dependencies.references(reward_model)  # type: ignore[arg-type]
        problem = dependencies.missing(namespace, wanted, gather.observe(namespace, wanted))
    if problem:
        # the children stay as they were: nothing already serving is lost
        existing = objects.get(kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, name, namespace)
        return Outcome(
            not_ready(conditions.INVALID_SPEC, problem), readiness.inference_service_fields(existing), "invalid"
        )

    applied = []
    children = render_reward_model(reward_model, settings.gateway_image)
    for child in children:
        try:
            applied.append(objects.apply(child))
        except Refused as error:
            message = f"{child['kind']} {child['metadata']['name']} rejected: {error.message}"
            return Outcome(not_ready(conditions.APPLY_FAILED, message), {}, "apply_failed")
    _prune(reward_model, children, logger)

    isvc = _inference_service(applied)
    fields = readiness.inference_service_fields(isvc)
    replicas = gather.ready_predictor_replicas(namespace, name)
    if replicas is not None:
        fields["replicas"] = replicas
    ready = readiness.ready_from_inference_service(isvc, gateway_enabled)
    return Outcome(ready, fields, "ready" if ready.status == "True" else "progressing")


def register(registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics) -> Runner:
    """Wire the RewardModel handlers into ``registry``; returns the runner they share."""
    runner = Runner(API_VERSION, KIND, lambda obj, logger: sync(obj, settings, logger), apply_defaults, runner_metrics)
    resource = (GROUP, VERSION, REWARD_MODEL_PLURAL)

    @kopf.on.resume(*resource, registry=registry)
    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    def reward_model_changed(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        runner.reconcile(namespace, name, logger)

    @kopf.timer(*resource, interval=settings.drift_interval, initial_delay=settings.drift_interval, registry=registry)
    def drift_backstop(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        """A slow, level-based safety net for anything a missed watch event would leave behind."""
        runner.reconcile(namespace, name, logger)

    @kopf.on.event(*resource, registry=registry)
    def reward_model_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            runner.forget(namespace, name)
        else:
            runner.observe(namespace, name, dict(body))

    @kopf.on.event(
        kserve.GROUP,
        kserve.INFERENCE_SERVICE_API_VERSION.rpartition("/")[2],
        kserve.INFERENCE_SERVICE_PLURAL,
        labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT},
        registry=registry,
    )
    def inference_service_event(
        event: dict[str, Any], namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        """A child changed (status, a hand edit) or vanished: reconcile its owner promptly."""
        owner = labels[owner_label(KIND)]
        started = time.monotonic()
        result = runner.reconcile(namespace, owner, logger)
        if event.get("type") == "DELETED" and result != "deleted":
            logger.info("InferenceService %s was deleted; restored in %.2fs", owner, time.monotonic() - started)

    return runner
