"""What runs the RewardModel reconcile (:mod:`.rewardmodel`): kopf's handlers for the object, its
InferenceService, its predictor's replicas and the shared model caches, and the rollout's timer."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from ..api import API_VERSION, GROUP, REWARD_MODEL_KIND, REWARD_MODEL_PLURAL, VERSION, kserve
from ..api.cache import cache_identity
from ..api.defaults import apply_defaults
from ..api.names import MANAGED_BY, owner_label
from ..cluster import Cluster, Logger
from ..cluster.objects import plural_of
from ..metrics import OperatorMetrics
from ..policy import cache as cache_policy
from ..policy.status import recheck
from ..settings import Settings
from . import rewardmodel
from .rewardmodel import CACHE_KINDS, DEPLOYMENT_KIND
from .runner import Owns, Runner, reconcile_handler, register_object_handlers, register_owned
from .seen import SeenChildren, SeenReplicas

KIND = REWARD_MODEL_KIND
# The children a RewardModel makes and watches (runner.child_event): its InferenceService, decided from
# the watch's copy. Its ConfigMaps, NetworkPolicy and the rest are not watched: the drift backstop restores
# them. The id is the one kopf gave the handler this row replaced: its log lines name it.
OWNS = (Owns(kserve.INFERENCE_SERVICE_RESOURCE, "register.<locals>.inference_service_event", hand_over=True),)


def register(
    registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics, cluster: Cluster
) -> Runner:
    """Wire the RewardModel handlers into ``registry``; returns the runner they share: the object's own
    (runner.register_object_handlers), the children it owns (OWNS), and what else it watches (the predictor's
    replicas, the shared model caches), and the rollout's timer."""
    seen = SeenChildren()
    runner = Runner(
        API_VERSION,
        KIND,
        lambda obj, logger, child: rewardmodel.sync(obj, settings, logger, child, seen, cluster=cluster),
        apply_defaults,
        runner_metrics,
        cluster,
    )
    resource = (GROUP, VERSION, REWARD_MODEL_PLURAL)
    register_object_handlers(
        registry,
        resource,
        runner,
        settings.drift_interval,
        settings.recheck_interval,
        recheck=recheck,  # its Ready reads the pods: re-checked while they may fail unseen
        event_id="register.<locals>.reward_model_event",  # as kopf named it here before: its log lines
        deleted=functools.partial(_release_cache, cluster),
    )
    register_owned(registry, runner, seen, OWNS)
    kopf.on.event(
        "apps",
        "v1",
        "deployments",
        id="register.<locals>.predictor_deployment_event",  # as kopf named it here before: its log lines
        labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT, kserve.COMPONENT_LABEL: kserve.PREDICTOR_COMPONENT},
        registry=registry,
    )(_predictor_deployment_event(runner))
    for cache_kind in CACHE_KINDS:
        _register_cache_watch(registry, runner, cache_kind, cluster)
    # Only for objects with spec.canary (kopf stops it without): the gateways' figures read, the gates
    # judged and the next step taken on time, with no change to the object to wake it.
    kopf.timer(
        *resource,
        id="canary",
        interval=settings.canary_interval,
        initial_delay=settings.canary_interval,
        when=lambda spec, **_: "canary" in spec,
        registry=registry,
    )(reconcile_handler(runner))
    return runner


async def _release_cache(cluster: Cluster, body: dict[str, Any]) -> None:
    """A RewardModel gone: its last user gone, the cache goes (or waits for KServe to see its InferenceService go)."""
    if (used := cache_identity(body)) is not None:
        await asyncio.to_thread(cluster.sweep_cache, *used, logging.getLogger(__name__))


def _predictor_deployment_event(runner: Runner) -> Callable[..., Awaitable[None]]:
    """The predictor's Deployments (the stable one's): a move of its replicas wanted or ready refreshes the
    owner's status.replicas and ScaledToZero (SeenReplicas says why this watch, and what a move is)."""
    replicas = SeenReplicas()

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
        if replicas.changed(body, deleted=event.get("type") == "DELETED"):
            await asyncio.to_thread(runner.reconcile, namespace, owner, logger, {**body, "kind": DEPLOYMENT_KIND})

    return predictor_deployment_event


class _ObjectLogger(logging.LoggerAdapter):
    """Log lines about a RewardModel reconciled from another object's handler, prefixed as kopf
    prefixes its own (``[namespace/name]``)."""

    def __init__(self, key: str):
        super().__init__(logging.getLogger("kopf.objects"), {})
        self.key = key

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self.key}] {msg}", kwargs


def _register_cache_watch(registry: kopf.OperatorRegistry, runner: Runner, cache_kind: str, cluster: Cluster) -> None:
    """A shared cache we made changed (KServe's report on its copies, most often), or the watch starts
    (the first list: users deleted while the operator was stopped): tell its users (ModelCached, and the
    InferenceService bound once it is filled), then drop the users that are gone, and the cache with the last."""

    @kopf.on.event(
        kserve.GROUP,
        kserve.LOCAL_MODEL_VERSION,
        plural_of(cache_kind),
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
        cluster.sweep_cache(cache_kind, metadata["name"], metadata.get("namespace"), logger)
