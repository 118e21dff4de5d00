"""The RewardBatch controller: one reconcile in the five stages the other kinds have (ARCHITECTURE.md).

1. **observe** (:func:`observe`): the RewardModel the batch names, as stored; the Job a finished batch
   made (it stays the batch's record, whatever the model does later); else the Job for the spec and the
   model's revision now (render/rewardbatch.py names it), and the claims and earlier Jobs' pods that hold its
   creation back;
2. **decide** (:func:`model_gap`, :func:`held_back`): a RewardModel that cannot serve, a missing claim, or
   pods of an earlier Job still writing to the output: no Job is made yet;
3. **render** (:func:`reward_operator.render.rewardbatch.render_job`): the Job, only when it does not exist;
4. **apply** (:func:`start_job`): the Job created once, never applied again (Kueue owns its suspension
   once it exists, and its pod template cannot change); an earlier Job deleted first (pruning);
5. **report** (:func:`reward_operator.policy.batch.report`): Complete, Admitted, Running and Failed, and the
   figures, from the Job and the termination messages of its pods.

Every trigger (create, resume, a change to its Job, the re-check timer while it is not finished) runs the
same reconcile. The RewardModel is read, never written: the batch's calls are what wake it and what keep it up.
"""

from __future__ import annotations

from typing import Any

from ..api import conditions
from ..api.names import COMPONENT_LABEL, owner_label
from ..api.schema.rewardbatch import S3_SECRET_KEY_PAIRS
from ..cluster import Cluster, Logger, Refused
from ..policy import batch as batch_policy
from ..render import model_identity
from ..render.rewardbatch import BATCH_COMPONENT, OWNED_JOBS, S3Secret, claims, job_name, render_job
from ..settings import Settings
from .runner import Outcome
from .seen import SeenChildren

JOB_API_VERSION = "batch/v1"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # on every pod of a Job, set by the Job controller
FINISHED_PHASES = ("Complete", "Failed")

# ---- 1. observe ----------------------------------------------------------------------------------


def model_gap(batch: dict[str, Any], model: dict[str, Any] | None) -> str | None:
    """Why the RewardModel cannot take the batch's calls, or None."""
    name = batch["spec"]["rewardModel"]
    if model is None:
        return f"RewardModel {name} does not exist in this namespace"
    if not (model.get("spec", {}).get("gateway") or {}).get("enabled", True):
        return f"RewardModel {name} has gateway.enabled: false; the batch calls its gateway"
    if not (model.get("status") or {}).get("url"):
        return f"RewardModel {name} has no status.url yet (it has not served)"
    return None


def model_revision(model: dict[str, Any]) -> str:
    """What names the weights that will score, as the gateway tells every caller (render/model_identity.py)."""
    uri = model["spec"]["model"]["uri"]
    return model_identity.revision(uri) + (f"@{digest}" if (digest := model_identity.digest(uri)) else "")


def finished_job(batch: dict[str, Any], cluster: Cluster) -> dict[str, Any] | None:
    """The Job of a batch whose status says it finished, as stored (None: none, or it was deleted)."""
    status = batch.get("status") or {}
    if status.get("phase") not in FINISHED_PHASES or not status.get("job"):
        return None
    return cluster.get(JOB_API_VERSION, "Job", status["job"], batch["metadata"]["namespace"])


def s3_secret(batch: dict[str, Any], cluster: Cluster) -> S3Secret | str:
    """What spec.s3SecretName's Secret holds for the Job (its key names, its annotations: never its values, which
    the pods take by reference), or what is wrong with it."""
    name = batch["spec"]["s3SecretName"]
    secret = cluster.get("v1", "Secret", name, batch["metadata"]["namespace"])
    if secret is None:
        return f"Secret {name} (spec.s3SecretName) does not exist"
    held = set(secret.get("data") or {})
    keys = next((pair for pair in S3_SECRET_KEY_PAIRS if set(pair) <= held), None)
    if keys is None:
        pairs = " nor ".join(" and ".join(pair) for pair in S3_SECRET_KEY_PAIRS)
        return f"Secret {name} (spec.s3SecretName) holds neither {pairs} (KServe's S3 convention)"
    return S3Secret(keys, dict(secret["metadata"].get("annotations") or {}))


# ---- 2. decide -------------------------------------------------------------------------------------------


def held_back(batch: dict[str, Any], job: str, cluster: Cluster) -> tuple[str, str] | None:
    """Why the Job ``job`` cannot be made yet, (reason, message), or None. Deletes the batch's earlier Jobs
    (another spec or model revision), whose pods must be gone first: they write to the same output."""
    namespace = batch["metadata"]["namespace"]
    missing = [claim for claim in claims(batch) if cluster.get("v1", "PersistentVolumeClaim", claim, namespace) is None]
    if missing:
        where = "spec.input.uri or spec.output.uri"
        return conditions.CLAIM_NOT_FOUND, f"PersistentVolumeClaim {missing[0]} ({where}) does not exist"
    owner = {owner_label(batch["kind"]): batch["metadata"]["name"]}
    cluster.prune(
        OWNED_JOBS.api_version,
        OWNED_JOBS.kind,
        namespace,
        {**owner, COMPONENT_LABEL: BATCH_COMPONENT},
        batch["metadata"]["uid"],
        {job},
    )
    earlier = sorted(
        {
            pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL, "")
            for pod in cluster.list_pods(namespace, owner)
            if pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL) != job
        }
    )
    if earlier:
        return (
            conditions.AWAITING_PREVIOUS_JOB,
            f"the pods of Job {earlier[0]} (an earlier spec or model revision) are still stopping; they write to "
            "the same output",
        )
    return None


# ---- 4. apply --------------------------------------------------------------------------------------------


def start_job(
    batch: dict[str, Any],
    model: dict[str, Any],
    revision: str,
    settings: Settings,
    cluster: Cluster,
    s3: S3Secret | None = None,
) -> dict[str, Any]:
    """The batch's Job, created (or found: made by an earlier reconcile), its worker on the gateway's image.
    Raises ``Refused``."""
    url = model["status"]["url"]
    return cluster.create(render_job(batch, url, revision, settings.gateway_image, s3, settings.image_pull_secrets))


# ---- the reconcile ----------------------------------------------------------------------------------------


def _outcome(batch: dict[str, Any], report: batch_policy.BatchReport, scope: str = "full") -> Outcome:
    complete = report.complete
    result = "ready" if complete.status == "True" else "progressing"
    events = batch_policy.transition_events(batch.get("status") or {}, report.conditions)
    return Outcome(complete, report.fields, result, conditions=report.conditions, scope=scope, events=events)


def _waiting(batch: dict[str, Any], reason: str, message: str) -> Outcome:
    return _outcome(batch, batch_policy.waiting(reason, message), scope="none")


def sync(
    batch: dict[str, Any], settings: Settings, logger: Logger, seen: SeenChildren | None = None, *, cluster: Cluster
) -> Outcome:
    """``seen``: where the Job read is recorded, so the watch's copy of the same Job costs no reconcile."""
    namespace, spec = batch["metadata"]["namespace"], batch["spec"]
    job = finished_job(batch, cluster)
    if job is None:
        model = cluster.reward_models(namespace, [spec["rewardModel"]])[spec["rewardModel"]]
        if (gap := model_gap(batch, model)) is not None:
            return _waiting(batch, conditions.REWARD_MODEL_NOT_SERVING, gap)
        assert model is not None
        revision = model_revision(model)
        name = job_name(batch, revision)
        job = cluster.get(JOB_API_VERSION, "Job", name, namespace)
        if job is None:
            s3 = s3_secret(batch, cluster) if "s3SecretName" in spec else None
            if isinstance(s3, str):
                return _waiting(batch, conditions.S3_SECRET_NOT_FOUND, s3)
            if (held := held_back(batch, name, cluster)) is not None:
                return _waiting(batch, *held)
            try:
                job = start_job(batch, model, revision, settings, cluster, s3)
            except Refused as refused:
                return _waiting(batch, conditions.APPLY_FAILED, f"Job {name}: {refused}")
            logger.info("created Job %s for %s shards (model revision %s)", name, spec["shards"], revision)
    if seen is not None:
        seen.record(job)
    pods = cluster.list_pods(namespace, {JOB_NAME_LABEL: job["metadata"]["name"]})
    return _outcome(batch, batch_policy.report(job, pods, spec["shards"], batch.get("status") or {}))
