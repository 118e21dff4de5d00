"""What runs the RLHFPipeline reconcile (:mod:`.rlhfpipeline`): kopf's handlers for the object, its
InferenceServices and InferenceGraph, and the RewardModels it names."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from ..api import (
    API_VERSION,
    GROUP,
    REWARD_MODEL_KIND,
    REWARD_MODEL_PLURAL,
    RLHF_PIPELINE_KIND,
    RLHF_PIPELINE_PLURAL,
    VERSION,
    kserve,
)
from ..api.defaults import apply_defaults
from ..api.names import MANAGED_BY, owner_label
from ..api.schema import RLHF_PIPELINE
from ..cluster import Cluster, Logger
from ..metrics import OperatorMetrics
from ..settings import Settings
from . import rlhfpipeline
from .runner import Runner, register_object_handlers
from .seen import SeenChildren

KIND = RLHF_PIPELINE_KIND
# The children watched, (version, plural) in KServe's group, by handler id (kopf's log lines name it; the
# ids kopf gave the two handlers this one replaced).
CHILD_WATCHES = {
    "register.<locals>.pipeline_inference_service_event": (
        kserve.INFERENCE_SERVICE_VERSION,
        kserve.INFERENCE_SERVICE_PLURAL,
    ),
    "register.<locals>.pipeline_inference_graph_event": (kserve.INFERENCE_GRAPH_VERSION, kserve.INFERENCE_GRAPH_PLURAL),
}


def register(
    registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics, cluster: Cluster
) -> Runner:
    """Wire the RLHFPipeline handlers into ``registry``; returns the runner they share."""
    seen = SeenChildren()
    runner = Runner(
        API_VERSION,
        KIND,
        lambda obj, logger, child: rlhfpipeline.sync(obj, settings, logger, seen, cluster=cluster),
        lambda obj: apply_defaults(obj, RLHF_PIPELINE),
        runner_metrics,
        cluster,
    )
    register_object_handlers(
        registry,
        (GROUP, VERSION, RLHF_PIPELINE_PLURAL),
        runner,
        settings.drift_interval,
        settings.recheck_interval,
        id_prefix="pipeline_",
        event_id="register.<locals>.rlhf_pipeline_event",  # as kopf named it here before: its log lines
    )

    def owned_child_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        """A child changed (KServe's report, a hand edit) or vanished: reconcile its owner, which restores
        it, unless the change is in nothing a reconcile reads (see :mod:`.seen`)."""
        if event.get("type") == "DELETED":
            seen.forget(namespace, body["metadata"]["name"])  # first: the reconcile records the one it restores
        elif seen.unchanged(dict(body)):
            return
        runner.reconcile(namespace, labels[owner_label(KIND)], logger)

    for handler_id, (version, plural) in CHILD_WATCHES.items():
        kopf.on.event(
            kserve.GROUP,
            version,
            plural,
            id=handler_id,
            labels={**MANAGED_BY, owner_label(KIND): kopf.PRESENT},
            registry=registry,
        )(owned_child_event)

    # On the event loop: it sees every RewardModel's every event, and a sync handler would make each wait
    # for a thread of kopf's pool behind the queued reconciles (at N = 1000 RewardModels that held kopf's
    # own patches past its consistency wait, and it ran 857 create handlers twice).
    @kopf.on.event(GROUP, VERSION, REWARD_MODEL_PLURAL, registry=registry)
    async def reward_model_of_a_pipeline_event(namespace: str, name: str, logger: Logger, **_: Any) -> None:
        """A RewardModel was made, changed (its Ready) or removed: the pipelines naming it follow."""
        for known in runner.known(namespace):
            if rlhfpipeline.names_reward_model(known, name):
                try:
                    await asyncio.to_thread(runner.reconcile, namespace, known["metadata"]["name"], logger)
                except kopf.TemporaryError as error:  # this event is the RewardModel's: retried by the timers
                    logger.info(
                        "%s %s not reconciled after a change of %s %s: %s",
                        KIND, known["metadata"]["name"], REWARD_MODEL_KIND, name, error,
                    )  # fmt: skip

    return runner
