"""What runs the RewardBatch reconcile (:mod:`.rewardbatch`): kopf's handlers for the object and its Job."""

from __future__ import annotations

import kopf

from ..api import API_VERSION, GROUP, REWARD_BATCH_KIND, REWARD_BATCH_PLURAL, VERSION
from ..api.defaults import apply_defaults
from ..api.schema import REWARD_BATCH
from ..cluster import Cluster, Logger
from ..metrics import BatchFigures, OperatorMetrics
from ..settings import Settings
from . import rewardbatch
from .runner import Outcome, Owns, Runner, register_object_handlers, register_owned
from .seen import SeenChildren

KIND = REWARD_BATCH_KIND
# The Job a batch makes (runner.child_event): its status moves as shards start, end and fail, and each move
# reconciles the batch, which reads the Job and its pods' termination messages.
JOB_RESOURCE = ("batch", "v1", "jobs", "Job")
OWNS = (Owns(JOB_RESOURCE, "rewardbatch_job_event"),)


def batch_figures(fields: dict) -> BatchFigures | None:
    """The status's figures as the metrics export them (None before the Job exists)."""
    if "rows" not in fields:
        return None
    rows = fields["rows"]
    return BatchFigures(
        {
            "total": rows["total"],
            "scored": rows["scored"],
            "failed": rows["failed"],
            "scored_twice": rows["scoredTwice"],
        },
        {state: fields["shards"][state] for state in ("succeeded", "failed", "active")},
        fields.get("rowsPerSecond"),
    )


def unfinished(body: kopf.Body) -> bool:
    """Re-checked while not finished: a RewardModel, claim or Kueue admission waited on moves no Job of ours,
    and a Job's pod failing to start (a missing Secret) changes no Job status."""
    return (body.get("status") or {}).get("phase") not in rewardbatch.FINISHED_PHASES


def register(
    registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics, cluster: Cluster
) -> Runner:
    """Wire the RewardBatch handlers into ``registry``; returns the runner they share."""
    seen = SeenChildren()

    def sync(obj: dict, logger: Logger, child: dict | None) -> Outcome:
        outcome = rewardbatch.sync(obj, settings, logger, seen, cluster=cluster)
        if (figures := batch_figures(outcome.fields)) is not None:
            metadata = obj["metadata"]
            runner_metrics.objects.record_batch(KIND, metadata["namespace"], metadata["name"], figures)
        return outcome

    runner = Runner(
        API_VERSION,
        KIND,
        sync,
        lambda obj: apply_defaults(obj, REWARD_BATCH),
        runner_metrics,
        cluster,
    )
    register_object_handlers(
        registry,
        (GROUP, VERSION, REWARD_BATCH_PLURAL),
        runner,
        settings.drift_interval,
        settings.recheck_interval,
        id_prefix="batch_",
        recheck=unfinished,
        event_id="rewardbatch_event",
    )
    register_owned(registry, runner, seen, OWNS)
    return runner
