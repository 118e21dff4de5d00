"""A RewardBatch's conditions and status, decided from its Job and the Job's pods as the API serves them.

The Job says which shards finished and which failed (``completedIndexes``, ``failedIndexes``, its conditions);
each shard's pod says what it did in its termination message, which the worker writes as one JSON object: its
figures when it finished (rows, scored, failed, failures by reason, rows scored twice after a lost pod, the
model that scored), or its last words when it stopped. Each finished shard's figures are kept in the status
(``finishedShards``) once read, so a pod deleted after its shard finished takes nothing with it.

Complete is the batch's main condition (``kubectl wait --for=condition=Complete``), with Admitted, Running and
Failed beside it; each of those three moving to True is one event (the runner posts Complete's transitions).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..api import conditions
from ..api.names import BATCH_WORKER_CONTAINER
from .pods import tail
from .status import Condition

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class ShardResult:
    """What one shard's pod said when it ended."""

    index: int
    succeeded: bool
    finished_at: str | None
    figures: Mapping[str, Any] = field(default_factory=dict)  # the worker's JSON (an ``error`` when it stopped)
    exit_code: int | None = None
    reason: str | None = None  # Kubernetes' termination reason (Error, OOMKilled, ...)


@dataclass(frozen=True)
class BatchReport:
    """What a reconcile writes: Complete, the other conditions, the status fields, the events."""

    complete: Condition
    conditions: tuple[Condition, ...]
    fields: dict[str, Any]
    events: tuple[tuple[str, str, str], ...] = ()


def shard_results(pods: Sequence[Mapping[str, Any]]) -> list[ShardResult]:
    """Each ended pod's result, oldest first (a shard's later pod speaks after its earlier ones)."""
    results = []
    for pod in pods:
        index = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
        terminated = _worker_termination(pod)
        if index is None or terminated is None or pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            continue
        results.append(
            ShardResult(
                int(index),
                pod["status"]["phase"] == "Succeeded",
                terminated.get("finishedAt"),
                _figures(terminated.get("message")),
                terminated.get("exitCode"),
                terminated.get("reason"),
            )
        )
    return sorted(results, key=lambda result: (result.finished_at or "", result.index))


def _worker_termination(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == BATCH_WORKER_CONTAINER:
            return (status.get("state") or {}).get("terminated")
    return None


def _figures(message: str | None) -> dict[str, Any]:
    """The worker's JSON, or its message as the error where it is not JSON (a process killed mid-write)."""
    try:
        figures = json.loads(message or "")
    except ValueError:
        return {"error": tail(message)} if message else {}
    return figures if isinstance(figures, dict) else {}


def index_set(text: str | None) -> set[int]:
    """A Job's ``completedIndexes`` or ``failedIndexes`` ("1,3-5") as a set."""
    indexes: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        indexes.update(range(int(first), int(last or first) + 1))
    return indexes


def _job_condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next(
        (
            condition
            for condition in job.get("status", {}).get("conditions") or []
            if condition.get("type") == kind and condition.get("status") == "True"
        ),
        None,
    )


def _progress(rows: Mapping[str, int], finished: int, shards: int) -> str:
    """Rows of the finished shards (a shard's figures come with its end), and the shards that ended."""
    return f"{rows['total']} rows ({rows['failed']} failed), {finished}/{shards} shards"


def shard_record(result: ShardResult) -> dict[str, Any]:
    """What the status keeps of a finished shard (``status.finishedShards``): its figures outlive its pod."""
    said = result.figures
    record: dict[str, Any] = {
        "index": result.index,
        "rows": int(said.get("rows", 0)),
        "scored": int(said.get("scored", 0)),
        "failed": int(said.get("failed", 0)),
        # rows its run scored again after an earlier pod of the shard was lost (the run that went on counts them)
        "scoredTwice": int(said.get("scored_twice", 0)),
    }
    if failures := said.get("failures"):
        record["failures"] = {str(reason): int(count) for reason, count in sorted(failures.items())}
    if result.finished_at:
        record["finishedAt"] = result.finished_at
    if model := model_of(said):
        record["model"] = model
    return record


def model_of(figures: Mapping[str, Any]) -> dict[str, Any]:
    """The first model a worker names (name, revision, digest), as the status shows it."""
    for identity in figures.get("models") or []:
        return {
            key: identity[source]
            for key, source in (("name", "model"), ("revision", "revision"), ("digest", "digest"))
            if identity.get(source) is not None
        }
    return {}


def finished_shards(
    job: Mapping[str, Any], results: Sequence[ShardResult], previous: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each finished shard's record: its succeeded pod's figures, else (the pod deleted since: a person, a node
    gone) the record the status kept of it, for this Job."""
    succeeded = index_set((job.get("status") or {}).get("completedIndexes"))
    kept = previous.get("finishedShards") or [] if previous.get("job") == job["metadata"]["name"] else []
    records = {record["index"]: record for record in kept if record.get("index") in succeeded}
    for result in results:  # oldest first: a shard's later pod speaks last
        if result.succeeded and result.index in succeeded and "rows" in result.figures:
            records[result.index] = shard_record(result)
    return [records[index] for index in sorted(records)]


def figures(
    job: Mapping[str, Any], results: Sequence[ShardResult], shards: int, previous: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The status fields: shards, rows, failures, the model, the rate, the times, and the finished shards' records
    (``previous``: the status as stored, whose records stand in for pods deleted since)."""
    previous = previous or {}
    status = job.get("status") or {}
    succeeded = index_set(status.get("completedIndexes"))
    failed = index_set(status.get("failedIndexes"))
    records = finished_shards(job, results, previous)
    rows = Counter(total=0, scored=0, failed=0, scoredTwice=0)
    failures: Counter = Counter()
    for record in records:
        rows["total"] += record["rows"]
        rows["scored"] += record["scored"]
        rows["failed"] += record["failed"]
        rows["scoredTwice"] += record["scoredTwice"]
        failures.update(record.get("failures") or {})
    model = next((record["model"] for record in records if record.get("model")), None)
    if model is None and previous.get("job") == job["metadata"]["name"]:
        model = previous.get("model")
    fields: dict[str, Any] = {
        "shards": {
            "total": shards,
            "succeeded": len(succeeded),
            "failed": len(failed),
            "active": int(status.get("active") or 0),
        },
        "rows": dict(rows),
        "progress": _progress(rows, len(succeeded) + len(failed), shards),
    }
    if records:
        fields["finishedShards"] = records
    if failures:
        fields["failures"] = dict(sorted(failures.items()))
    if model:
        fields["model"] = model
    if start := status.get("startTime"):
        fields["startTime"] = start
        ends = [record["finishedAt"] for record in records if record.get("finishedAt")]
        if ends and rows["total"]:
            seconds = (_time(max(ends)) - _time(start)).total_seconds()
            if seconds > 0:
                fields["rowsPerSecond"] = round(rows["total"] / seconds, 2)
    if end := status.get("completionTime"):
        fields["completionTime"] = end
    return fields


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _failed_message(job: Mapping[str, Any], results: Sequence[ShardResult]) -> str:
    """The failed shards, each with its last pod's words."""
    failed = sorted(index_set((job.get("status") or {}).get("failedIndexes")))
    last = {result.index: result for result in results if not result.succeeded}
    parts = []
    for index in failed[:5]:
        result = last.get(index)
        if result is None:
            parts.append(f"shard {index}")
            continue
        said = result.figures.get("error") or f"{result.reason or 'terminated'}, exit code {result.exit_code}"
        parts.append(f"shard {index}: {said}")
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    job_failed = _job_condition(job, "Failed")
    if not failed and job_failed is not None:
        return f"the Job failed: {job_failed.get('reason')}: {job_failed.get('message', '')}".rstrip(": ")
    return "; ".join(parts) + more


def waiting(reason: str, message: str) -> BatchReport:
    """No Job runs yet: Complete Unknown and Admitted False, both with why."""
    return BatchReport(
        Condition(conditions.COMPLETE, "Unknown", reason, message),
        (
            Condition(conditions.ADMITTED, "False", reason, message),
            Condition(conditions.RUNNING, "False", conditions.NO_ACTIVE_SHARDS, "no Job runs yet"),
            Condition(conditions.FAILED, "False", conditions.NO_FAILED_SHARDS, "no shard has failed"),
        ),
        {"phase": "Pending"},
    )


def report(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], shards: int, previous: Mapping[str, Any] | None = None
) -> BatchReport:
    """The batch's conditions and status from its Job, the Job's pods and (``previous``) the status as stored."""
    name = job["metadata"]["name"]
    results = shard_results(pods)
    fields = {"job": name, **figures(job, results, shards, previous)}
    status = job.get("status") or {}
    suspended = bool(job.get("spec", {}).get("suspend"))
    active = int(status.get("active") or 0)
    any_failed = bool(index_set(status.get("failedIndexes"))) or _job_condition(job, "Failed") is not None
    done = _job_condition(job, "Complete")
    ended_failed = _job_condition(job, "Failed")
    progress = fields["progress"]
    if suspended and done is None and ended_failed is None:
        admitted = Condition(
            conditions.ADMITTED,
            "False",
            conditions.AWAITING_ADMISSION,
            f"Job {name} waits suspended for Kueue to admit it (spec.queueName)",
        )
        complete = Condition(conditions.COMPLETE, "Unknown", conditions.AWAITING_ADMISSION, admitted.message)
        phase = "Queued"
    else:
        admitted = Condition(conditions.ADMITTED, "True", conditions.JOB_ADMITTED, f"Job {name} runs {shards} shards")
        if done is not None:
            message = f"every shard scored: {progress}"
            complete = Condition(conditions.COMPLETE, "True", conditions.SHARDS_SUCCEEDED, message)
            phase = "Complete"
        elif ended_failed is not None:
            message = f"{progress}; {_failed_message(job, results)}"
            complete = Condition(conditions.COMPLETE, "False", conditions.SHARDS_FAILED, message)
            phase = "Failed"
        else:
            complete = Condition(conditions.COMPLETE, "Unknown", conditions.SCORING, progress)
            phase = "Running"
    running = (
        Condition(conditions.RUNNING, "True", conditions.SHARDS_ACTIVE, f"{active} shards being scored")
        if active and phase == "Running"
        else Condition(conditions.RUNNING, "False", conditions.NO_ACTIVE_SHARDS, "no shard is being scored")
    )
    failed = (
        Condition(conditions.FAILED, "True", conditions.SHARD_FAILED, _failed_message(job, results))
        if any_failed
        else Condition(conditions.FAILED, "False", conditions.NO_FAILED_SHARDS, "no shard has failed")
    )
    return BatchReport(complete, (admitted, running, failed), {"phase": phase, **fields})


def transition_events(current: Mapping[str, Any], found: Sequence[Condition]) -> tuple[tuple[str, str, str], ...]:
    """One event for each of Admitted, Running and Failed that turns True now (a Warning for Failed)."""
    before = {c.get("type"): c.get("status") for c in current.get("conditions") or []}
    return tuple(
        ("Warning" if condition.type == conditions.FAILED else "Normal", condition.reason, condition.message)
        for condition in found
        if condition.status == "True" and before.get(condition.type) != "True"
    )
