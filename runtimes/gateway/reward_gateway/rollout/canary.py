"""A candidate reward model beside the stable one: shadow scoring and sticky splits (the canary rollout).

Two rules of reward models decide everything here. A request is scored by one
model: all of its items (every GRPO group of a batch) get one scale, never two,
because two scales mixed in one batch corrupt the advantages without any error.
And the trainer gets the stable model's scores unless a split hands its whole
request to the candidate.

Modes (REWARD_GATEWAY_CANARY_MODE):

- **shadow**: both models score every request at once; the trainer gets the
  stable model's answer; the candidate's scores are compared
  (reward_gateway.rollout.agreement) and dropped.
- **split**: a share of the requests (REWARD_GATEWAY_CANARY_PERCENT, or the file
  REWARD_GATEWAY_CANARY_PERCENT_FILE followed while the gateway runs:
  reward_gateway.config.share) are answered by the candidate, chosen by a hash of the
  request's sticky key (below). A request the candidate answers is also scored
  by the stable model in shadow, so agreement is still measured at every step of
  a progressive rollout: the stable model is sized for all of the traffic
  anyway, so this asks of it no more than before the rollout, while the
  candidate serves only its share. A request that stays
  on the stable model is scored by it alone.

The shadow call never holds the trainer's answer for long: once the answering
model has scored, the shadow call gets at most REWARD_GATEWAY_CANARY_SHADOW_WAIT_SECONDS
more, then it is cancelled (its connection closed) and counted as that model's
error. Cancelled rather than left to finish in the background: a background call
would hold the request's items and answers after the ASGI front released the
request's memory charge (reward_gateway.http.asgi), and a candidate too slow to keep
up would pile up calls; as errors it shows up where the operator looks. When
the answering model fails, the shadow call is cancelled at once and not counted
(it says nothing about its model), except in one case: a candidate that fails a
request a split gave it (unreachable, 5xx, timeout, refused the input) is
replaced by the stable model's scores for that whole request, waited for within
the stable model's own timeouts. The whole request is still scored by one
model, so no batch mixes scales, and a broken candidate cannot fail a training
job before the operator rolls it back.

Sticky key (REWARD_GATEWAY_CANARY_STICKY): `group` (the default) keys a request by
its first item's group (OpenRLHF: its first prompt), or by its bytes where it has
no group, so a request sent again is scored by the same model; `client` keys it
by the client's identity: the REWARD_GATEWAY_CANARY_CLIENT_HEADER header
(`X-Reward-Client`), else a hash of its Authorization header (never kept or
logged), else as `group`. A key picks the candidate when its bucket, a hash of
the candidate's name and the key into 0..9999, is below 100 x the percent. So:

- the choice is deterministic and spread evenly: over N requests with distinct
  keys the candidate's count is binomial(N, p), within 3 sqrt(N p (1 - p)) of
  N p in 99.7 % of draws (keys repeat by design, so the share is per key, not
  per request);
- it is monotone in the percent: a key on the candidate at 10 % stays there at
  25 %, so progressive steps only move keys from the stable model to the
  candidate, and a rollback to 0 moves them all back;
- keyed by the candidate's name: each rollout draws its own keys, so the same
  clients are not always the first to meet a new model.

A new share takes effect from the next request on, in the same process: the
figures behind GET /canary (a window decayed with the configured half-life) keep
counting across it, with no reset; GET /canary reports the share run now, so a
reader that pools replicas by share (the operator) knows which have taken it up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from reward_gateway.config.gateway import CanaryConfig, GatewayConfig
from reward_gateway.config.identity import ClientLabels, model_identity
from reward_gateway.config.share import Share, followed
from reward_gateway.items.errors import GatewayError, UpstreamError, forget
from reward_gateway.items.outcomes import failed_positions
from reward_gateway.rollout.agreement import ROLES
from reward_gateway.rollout.canary_metrics import CanaryMetrics, CanaryTracker
from reward_gateway.scoring.coalesce import MetricsObserver
from reward_gateway.scoring.scorer import ItemScorer, make_scorer
from reward_gateway.signals.metrics import GatewayMetrics, ScoreRecorder
from reward_gateway.upstream.client import VllmClient

logger = logging.getLogger("reward_gateway")

BUCKETS = 10_000  # a percent in steps of 0.01

T = TypeVar("T")


@dataclass(frozen=True)
class Backend:
    """One model the gateway can ask: its settings, its vLLM, its scorer, its score histogram."""

    role: str  # "stable" or "candidate"
    name: str  # in metrics and /canary
    config: GatewayConfig  # the stable model's, with this model's URL, served name and template
    client: VllmClient
    scorer: ItemScorer
    scores: ScoreRecorder  # its reward_gateway_score child and score sums
    identity: dict[str, Any] = field(
        default_factory=dict
    )  # what its answers say of it (reward_gateway.config.identity)


def candidate_backend(config: GatewayConfig, canary: CanaryConfig, metrics: GatewayMetrics) -> Backend:
    """The candidate: the stable model's settings with its own vLLM, served name and template.

    It never waits for a cold start (scale-from-zero wait 0): the stable model is
    there to answer, and a shadow call must not be held for minutes."""
    own = dataclasses.replace(
        config,
        upstream_url=canary.upstream_url,
        model_name=canary.model_name,
        chat_template=canary.chat_template or config.chat_template,
        judge=canary.judge or config.judge,
        scale_from_zero_timeout_s=0.0,
        canary=None,
    )
    client = VllmClient(own, metrics, label=canary.name)
    observer = MetricsObserver(metrics, canary.name, ClientLabels(config.coalesce.weights))
    scorer = make_scorer(own, client, observer, metrics)
    # The candidate is the same RewardModel's: its generation is the stable model's where none is its own.
    revision = dataclasses.replace(canary.identity, generation=canary.identity.generation or config.identity.generation)
    if own.judge is not None:  # its own judge where it has one: a new template is a new judge
        revision = dataclasses.replace(revision, judge=own.judge.digest)
    identity = model_identity(own.model_name, "candidate", revision)
    return Backend("candidate", canary.name, own, client, scorer, metrics.score_recorder(canary.name), identity)


def bucket(salt: bytes, key: bytes) -> int:
    """The key's place in 0..BUCKETS-1 for this rollout (salt: the candidate's name)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(len(salt).to_bytes(4, "big") + salt)  # length first: (ab, c) and (a, bc) differ
    digest.update(key)
    return int.from_bytes(digest.digest(), "big") % BUCKETS


def takes_candidate(salt: bytes, key: bytes, percent: float) -> bool:
    return bucket(salt, key) < percent * BUCKETS / 100


def sticky_key(
    sticky: str, client: str | None, authorization: str | None, groups: Sequence[str | None] | None, body: bytes
) -> bytes:
    """What a request is routed by (see the module's docstring)."""
    if sticky == "client":
        if client:
            return b"client:" + client.encode()
        if authorization:
            # Hashed at once: the routing needs a stable value, not the token.
            return b"token:" + hashlib.sha256(authorization.encode("latin-1")).digest()
    first = next((group for group in groups or () if group is not None), None)
    if first is not None:
        return b"group:" + first.encode()
    return b"request:" + body


@dataclass(frozen=True)
class Caller:
    """Who sent a request, for the sticky key."""

    client: str | None  # the client header's value
    authorization: str | None = field(repr=False)  # never shown, not even in a debugger's or pytest's view
    body: bytes = field(repr=False)


@dataclass
class Attempt(Generic[T]):
    """One model's try at a request: its result, or the error it ended with."""

    backend: Backend
    seconds: float
    result: T | None = None
    error: Exception | None = None

    def value(self) -> T:
        """Its result, or its error raised."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class Canary:
    """Routes each request to the stable model, the candidate, or both, and keeps the score."""

    def __init__(self, config: CanaryConfig, stable: Backend, candidate: Backend, tracker: CanaryTracker):
        self.config = config
        self.backends = {"stable": stable, "candidate": candidate}
        self.tracker = tracker
        self._salt = candidate.name.encode()
        # The share run now: the environment's, or the file's, followed once start() is called.
        self.share = (
            Share(config.percent) if config.percent_file is None else followed(str(config.percent_file), config.mode)
        )

    @classmethod
    def build(cls, config: GatewayConfig, metrics: GatewayMetrics, stable: Backend) -> Canary:
        canary = config.canary
        assert canary is not None
        candidate = candidate_backend(config, canary, metrics)
        tracker = CanaryMetrics(metrics.registry, canary.half_life_s).tracker(stable.name, candidate.name)
        rollout = cls(canary, stable, candidate, tracker)
        share = ""
        if canary.mode == "split":
            source = f", following {canary.percent_file}" if canary.percent_file is not None else ""
            share = f" ({rollout.share.percent} % to the candidate{source}, sticky by {canary.sticky})"
        # No URL in the log: it may carry credentials.
        logger.info("rolling out %s beside %s: %s%s", candidate.name, stable.name, canary.mode, share)
        return rollout

    def start(self) -> None:
        """Starts following the share's file, where there is one (from within the running event loop)."""
        self.share.start()

    async def close(self) -> None:
        await self.share.stop()
        await self.backends["candidate"].client.close()

    def answering(self, caller: Caller, groups: Sequence[str | None] | None) -> str:
        """The role whose scores the trainer gets for this request."""
        config = self.config
        percent = self.share.percent  # read once: the file may move it between two looks
        if config.mode == "shadow" or percent == 0:
            return "stable"
        if percent == 100:
            return "candidate"
        key = sticky_key(config.sticky, caller.client, caller.authorization, groups, caller.body)
        return "candidate" if takes_candidate(self._salt, key, percent) else "stable"

    async def run(
        self,
        call: Callable[[Backend], Awaitable[T]],
        rewards: Callable[[T], Sequence[object]],
        groups: Sequence[str | None] | None,
        caller: Caller,
    ) -> Attempt[T]:
        """Scores one request as the mode says, and returns the attempt the trainer gets: its model, and
        its result or failure (`Attempt.value`).

        `call` scores the request with one model; `rewards` takes its rewards from
        the result (None for an item that failed), for the comparison; `groups` are the
        items' group keys."""
        role = self.answering(caller, groups)
        primary = self.backends[role]
        if self.config.mode == "split" and role == "stable":
            return self._answering(self._record(await _attempt(primary, call)))
        other = self.backends["candidate" if role == "stable" else "stable"]
        started = time.perf_counter()
        shadow = asyncio.create_task(_attempt(other, call))
        try:
            first = await _attempt(primary, call)
            if role == "candidate" and (first.error is not None or _failed(first, rewards)):
                # The candidate failed the request, or items of it: the stable model's answer replaces
                # its own, whole, where the stable model scored what the candidate could not; waited for
                # within the stable model's own timeouts.
                second = await shadow
                self._count(first, second, rewards, groups)
                scored_by_stable = second.error is None and _failed(first, rewards) - _failed(second, rewards)
                if first.error is not None or scored_by_stable:
                    _drop(first)
                    return self._answering(second)
                _drop(second)  # the items it failed, the stable model failed too: the input's, not the model's
                return self._answering(first)
            if first.error is not None:
                self._record(first)
                if shadow.done():  # it has finished: its outcome is known and counts
                    _drop(self._record(shadow.result()))
                return first
            done, _ = await asyncio.wait({shadow}, timeout=self.config.shadow_wait_s)
            if done:
                second = shadow.result()
                self._count(first, second, rewards, groups)
                _drop(second)
            else:  # given up on: the trainer's answer does not wait for it
                self._record(first)
                await _cancel(shadow)
                self.tracker.record_request(other.role, False, time.perf_counter() - started)
            return self._answering(first)
        finally:
            await _cancel(shadow)  # the trainer's answer is decided: nothing may outlive the request

    def _count(
        self,
        first: Attempt[T],
        second: Attempt[T],
        rewards: Callable[[T], Sequence[object]],
        groups: Sequence[str | None] | None,
    ) -> None:
        """Both models' outcomes for one request, and their scores compared where both answered. A model that
        failed items the other scored failed the request; items both failed are the input's fault, and no
        failed item is ever compared."""
        for this, that in ((first, second), (second, first)):
            if this.error is not None:
                # Whatever stopped it, where the other scored the same request it is its own fault.
                self._record(this, own_fault=that.error is None)
            else:
                own = _failed(this, rewards) - _failed(that, rewards) if that.error is None else set()
                self.tracker.record_request(this.backend.role, not own, this.seconds)
        if first.error is not None or second.error is not None:
            return
        # The two models' scores compared, the items either failed left out (a failure is no score to order).
        stable, candidate = (first, second) if first.backend.role == "stable" else (second, first)
        ours, theirs = rewards(stable.result), rewards(candidate.result)  # type: ignore[arg-type]
        failed = _failed(stable, rewards) | _failed(candidate, rewards)
        if failed:
            kept = [index for index in range(len(ours)) if index not in failed]
            ours, theirs = [ours[i] for i in kept], [theirs[i] for i in kept]
            groups = None if groups is None else [groups[i] for i in kept]
        self.tracker.observe(ours, theirs, groups)

    def _record(self, outcome: Attempt[T], own_fault: bool = False) -> Attempt[T]:
        """Counts a model's outcome: scores, or its failure. Its vLLM's failure is always its
        own; a refusal by the gateway (an item without a step tag, a template that cannot
        render it) only where the other model scored the same request (`own_fault`), as
        otherwise it says something about the input, not about either model."""
        if outcome.error is None or own_fault or isinstance(outcome.error, UpstreamError):
            self.tracker.record_request(outcome.backend.role, outcome.error is None, outcome.seconds)
        return outcome

    def _answering(self, outcome: Attempt[T]) -> Attempt[T]:
        """The attempt the trainer gets, counted as the answer where it scored."""
        if outcome.error is None:
            self.tracker.record_answer(outcome.backend.role)
        return outcome

    def summary(self) -> dict[str, Any]:
        """GET /canary: the rollout's settings and its decayed window's figures (None: undefined).

        Weights, not only ratios, so that a reader can pool several replicas:
        add the requests, errors, answers, items and pair counts, and weigh the
        means and standard deviations by their items (or requests, for latency)."""
        now = self.tracker.window.snapshot()
        answered = sum(now.answers.values())
        models = {}
        for role in ROLES:
            models[role] = {
                "name": self.backends[role].name,
                "requests": now.requests[role],
                "errors": now.errors[role],
                "error_ratio": now.error_ratio[role],
                "answers": now.answers[role],
                "latency_mean_seconds": now.latency_mean[role],
                "latency_stddev_seconds": now.latency_stddev[role],
                "score_mean": now.mean[role],
                "score_stddev": now.stddev[role],
            }
        pairs = dataclasses.asdict(now.pairs)
        return {
            "model": self.backends["stable"].name,
            "candidate": self.backends["candidate"].name,
            "mode": self.config.mode,
            "percent": self.share.percent,
            "sticky": self.config.sticky,
            "half_life_seconds": self.config.half_life_s,
            "answer_share": now.answers["candidate"] / answered if answered else None,
            "models": models,
            "items": now.items,
            "pairs": {**pairs, "ordered_by_stable": now.pairs.ordered_by_stable},
            "agreement": now.agreement,
            "kendall_tau_b": now.tau_b,
            "score_difference_mean": now.difference_mean,
            "score_difference_stddev": now.difference_stddev,
        }


def _failed(outcome: Attempt[T], rewards: Callable[[T], Sequence[object]]) -> set[int]:
    """The items a model answered with a failure (no reward) in its result."""
    return set() if outcome.error is not None else failed_positions(rewards(outcome.result))  # type: ignore[arg-type]


async def _attempt(backend: Backend, call: Callable[[Backend], Awaitable[T]]) -> Attempt[T]:
    """One model's try, its error caught (a cancellation is not: it ends the try)."""
    started = time.perf_counter()
    try:
        result = await call(backend)
    except Exception as error:
        return Attempt(backend, time.perf_counter() - started, error=error)
    return Attempt(backend, time.perf_counter() - started, result=result)


def _drop(outcome: Attempt[Any]) -> None:
    """Lets go of an outcome's error that no answer carries (reward_gateway.items.errors.forget: its
    frames hold the request, which the server's calm collector would keep for hours)."""
    if outcome.error is None:
        return
    if not isinstance(outcome.error, GatewayError):  # a bug, which no answer will log
        logger.error("unexpected error scoring with %s", outcome.backend.name, exc_info=outcome.error)
    forget(outcome.error)


async def _cancel(task: asyncio.Task[Attempt[Any]]) -> None:
    """Cancels a call and waits until it has let go (its connection closed, so a late
    answer cannot reach the next call on it); whatever it ended with is dropped."""
    if task.done():
        return
    task.cancel()
    # asyncio.wait, not `await task`: a CancelledError here is then this request's own,
    # never the call's (Python 3.11's TaskGroup leaves a task's cancelling() count raised,
    # so that count cannot tell them apart).
    await asyncio.wait({task})
    try:
        # A call may still end with an outcome: a TaskGroup whose own call failed as
        # the cancellation came raises that failure instead.
        _drop(task.result())
    except asyncio.CancelledError as cancelled:
        # Its traceback holds the call's frames, which hold the request (and, through a
        # TaskGroup's exit, the error itself: a cycle the calm collector would keep).
        forget(cancelled)
