"""The RewardModel controller: gather, decide, render, apply, summarise.

Every trigger (create, update, resume, a change to its InferenceService, the
re-check and drift timers) runs the same idempotent reconcile, so a child deleted
or edited by hand is restored by the code path that created it.

A reconcile for a change of the InferenceService alone (KServe writing its
status, most often) does only what that change can need while the spec is the one
last reconciled: it re-applies the InferenceService only if the stored one lost a
field of ours, and leaves the other children and the pruning to the reconciles of
the RewardModel's own changes and timers. Those are most of the operator's API
calls saved at a thousand objects (make bench-operator).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from ..api import API_VERSION, GROUP, REWARD_MODEL_KIND, REWARD_MODEL_PLURAL, VERSION, conditions, kserve
from ..api.cache import cache_identity
from ..api.defaults import apply_defaults
from ..api.keda import scales_through_keda
from ..api.names import MANAGED_BY, owner_label
from ..cluster import Refused, caches, gateways, gather, objects
from ..metrics import OperatorMetrics
from ..policy import cache as cache_policy
from ..policy import canary as canary_policy
from ..policy import children as child_policy
from ..policy import dependencies, names, readiness, scaling
from ..policy.status import not_ready, recheck, settled
from ..render import PRUNED_KINDS, SCALER_PRUNED_KINDS, canary_identity, render_reward_model
from ..render.cache import local_model_cache
from ..render.canary import candidate_isvc_name, interval_seconds
from ..render.rewardmodel import candidate_runtime, model_runtime
from ..settings import Settings
from .runner import Logger, Outcome, Runner, register_reconcile_triggers
from .seen import SeenChildren

KIND = REWARD_MODEL_KIND
DEPLOYMENT_KIND = "Deployment"
CACHE_KINDS = (kserve.LOCAL_MODEL_CACHE_KIND, kserve.LOCAL_MODEL_NAMESPACE_CACHE_KIND)


def _inference_service(children: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The InferenceService ``name`` among ``children`` (Knative mode's rollout has a second one)."""
    return next(
        (c for c in children if c["kind"] == kserve.INFERENCE_SERVICE_KIND and c["metadata"]["name"] == name), None
    )


def _prune(reward_model: dict[str, Any], children: list[dict[str, Any]], logger: Logger) -> None:
    """Delete the children of the kinds that come and go with the spec which it no longer renders
    (the NetworkPolicies once gateway.allowedClients is removed; in Knative mode, the candidate's
    InferenceService once spec.canary is, listed only while a rollout is or was just on; the scaler Service
    and ScaledObject once serving.minReplicas is above 0, listed only where KEDA is installed)."""
    metadata = reward_model["metadata"]
    labels = {**MANAGED_BY, owner_label(KIND): metadata["name"]}
    kinds = PRUNED_KINDS
    if scales_through_keda(reward_model["spec"]["serving"]) or gather.keda_served():
        kinds += SCALER_PRUNED_KINDS
    rollout = "canary" in reward_model["spec"] or "canary" in (reward_model.get("status") or {})
    if reward_model["spec"]["serving"]["mode"] == "Knative" and rollout:
        kinds += ((kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND),)
    for api_version, kind in kinds:
        keep = {c["metadata"]["name"] for c in children if (c["apiVersion"], c["kind"]) == (api_version, kind)}
        for name in objects.prune(api_version, kind, metadata["namespace"], labels, metadata["uid"], keep):
            logger.info("%s %s is no longer rendered; deleted", kind, name)


def sync(
    reward_model: dict[str, Any],
    settings: Settings,
    logger: Logger,
    changed_child: dict[str, Any] | None = None,
    seen: SeenChildren | None = None,
) -> Outcome:
    """``seen``: where the InferenceService this reconcile applies is recorded as acted on, so the
    watch's echo of that apply costs no reconcile of its own."""
    metadata = reward_model["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    if changed_child is not None and changed_child.get("kind") == DEPLOYMENT_KIND:
        # the predictor's replicas moved (KEDA, an HPA, Knative): with the spec as last reconciled only the
        # status can follow, so this is the InferenceService's path with the InferenceService as stored
        changed_child = (
            objects.get(kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, name, namespace)
            if settled(reward_model)
            else None
        )

    spec = reward_model["spec"]
    gateway_enabled = spec["gateway"]["enabled"]
    problem = names.host_label_problem(name, namespace, spec["serving"]["mode"], gateway_enabled)
    if problem is None:
        wanted = dependencies.references(
            reward_model,  # type: ignore[arg-type]
            model_runtime(reward_model),  # type: ignore[arg-type]
            candidate_runtime(reward_model),  # type: ignore[arg-type]
        )
        problem = dependencies.missing(namespace, wanted, gather.observe(namespace, wanted))
    if problem:
        # the children stay as they were: nothing already serving is lost
        existing = changed_child or objects.get(
            kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, name, namespace
        )
        fields = {**readiness.inference_service_fields(existing), **_kept_rollout(reward_model)}
        return Outcome(not_ready(conditions.INVALID_SPEC, problem), fields, "invalid")

    identity = canary_identity(reward_model)  # type: ignore[arg-type]
    previous_rollout = (reward_model.get("status") or {}).get("canary")
    percent = 0
    if identity is not None and previous_rollout and previous_rollout.get("revision") == identity[1]:
        percent = int(previous_rollout.get("percent") or 0)  # the share the gateways run now
    applied = []
    cached, cache_bound, hold, cache_fields = None, True, False, {}
    stored_isvc = changed_child
    if stored_isvc is None or stored_isvc["metadata"]["name"] != name:
        stored_isvc = None
    if (released := cache_policy.released(reward_model)) is not None:
        # spec.cache gone (or its model changed): out of the old cache, which goes if this was its last user
        stored_isvc = stored_isvc or objects.get(
            kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, name, namespace
        )
        if cache_policy.bound_to(stored_isvc) == released[1]:
            caches.opt_out(name, namespace, True)  # KServe unbinds it at this admission
        caches.sweep_quietly(*released, logger)
    if "cache" in spec:
        # the shared cache first: KServe binds it to the InferenceService only when that is admitted
        manifest = local_model_cache(reward_model)  # type: ignore[arg-type]
        try:
            stored_cache, conflict = caches.ensure(manifest, reward_model)
        except Refused as error:
            message = f"{manifest['kind']} {manifest['metadata']['name']} rejected: {error.message}"
            return Outcome(not_ready(conditions.APPLY_FAILED, message), _kept_rollout(reward_model), "apply_failed")
        cached = cache_policy.model_cached(stored_cache, conflict)
        cache_fields = {"modelCache": cache_policy.identity_status(cache_identity(reward_model))}  # type: ignore[arg-type]
        stored_isvc = stored_isvc or objects.get(
            kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, name, namespace
        )
        cache_bound = cache_policy.bound(cached, stored_isvc, manifest["metadata"]["name"])
        hold = not cache_bound and stored_isvc is None  # see policy.cache: never started on a partial cache
        if cache_bound and cache_policy.opted_out(stored_isvc):
            caches.opt_out(name, namespace, False)  # an opt-out of an earlier release: bound at this admission
    children = render_reward_model(
        reward_model,
        settings.gateway_image,
        percent,
        settings.operator_namespace,
        settings.keda_namespace,
        cache_bound,
    )
    # only the InferenceService changed, and the spec is as last reconciled: see the module's docstring
    child_only = changed_child is not None and settled(reward_model)
    for child in children:
        if child["kind"] in CACHE_KINDS:
            continue  # applied above
        if hold and child["kind"] == kserve.INFERENCE_SERVICE_KIND:
            continue
        if child_only and child["kind"] != kserve.INFERENCE_SERVICE_KIND:
            continue
        stored = changed_child
        if child_only and child["metadata"]["name"] != changed_child["metadata"]["name"]:  # type: ignore[index]
            # Knative mode's rollout has two InferenceServices: the other one, as stored
            stored = objects.get(kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND,
                                 child["metadata"]["name"], namespace)  # fmt: skip
        if child_only and stored is not None and child_policy.holds(stored, child):
            applied.append(stored)
            continue
        try:
            applied.append(objects.apply(child))
        except Refused as error:
            message = f"{child['kind']} {child['metadata']['name']} rejected: {error.message}"
            return Outcome(not_ready(conditions.APPLY_FAILED, message), _kept_rollout(reward_model), "apply_failed")
    if not child_only:
        _prune(reward_model, children, logger)

    cache_conditions = (cached,) if cached is not None else ()
    removed = () if cached is not None else (conditions.MODEL_CACHED,)
    if hold:
        assert cached is not None
        return Outcome(
            cache_policy.held(cached),
            {**_kept_rollout(reward_model), **cache_fields},
            "progressing",
            conditions=cache_conditions,
            removed_conditions=conditions.CANARY_CONDITIONS if identity is None else (),
        )
    isvc = _inference_service(applied, name)
    if seen is not None and isvc is not None and not child_only:
        seen.record(isvc)  # what follows decides from it; the handler records a changed_child itself
    fields = {**readiness.inference_service_fields(isvc), **cache_fields}
    replicas = gather.predictor_replicas(namespace, name)
    if replicas is not None:
        fields["replicas"] = replicas.ready
    asleep = scaling.scaled_to_zero(spec["serving"], replicas)
    scale_conditions = (asleep,) if asleep is not None else ()
    unscaled = () if asleep is not None else (conditions.SCALED_TO_ZERO,)
    ready = readiness.ready_from_inference_service(isvc, gateway_enabled)
    if isvc is not None and (components := readiness.pod_components(isvc, ready, gateway_enabled)):
        # KServe says not Ready and not why: Kubernetes' reason from the pods (one list, only now)
        ready = readiness.ready_with_pods(
            ready, isvc, gather.inference_service_pods(namespace, name), components, _ready_reason(reward_model)
        )
    result = "ready" if ready.status == "True" else "progressing"
    if identity is None:
        return Outcome(
            ready,
            fields,
            result,
            conditions=scale_conditions + cache_conditions,
            removed_conditions=conditions.CANARY_CONDITIONS + unscaled + removed,
        )
    candidate_isvc = _inference_service(applied, candidate_isvc_name(name))
    rollout = _rollout(reward_model, identity, isvc if candidate_isvc is None else candidate_isvc, percent)
    if rollout.percent != percent:
        # the gateways are told the new share (a rolling update of the transformer)
        (isvc_manifest,) = [
            child
            for child in render_reward_model(
                reward_model,
                settings.gateway_image,
                rollout.percent,
                settings.operator_namespace,
                settings.keda_namespace,
                cache_bound,
            )
            if child["kind"] == kserve.INFERENCE_SERVICE_KIND and child["metadata"]["name"] == name
        ]
        try:
            objects.apply(isvc_manifest)
        except Refused as error:
            message = f"InferenceService {name} rejected: {error.message}"
            return Outcome(not_ready(conditions.APPLY_FAILED, message), _kept_rollout(reward_model), "apply_failed")
    fields["canary"] = rollout.status
    return Outcome(
        ready,
        fields,
        result,
        conditions=(rollout.ready, rollout.progressing, *scale_conditions, *cache_conditions),
        removed_conditions=unscaled + removed,
        events=tuple((event.type, event.reason, event.message) for event in rollout.events),
    )


def now() -> datetime:
    return datetime.now(UTC)


def _ready_reason(reward_model: dict[str, Any]) -> str | None:
    """Ready's reason as stored."""
    found = (reward_model.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in found if c.get("type") == conditions.READY), None)


def _kept_rollout(reward_model: dict[str, Any]) -> dict[str, Any]:
    """The rollout's status as it was (and the cache in use), for outcomes that decide nothing about them."""
    status = reward_model.get("status") or {}
    kept = {"modelCache": status["modelCache"]} if status.get("modelCache") else {}
    if status.get("canary") and "canary" in reward_model["spec"]:
        kept["canary"] = status["canary"]
    return kept


def _rollout(
    reward_model: dict[str, Any], identity: tuple[str, str], isvc: dict[str, Any] | None, percent: int
) -> canary_policy.Rollout:
    """The rollout's next state: KServe's word on the candidate (``isvc``: the InferenceService that
    holds it, Knative mode's second one), and the gateways' figures for the share they run now."""
    metadata, canary = reward_model["metadata"], reward_model["spec"]["canary"]
    candidate, revision = identity
    knative = reward_model["spec"]["serving"]["mode"] == "Knative"
    ready = canary_policy.candidate_isvc_ready(isvc) if knative else canary_policy.candidate_ready(isvc)
    figures = None
    if ready:
        summaries = gateways.rollout_figures(metadata["namespace"], metadata["name"])
        figures = canary_policy.pool(summaries, candidate, canary["mode"], percent)
    status = reward_model.get("status") or {}
    return canary_policy.decide(
        canary,
        candidate,
        revision,
        status.get("canary"),
        status.get("conditions") or [],
        ready,
        figures,
        interval_seconds(canary["interval"]),
        now(),
        f"InferenceService {candidate_isvc_name(metadata['name'])}"
        if knative
        else kserve.canary_predictor_name(metadata["name"]),
    )


def register(registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics) -> Runner:
    """Wire the RewardModel handlers into ``registry``; returns the runner they share."""
    seen = SeenChildren()
    runner = Runner(
        API_VERSION,
        KIND,
        lambda obj, logger, child: sync(obj, settings, logger, child, seen),
        apply_defaults,
        runner_metrics,
    )
    resource = (GROUP, VERSION, REWARD_MODEL_PLURAL)

    register_reconcile_triggers(
        registry,
        resource,
        runner,
        settings.drift_interval,
        settings.recheck_interval,
        recheck=recheck,  # its Ready reads the pods: re-checked while they may fail unseen
    )

    @kopf.timer(
        *resource,
        id="canary",
        interval=settings.canary_interval,
        initial_delay=settings.canary_interval,
        when=lambda spec, **_: "canary" in spec,
        registry=registry,
    )
    def canary_rollout(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        """Only for objects with spec.canary (kopf stops it without): the gateways' figures read, the
        gates judged and the next step taken on time, with no change to the object to wake it."""
        runner.reconcile(namespace, name, logger)

    # On the event loop, not in kopf's thread pool: a sync handler would wait for a thread behind
    # every queued reconcile, and the object's events with it. At N = 1000 that held back kopf's
    # own patch for minutes, past its consistency wait, and kopf ran the create handler again.
    @kopf.on.event(*resource, registry=registry)
    async def reward_model_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            await asyncio.to_thread(runner.forget, namespace, name)  # waits for the object's reconcile
            if (used := cache_identity(body)) is not None:
                # its last user gone, the cache goes (or waits for KServe to see its InferenceService go)
                await asyncio.to_thread(caches.sweep_quietly, *used, logging.getLogger(__name__))
        else:
            runner.observe(namespace, name, dict(body))  # a dict store under a lock held only briefly

    @kopf.on.event(
        kserve.GROUP,
        kserve.INFERENCE_SERVICE_API_VERSION.rpartition("/")[2],
        kserve.INFERENCE_SERVICE_PLURAL,
        labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT},
        registry=registry,
    )
    def inference_service_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        """A child changed (status, a hand edit) or vanished: reconcile its owner promptly, unless the
        change is in nothing a reconcile reads (see :mod:`.seen`)."""
        owner = labels[owner_label(KIND)]
        started = time.monotonic()
        deleted = event.get("type") == "DELETED"
        if deleted:
            seen.forget(namespace, body["metadata"]["name"])  # first: the reconcile records the one it restores
            if runner.reconcile(namespace, owner, logger) != "deleted":
                logger.info("InferenceService %s was deleted; restored in %.2fs", owner, time.monotonic() - started)
            return
        child = dict(body)
        if seen.unchanged(child):
            return
        runner.reconcile(namespace, owner, logger, changed_child=child)
        seen.record(child)

    # The predictor's replicas as last seen, per Deployment (uid): KEDA, KServe's HPA and Knative scale it
    # without a word to the RewardModel or its InferenceService, so status.replicas and ScaledToZero follow
    # this watch. Only a change of the replicas wanted or ready refreshes the status; a Deployment first seen
    # (the watch's initial listing, a new revision) is only recorded: the reconcile that made it reads it.
    seen_replicas: dict[str, tuple[int | None, int]] = {}

    @kopf.on.event(
        "apps",
        "v1",
        "deployments",
        labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT, kserve.COMPONENT_LABEL: kserve.PREDICTOR_COMPONENT},
        registry=registry,
    )
    async def predictor_deployment_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        """On the event loop: most events (status heartbeats of a rollout, observedGeneration) change no
        replica count and cost a comparison, never a thread."""
        owner = labels[owner_label(KIND)]
        # the stable predictor only: Knative mode's candidate InferenceService, and Standard mode's canary
        # Deployment, carry the owner's label too
        if labels.get(kserve.ISVC_LABEL) != owner or body["metadata"]["name"] == kserve.canary_predictor_name(owner):
            return
        uid = body["metadata"]["uid"]
        if event.get("type") == "DELETED":
            changed = seen_replicas.pop(uid, None) is not None
        else:
            now = (body.get("spec", {}).get("replicas"), body.get("status", {}).get("readyReplicas") or 0)
            previous = seen_replicas.get(uid)
            seen_replicas[uid] = now
            changed = previous is not None and previous != now
        if changed:
            await asyncio.to_thread(runner.reconcile, namespace, owner, logger, {**body, "kind": DEPLOYMENT_KIND})

    for cache_kind in CACHE_KINDS:
        _register_cache_watch(registry, runner, cache_kind)

    return runner


class _ObjectLogger(logging.LoggerAdapter):
    """Log lines about a RewardModel reconciled from another object's handler, prefixed as kopf
    prefixes its own (``[namespace/name]``)."""

    def __init__(self, key: str):
        super().__init__(logging.getLogger("kopf.objects"), {})
        self.key = key

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.key}] {msg}", kwargs


def _register_cache_watch(registry: kopf.OperatorRegistry, runner: Runner, cache_kind: str) -> None:
    """A shared cache we made changed (KServe's report on its copies, most often), or the watch starts
    (the first list: users deleted while the operator was stopped): tell its users (ModelCached, and the
    InferenceService bound once it is filled), then drop the users that are gone, and the cache with the last."""

    @kopf.on.event(
        kserve.GROUP,
        kserve.LOCAL_MODEL_API_VERSION.rpartition("/")[2],
        objects.plural_of(cache_kind),
        labels=MANAGED_BY,
        registry=registry,
    )
    def cache_event(event: dict[str, Any], body: kopf.Body, logger: Logger, **_: Any) -> None:
        if event.get("type") == "DELETED":
            return
        metadata = body["metadata"]
        for user in cache_policy.users(dict(body)):
            user_namespace, _, user_name = user.partition("/")
            try:
                runner.reconcile(user_namespace, user_name, _ObjectLogger(user))
            except kopf.TemporaryError as error:
                logger.info("RewardModel %s not reconciled after a change of its cache: %s", user, error)
        caches.sweep_quietly(cache_kind, metadata["name"], metadata.get("namespace"), logger)
