"""The machinery every kind's controller shares.

A kind brings only its sync function: read what it needs, render, apply, and
say what Ready is (an :class:`Outcome`). The runner does the rest, the same way
for every kind: one reconcile at a time per object (locks dropped when the
object goes), API errors mapped to a calm retry, the status written only when it
changed, one event per Ready transition, and the metrics.

It also keeps the newest copy of each object the watch delivered, so a reconcile
reads no object from the API server: kopf hands every watch event to
:meth:`Runner.remember` before any handler runs. The status it wrote last stands in
for the stored one until the watch brings that write back, so a reconcile that
starts in between neither writes it twice nor posts its event twice. Likewise a
changed child's copy from the watch is decided from as delivered unless it may be
older than the version a decision last read of that child (an Outcome's
``decided_from``, see :meth:`Runner._copy_is_current`); such a copy is read again, so
an older copy never takes Ready back (and announces it again).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from ..api.names import MANAGED_BY, owner_label
from ..cluster import Cluster, ClusterError, Logger
from ..metrics import OperatorMetrics
from ..policy import status
from .seen import SeenChildren

# The versions of each child kept as delivered by the watch: a decision's read is usually among the
# last (the echo of its apply, or a write the watch delivered just before the read).
DELIVERED_KEPT = 4

# Seconds before kopf retries a reconcile that hit an API error (5xx,
# throttling, conflicts): soon, but without a retry storm.
RETRY_DELAY = 10


ChildKey = tuple[str, str, str]  # apiVersion, kind, name (in the owner's namespace)


def child_key(child: dict[str, Any]) -> ChildKey:
    return child.get("apiVersion", ""), child.get("kind", ""), child["metadata"]["name"]


def child_version(child: dict[str, Any]) -> tuple[ChildKey, str] | None:
    """``child``'s entry for :attr:`Outcome.decided_from` (None: no resourceVersion to tell copies by)."""
    version = child["metadata"].get("resourceVersion")
    return None if version is None else (child_key(child), version)


@dataclass(frozen=True)
class Outcome:
    """What one sync decided."""

    ready: status.Condition
    # The kind's own status fields (url, replicas, ...): stored ones missing here are cleared.
    fields: dict[str, Any] = field(default_factory=dict)
    # For reward_operator_reconcile_total: ready | progressing | invalid | apply_failed.
    result: str = "progressing"
    # Conditions besides Ready (a rollout's), set as given; types in removed_conditions are dropped.
    conditions: tuple[status.Condition, ...] = ()
    removed_conditions: tuple[str, ...] = ()
    # For reward_operator_reconcile_total: full (every child rendered and applied) | child (only the
    # changed InferenceService checked, the spec as last reconciled) | held (all but the InferenceService,
    # held for its model cache) | none (nothing applied).
    scope: str = "full"
    # Events the sync decided on (type, reason, message): posted once the status is written, so a
    # reconcile that fails to write posts none, and the next one, deciding from the same status, does.
    events: tuple[tuple[str, str, str], ...] = ()
    # The children this decision read, each with the resourceVersion read (an apply's answer, a read, the
    # watch's copy; see :func:`child_version`): a later copy of one of them that may be older is read again.
    decided_from: tuple[tuple[ChildKey, str], ...] = ()


# (the object, defaults applied; its logger; the child whose change triggered this reconcile,
# as the watch delivered it, or None) -> Outcome
Sync = Callable[[dict[str, Any], Logger, dict[str, Any] | None], Outcome]


@dataclass
class _Record:
    """What the runner keeps of one object while it exists (or while a reconcile of it runs)."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one reconcile at a time
    latest: dict[str, Any] | None = None  # the newest copy the watch delivered
    written: dict[str, Any] | None = None  # the status this runner wrote, until the watch delivers it back
    # per child: the last few resourceVersions the watch delivered of it (newest last)
    delivered: dict[ChildKey, tuple[str, ...]] = field(default_factory=dict)
    # per child: the version the last decision read, until the watch delivers it
    awaited: dict[ChildKey, str] = field(default_factory=dict)


class Runner:
    def __init__(
        self,
        api_version: str,
        kind: str,
        sync: Sync,
        prepare: Callable[[dict[str, Any]], dict[str, Any]],
        metrics: OperatorMetrics,
        cluster: Cluster,
    ):
        self.api_version = api_version
        self.cluster = cluster
        self.kind = kind
        self.sync = sync
        # Fills schema defaults: the API server does it too, but not for objects
        # stored before a default existed.
        self.prepare = prepare
        self.metrics = metrics
        self._records: dict[tuple[str, str], _Record] = {}  # (namespace, name) -> what is kept of it
        self._guard = threading.Lock()  # over _records and what each record holds but its lock

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._records.setdefault((namespace, name), _Record()).lock

    def _current(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as it stands: the watch's newest copy (read from the API server only when the
        watch has not delivered it yet), with the status this runner wrote last."""
        with self._guard:
            record = self._records.get((namespace, name))
            found, written = (record.latest, record.written) if record is not None else (None, None)
        if found is None:
            found = self.cluster.get(self.api_version, self.kind, name, namespace)
        if found is not None and written is not None:
            found = {**found, "status": written}
        return found

    def reconcile(self, namespace: str, name: str, logger: Logger, changed_child: dict[str, Any] | None = None) -> str:
        """Bring one object's children and status in line with its spec; returns the result.

        ``changed_child``: the child (as the watch delivered it) whose change is the reason for this
        reconcile; the kind's sync may then skip what that change cannot have affected."""
        kind = self.kind
        key = (namespace, name)
        with self._lock(namespace, name), self.metrics.duration.labels(kind=kind).time():
            try:
                found = self._current(namespace, name)
                if found is None or found["metadata"].get("deletionTimestamp"):
                    return "deleted"
                found = self.prepare(found)
                if changed_child is not None and not self._copy_is_current(key, changed_child):
                    changed_child = _as_stored(self.cluster, changed_child, namespace)  # None: gone, restored
                outcome = self.sync(found, logger, changed_child)
                self._record_decision(key, outcome.decided_from)
                self._write_status(found, outcome, logger)
            except ClusterError as error:
                self.metrics.errors.labels(kind=kind).inc()
                self.metrics.reconciles.labels(kind=kind, result="error", scope="none").inc()
                raise kopf.TemporaryError(str(error), delay=RETRY_DELAY) from error
        self.metrics.reconciles.labels(kind=kind, result=outcome.result, scope=outcome.scope).inc()
        return outcome.result

    def remember_child(self, namespace: str, owner: str, child: dict[str, Any]) -> None:
        """A watch event of a child of ``owner``: every one, also those no reconcile follows (the echo
        of our own apply), as the watch delivered them, in order."""
        version = child["metadata"].get("resourceVersion")
        if version is None:
            return
        copied = child_key(child)
        with self._guard:
            record = self._records.get((namespace, owner))
            if record is None:
                return  # an owner not known (yet, or any more): nothing of it to compare with
            record.delivered[copied] = (*record.delivered.get(copied, ())[1 - DELIVERED_KEPT :], version)
            if record.awaited.get(copied) == version:
                del record.awaited[copied]  # the watch has caught up with the decision's read

    def _copy_is_current(self, key: tuple[str, str], child: dict[str, Any]) -> bool:
        """Whether the watch's copy of a changed child may be decided from as delivered: unless the last
        decision read a version of it that the watch has not delivered yet.

        kopf delivers an object's copies in order, each newer than the last; so once the version a
        decision read (an apply's answer, a read from another trigger) has been delivered, every later
        copy is at least as new. Before that, a copy may be older than the read (its handler waited for
        the object's lock, or in kopf's queue) and would take Ready back, and forward again on the next
        event, one event each way (the demo's second InferenceServiceReady): it is read again. A copy
        that is not the version awaited may also be newer (kopf's batching skipped the awaited one):
        resourceVersions are compared only for equality, so that costs a read too."""
        copied, version = child_key(child), child["metadata"].get("resourceVersion")
        with self._guard:
            record = self._records.get(key)
            if record is None or copied not in record.awaited:
                return True
            if record.awaited[copied] != version:
                return False
            del record.awaited[copied]
            return True

    def _record_decision(self, key: tuple[str, str], decided_from: tuple[tuple[ChildKey, str], ...]) -> None:
        """The versions a decision read: a later copy of one is decided from only once the watch has
        delivered that version (:meth:`_copy_is_current`)."""
        if not decided_from:
            return
        with self._guard:
            record = self._records.get(key)
            if record is None:  # forgotten meanwhile
                return
            for child, version in decided_from:
                if version in record.delivered.get(child, ()):
                    record.awaited.pop(child, None)  # copies after a delivered version are newer
                else:
                    record.awaited[child] = version

    def _write_status(self, obj: dict[str, Any], outcome: Outcome, logger: Logger) -> None:
        metadata = obj["metadata"]
        current = obj.get("status") or {}
        now = status.now_rfc3339()
        desired = status.desired_status(current, metadata["generation"], outcome.ready, outcome.fields, now)
        desired["conditions"] = status.merge_conditions(
            desired["conditions"], outcome.conditions, outcome.removed_conditions, metadata["generation"], now
        )
        if desired != current:
            key = (metadata["namespace"], metadata["name"])
            with self._guard:
                if (record := self._records.get(key)) is not None:
                    record.written = None  # if the write fails, the stored status is unknown
            stored = self.cluster.patch_status(
                self.api_version, self.kind, metadata["namespace"], metadata["name"],
                status.status_patch(current, desired),
            )  # fmt: skip
            with self._guard:
                if (record := self._records.get(key)) is not None:  # not forgotten meanwhile
                    record.written = stored.get("status") or {}
        ready = outcome.ready
        if status.ready_transition(current, ready):
            logger.info("Ready=%s (%s): %s", ready.status, ready.reason, ready.message)
            self.cluster.post_event(obj, status.event_type(ready), ready.reason, ready.message)
        for event_type, reason, message in outcome.events:
            logger.info("%s: %s", reason, message)
            self.cluster.post_event(obj, event_type, reason, message)
        self.metrics.objects.record_ready(self.kind, metadata["namespace"], metadata["name"], ready.status)

    def remember(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """A watch event: keep the object as the newest copy, and record how far its status lags the spec."""
        generation = body.get("metadata", {}).get("generation") or 0
        delivered_status = body.get("status") or {}
        observed = delivered_status.get("observedGeneration") or 0
        metadata = body.get("metadata") or {}
        if "managedFields" in metadata:
            # kept for every object while it exists, and never read: the field managers' bookkeeping
            # is often the largest part of a body
            body = {**body, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
        with self._guard:
            record = self._records.setdefault((namespace, name), _Record())
            record.latest = body
            if record.written == delivered_status:
                record.written = None  # the watch has caught up with our last write
        self.metrics.objects.record_generation_lag(self.kind, namespace, name, generation, observed)

    def known(self, namespace: str) -> list[dict[str, Any]]:
        """The objects of ``namespace`` the watch has delivered, as last delivered (for reconciling the
        ones another object's change concerns without listing them)."""
        with self._guard:
            return [
                record.latest
                for (ns, _), record in self._records.items()
                if ns == namespace and record.latest is not None
            ]

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop what is kept of it (its lock too) and its metric series.

        Under the object's lock, so a reconcile that read it just before the
        deletion finishes (and records) first and cannot outlive this."""
        with self._lock(namespace, name):
            self.metrics.objects.forget(self.kind, namespace, name)
            with self._guard:
                self._records.pop((namespace, name), None)


def _as_stored(cluster: Cluster, child: dict[str, Any], namespace: str) -> dict[str, Any] | None:
    """``child`` as the API server holds it now; None when it is gone (the sync then restores it)."""
    metadata = child["metadata"]
    stored = cluster.get(child["apiVersion"], child["kind"], metadata["name"], metadata.get("namespace", namespace))
    return None if stored is None else {**stored, "apiVersion": child["apiVersion"], "kind": child["kind"]}


def register_object_handlers(
    registry: kopf.OperatorRegistry,
    resource: tuple[str, str, str],
    runner: Runner,
    drift_interval: float,
    recheck_interval: float,
    id_prefix: str = "",
    recheck: Callable[[Any], bool] = lambda body: not status.settled(body),
    event_id: str = "object_event",
    deleted: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> None:
    """The handlers every kind has on its own objects.

    The watch's copy: every event of the object goes to :meth:`Runner.remember`, and its deletion to
    :meth:`Runner.forget` and then ``deleted`` (awaited with the last body), on the event loop. Not in
    kopf's thread pool: a sync handler would wait for a thread behind every queued reconcile, and the
    object's events with it; at N = 1000 that held back kopf's own patch for minutes, past its consistency
    wait, and kopf ran the create handler again. kopf's log lines name the handler by ``event_id`` (each
    kind keeps the id it had, which tests and readers of the logs know).

    The triggers, each running the same reconcile: the object made, changed or found at start-up; an
    hourly drift backstop (level-based: a missed watch event leaves nothing behind for long); and a short
    re-check only while the object is not settled (a gap outside the spec filled later, a refused apply,
    a reconcile an API server restart left undone, a pod's container failing): ``recheck``, which kopf
    stops once it is False, so settled objects wake nothing (a kind that reads its pods passes
    ``status.recheck``: also while not Ready for a reason its pods may change). Timer ids are kept per
    kind (``id_prefix``): kopf records a timer's state under its id."""

    async def object_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            await asyncio.to_thread(runner.forget, namespace, name)  # waits for the object's reconcile
            if deleted is not None:
                await deleted(dict(body))
        else:
            runner.remember(namespace, name, dict(body))  # a dict store under a lock held only briefly

    kopf.on.event(*resource, id=event_id, registry=registry)(object_event)

    reconcile = reconcile_handler(runner)
    for trigger in (kopf.on.resume, kopf.on.create, kopf.on.update):
        trigger(*resource, id=f"{id_prefix}changed", registry=registry)(reconcile)
    kopf.timer(
        *resource,
        id=f"{id_prefix}drift_backstop",
        interval=drift_interval,
        initial_delay=drift_interval,
        registry=registry,
    )(reconcile)
    kopf.timer(
        *resource,
        id=f"{id_prefix}recheck",
        interval=recheck_interval,
        initial_delay=recheck_interval,
        when=lambda body, **_: recheck(body),
        registry=registry,
    )(reconcile)


@dataclass(frozen=True)
class Owns:
    """A child kind a kind makes and watches (controller-runtime's ``Owns``): an event of a child labelled with
    its owner reconciles the owner, unless it changed nothing a reconcile reads (:mod:`.seen`); a deletion
    reconciles it at once, which restores the child."""

    resource: tuple[str, str, str, str]  # group, version, plural and kind (api/kserve.py's *_RESOURCE)
    handler_id: str  # kopf's id of the watch: its log lines name it (each kind keeps the one it had)
    # The reconcile decides from the changed child as the watch delivered it (Runner.remember_child, the
    # ``changed_child`` of a reconcile), and what it decided from is recorded here; otherwise the kind's sync
    # reads its children and records them itself.
    hand_over: bool = False


def register_owned(registry: kopf.OperatorRegistry, runner: Runner, seen: SeenChildren, owned: Sequence[Owns]) -> None:
    """One watch per owned kind, each served by :func:`child_event`."""
    for owns in owned:
        group, version, plural, _ = owns.resource
        kopf.on.event(
            group,
            version,
            plural,
            id=owns.handler_id,
            labels={**MANAGED_BY, owner_label(runner.kind): kopf.PRESENT},
            registry=registry,
        )(child_event(runner, seen, owns))


def child_event(runner: Runner, seen: SeenChildren, owns: Owns) -> Callable[..., None]:
    """The handler of an owned child's events, the same for every kind (in kopf's threads: it reconciles)."""
    owner_key = owner_label(runner.kind)

    def child_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        owner = labels[owner_key]
        name = body["metadata"]["name"]
        if event.get("type") == "DELETED":
            started = time.monotonic()
            seen.forget(namespace, name)  # first: the reconcile records the one it restores
            if runner.reconcile(namespace, owner, logger) != "deleted":
                logger.info("%s %s was deleted; restored in %.2fs", owns.resource[3], name, time.monotonic() - started)
            return
        child = dict(body)
        if owns.hand_over:
            runner.remember_child(namespace, owner, child)  # every copy: how far the watch got (see the runner)
        if seen.unchanged(child):
            return
        if not owns.hand_over:
            runner.reconcile(namespace, owner, logger)
            return
        runner.reconcile(namespace, owner, logger, changed_child=child)
        seen.record(child)

    return child_event


def reconcile_handler(runner: Runner) -> Callable[..., None]:
    """A kopf handler (a trigger or a timer of the object) that reconciles the object it is called for."""

    def reconcile(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
        runner.reconcile(namespace, name, logger)

    return reconcile
