"""Scores one shard of a dataset through the reward gateway, in chunks, each committed with a checkpoint.

The input is read as a stream of groups (adjacent rows with one group key; a row without one is a group of
its own); group number ``g`` belongs to shard ``g % shards``, so every worker reads the same file and keeps
its own groups, with no index to build. A shard's groups are cut into chunks of at least ``chunk_rows`` rows,
never inside a group (its best-of-N selection needs all of it). Chunks are scored one after another, the calls
of one chunk concurrently (at most ``max_in_flight``), a group in one call (split at ``max_items_per_call``),
so a worker killed at any moment scores at most the chunk it was in again; which chunk that was is written in
the checkpoint before its first call, so a restart counts the rows it scores twice.

The same model scores a shard from start to end: a run that finds a checkpoint or a finished manifest first
asks the gateway which model answers (one call, for the shard's first row). The same model: the run goes on
from the checkpoint, or does nothing where the shard is finished. Another (a new revision, digest or judge):
the shard's output is dropped and scored again, as two models' scales must never mix in one output.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from reward_gateway_client.batch import layout, store
from reward_gateway_client.batch.errors import BatchError
from reward_gateway_client.batch.rows import INVALID, Fields, Row, read_rows
from reward_gateway_client.batch.selection import Selection
from reward_gateway_client.http import (
    AsyncRewardClient,
    GatewayError,
    GatewaySettings,
    ItemFailure,
    Outcome,
    async_http_client,
)

# The identity fields that make a model another: not its generation (any edit of the RewardModel's spec moves
# it, replicas included) nor its role.
IDENTITY_KEYS = ("model", "revision", "digest", "judge")

__all__ = ["BatchError", "Job", "ShardWorker", "Summary"]


@dataclass(frozen=True)
class Job:
    """One shard's work: what to read, where to write, and how. ``input`` is a file, an ``s3://bucket/key``
    object or an ``https://`` file, in ``input_format`` (``jsonl`` or ``parquet``), ``output`` a directory or an
    ``s3://bucket/prefix`` (``store``)."""

    input: Path | str
    output: Path | str
    fields: Fields = field(default_factory=Fields)
    selection: Selection = field(default_factory=Selection)
    shard: int = 0
    shards: int = 1
    chunk_rows: int = 256
    max_in_flight: int = 8
    max_items_per_call: int = 64
    input_format: str = "jsonl"

    def settings_digest(self) -> str:
        """What decides the output row for row (not how many calls fly at once)."""
        decided = {
            "fields": asdict(self.fields),
            "selection": asdict(self.selection),
            "shard": self.shard,
            "shards": self.shards,
            "chunk_rows": self.chunk_rows,
            "max_items_per_call": self.max_items_per_call,
        }
        if self.input_format != "jsonl":  # named only where it is not the default: older outputs stay this batch's
            decided["input_format"] = self.input_format
        return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()


@dataclass
class Summary:
    """A shard's figures: its manifest's content, and this run's."""

    rows: int = 0
    scored: int = 0
    failed: int = 0
    failures: Counter = field(default_factory=Counter)
    selected: int = 0
    chunks: int = 0
    models: Counter = field(default_factory=Counter)  # rows per model identity (its JSON)
    # this run's: rows scored now, and how many of them an earlier run had started on (the chunk it was in)
    scored_now: int = 0
    scored_twice: int = 0
    seconds: float = 0.0
    nothing_to_do: bool = False

    def manifest(self, job: Job, input_name: str, input_digest: str) -> dict[str, Any]:
        return {
            "input": {"path": input_name, "sha256": input_digest, "format": job.input_format},
            "shard": job.shard,
            "shards": job.shards,
            "rows": self.rows,
            "scored": self.scored,
            "failed": self.failed,
            "failures": dict(sorted(self.failures.items())),
            "selected": self.selected if job.selection.active else None,
            "chunks": self.chunks,
            "models": [{"identity": json.loads(key), "rows": rows} for key, rows in sorted(self.models.items())],
        }


def identity_key(identity: dict[str, Any] | None) -> dict[str, Any] | None:
    if identity is None:
        return None
    return {key: identity[key] for key in IDENTITY_KEYS if identity.get(key) is not None}


def adjacent_groups(rows: Iterable[Row]) -> Iterator[list[Row]]:
    """The runs of adjacent rows with one group key. A key seen again after its run ended makes the later
    run's rows invalid: a group's rows must be adjacent, or its best-of-N would see part of it."""
    ended: dict[str, int] = {}
    run: list[Row] = []
    for row in rows:
        if run and row.group != run[-1].group:
            ended.setdefault(run[-1].group, run[-1].position)
            yield run
            run = []
        if row.group in ended:
            problem = f"group {row.group!r} ended at row {ended[row.group]}: the rows of a group must be adjacent"
            row = replace(row, item=None, problem=problem)
        run.append(row)
    if run:
        yield run


def shard_chunks(job: Job, source: store.Input) -> Iterator[list[list[Row]]]:
    """This shard's chunks, each a list of whole groups, the same on every run over the same input."""
    chunk: list[list[Row]] = []
    size = 0
    for number, group in enumerate(adjacent_groups(read_rows(source.lines(), job.fields))):
        if number % job.shards != job.shard:
            continue
        chunk.append(group)
        size += len(group)
        if size >= job.chunk_rows:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class ShardWorker:
    def __init__(self, job: Job, settings: GatewaySettings, log: TextIO = sys.stderr):
        self.job = job
        self.client = AsyncRewardClient(settings)
        self.log = log
        # where it reads and writes (a path, or S3); nothing is read or written until it runs
        self.input = store.open_input(job.input, job.input_format)
        self.output = store.open_output(job.output, job.shard, job.shards)

    async def run(self) -> Summary:
        """Scores what is left of the shard; raises BatchError where it cannot go on."""
        job, started = self.job, time.monotonic()
        digest = self.input.digest()
        async with async_http_client(self.client.settings.timeout_s) as http:
            checkpoint = await self._checkpoint(http, digest)
            summary = self._summary_of(checkpoint)
            if checkpoint.get("done"):
                summary.nothing_to_do = True
                self._say(f"shard {job.shard}: finished already by the same model; nothing to do")
                return summary
            done = checkpoint.get("chunks", 0)
            for number, chunk in enumerate(shard_chunks(job, self.input)):
                if number < done:
                    continue
                twice = checkpoint.get("scoring") == number
                checkpoint = {**checkpoint, "scoring": number}
                self.output.write_json(layout.CHECKPOINT, checkpoint)
                rows = await self._score(http, chunk)
                self.output.write_part(number, rows)
                self._count(summary, rows)
                summary.chunks = number + 1
                summary.scored_now += len(rows)
                summary.scored_twice += len(rows) if twice else 0
                checkpoint = {**self._checkpoint_of(summary, digest), "scoring": None}
                self.output.write_json(layout.CHECKPOINT, checkpoint)
                self._progress(summary, started)
        summary.seconds = time.monotonic() - started
        self.output.write_json(layout.MANIFEST, summary.manifest(job, self.input.name, digest))
        self.output.write_json(layout.CHECKPOINT, {**checkpoint, "done": True})
        return summary

    async def _checkpoint(self, http: Any, digest: str) -> dict[str, Any]:
        """The checkpoint to go on from: the stored one where the same input, settings and model made it; an
        empty one where there is none, or where another model answers now (the shard's output dropped)."""
        fresh = {"input": digest, "settings": self.job.settings_digest(), "chunks": 0}
        stored = self.output.read_json(layout.CHECKPOINT)
        if stored is None:
            return fresh
        if stored.get("input") != digest or stored.get("settings") != self.job.settings_digest():
            raise BatchError(
                f"{self.output.name} holds another batch's output (its input or settings differ): "
                "write to an empty directory or prefix, or remove that one",
                retry=False,
            )
        now = await self._answering_model(http)
        if now is None or stored.get("model") in (None, now):
            return stored
        self._say(f"shard {self.job.shard}: the model changed ({stored['model']} -> {now}); scoring it again")
        self.output.clear()
        return fresh

    async def _answering_model(self, http: Any) -> dict[str, Any] | None:
        """Which model answers now: one call for the shard's first row that has an item."""
        for chunk in shard_chunks(self.job, self.input):
            for group in chunk:
                for row in group:
                    if row.item is not None:
                        answer = await self._call(http, [row.item])
                        return identity_key(answer.identity)
        return None

    async def _score(self, http: Any, chunk: list[list[Row]]) -> list[dict[str, Any]]:
        """One chunk's output rows: its groups' calls at most ``max_in_flight`` at once."""
        limit = asyncio.Semaphore(self.job.max_in_flight)

        async def group_rows(group: list[Row]) -> list[dict[str, Any]]:
            async with limit:
                return await self._group(http, group)

        groups = await asyncio.gather(*(group_rows(group) for group in chunk))
        return [row for rows in groups for row in rows]

    async def _group(self, http: Any, group: list[Row]) -> list[dict[str, Any]]:
        outcomes: list[Outcome] = [ItemFailure(0, INVALID, row.problem or "", False) for row in group]
        models: list[dict[str, Any] | None] = [None] * len(group)
        sent = [i for i, row in enumerate(group) if row.item is not None]
        step = self.job.max_items_per_call
        for start in range(0, len(sent), step):
            positions = sent[start : start + step]
            for position, outcome, model in await self._answered(http, [group[i].item for i in positions]):
                outcomes[positions[position]], models[positions[position]] = outcome, model
        rewards = [None if isinstance(outcome, ItemFailure) else outcome for outcome in outcomes]
        chosen = self.job.selection.of_group(rewards) if self.job.selection.active else None
        return [
            _output_row(row, outcome, model, None if chosen is None else chosen[i])
            for i, (row, outcome, model) in enumerate(zip(group, outcomes, models, strict=True))
        ]

    async def _answered(self, http: Any, items: list[Any]) -> list[tuple[int, Outcome, dict[str, Any] | None]]:
        """Each item's outcome and the model that gave it. A call the gateway refuses as a whole for its input
        (4xx) is sent item by item, so that only the item at fault fails."""
        try:
            answer = await self._call(http, items)
        except GatewayError as error:  # a 4xx: _call has made the rest BatchError
            if len(items) == 1:
                return [(0, ItemFailure(0, INVALID, error.message, False), None)]
            answered = []
            for position, item in enumerate(items):
                ((_, outcome, model),) = await self._answered(http, [item])
                answered.append((position, outcome, model))
            return answered
        model = identity_key(answer.identity)
        return [(position, outcome, model) for position, outcome in enumerate(answer.outcomes)]

    async def _call(self, http: Any, items: list[Any]) -> Any:
        try:
            return await self.client.answer(items, http)
        except GatewayError as error:
            if error.status is not None and 400 <= error.status < 500:
                raise
            raise BatchError(f"the reward gateway failed: {error}", retry=True) from None

    def _summary_of(self, checkpoint: dict[str, Any]) -> Summary:
        counted = checkpoint.get("counted") or {}
        return Summary(
            rows=counted.get("rows", 0),
            scored=counted.get("scored", 0),
            failed=counted.get("failed", 0),
            failures=Counter(counted.get("failures", {})),
            selected=counted.get("selected", 0),
            chunks=checkpoint.get("chunks", 0),
            models=Counter(counted.get("models", {})),
        )

    def _checkpoint_of(self, summary: Summary, digest: str) -> dict[str, Any]:
        first_model = next(iter(summary.models), None)
        return {
            "input": digest,
            "settings": self.job.settings_digest(),
            "chunks": summary.chunks,
            "model": json.loads(first_model) if first_model else None,
            "counted": {
                "rows": summary.rows,
                "scored": summary.scored,
                "failed": summary.failed,
                "failures": dict(summary.failures),
                "selected": summary.selected,
                "models": dict(summary.models),
            },
        }

    @staticmethod
    def _count(summary: Summary, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            summary.rows += 1
            if row["failure"] is None:
                summary.scored += 1
            else:
                summary.failed += 1
                summary.failures[row["failure"]["reason"]] += 1
            summary.selected += bool(row.get("selected"))
            if row["model"] is not None:
                summary.models[json.dumps(row["model"], sort_keys=True)] += 1

    def _progress(self, summary: Summary, started: float) -> None:
        rate = summary.scored_now / max(time.monotonic() - started, 1e-9)
        self._say(
            f"shard {self.job.shard}: chunk {summary.chunks - 1} committed, {summary.rows} rows "
            f"({summary.failed} failed), {rate:.1f} rows/s this run"
        )

    def _say(self, line: str) -> None:
        print(line, file=self.log, flush=True)


def _output_row(row: Row, outcome: Outcome, model: dict[str, Any] | None, selected: bool | None) -> dict[str, Any]:
    failure = (
        {"reason": outcome.reason, "message": outcome.message, "retry": outcome.retry}
        if isinstance(outcome, ItemFailure)
        else None
    )
    out: dict[str, Any] = {
        "row": row.position,
        "id": row.id,
        "reward": None if failure is not None else outcome,
        "failure": failure,
        "model": model,
    }
    if selected is not None:
        out["selected"] = selected
    return out
