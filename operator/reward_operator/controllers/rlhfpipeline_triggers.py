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
from ..api.schema import RLHF_PIPELINE
from ..cluster import Cluster, Logger
from ..metrics import OperatorMetrics
from ..settings import Settings
from . import rlhfpipeline
from .runner import Owns, Runner, register_object_handlers, register_owned
from .seen import SeenChildren

KIND = RLHF_PIPELINE_KIND
# The children a pipeline makes and watches (runner.child_event): its roles' InferenceServices and its
# InferenceGraph, each read by the sync itself. The ids are those kopf gave the two handlers these rows
# replaced: its log lines name them.
OWNS = (
    Owns(kserve.INFERENCE_SERVICE_RESOURCE, "register.<locals>.pipeline_inference_service_event"),
    Owns(kserve.INFERENCE_GRAPH_RESOURCE, "register.<locals>.pipeline_inference_graph_event"),
)


def register(
    registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics, cluster: Cluster
) -> Runner:
    """Wire the RLHFPipeline handlers into ``registry``; returns the runner they share: the object's own
    (runner.register_object_handlers), the children it owns (OWNS), and the RewardModels it names."""
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

    register_owned(registry, runner, seen, OWNS)

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
