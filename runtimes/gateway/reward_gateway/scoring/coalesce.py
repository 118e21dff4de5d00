"""Coalesces concurrent scoring calls to one model into fewer vLLM calls.

Trainers that send one sample per request (OpenRLHF, slime, verl per sample) make vLLM pay its
per-request cost (parsing, tokenizing, scheduling, an answer) once per sample. Here each call of
texts the scorer would make (a "part": one item, or one group's items) joins a queue
(reward_gateway.scoring.fair_queue), and the queued parts go to vLLM together as one call (a batch) when

- no batch is in flight (vLLM idle, as far as this gateway knows): at once, with only the parts
  that arrived in the same turn of the event loop, so an idle gateway adds no wait;
- the queue holds a batch's worth (max_items, or what vLLM answers in max_call_s); or
- the oldest part has waited max_wait_s.

At most max_batches are in flight; the rest wait here, which is where fair share acts. A part
waits at most the request timeout for its batch (then 503 with Retry-After, as for a slot).

A batch is also bounded in time: no bigger than what vLLM has been answering in max_call_s
(its pace, measured here on the batches answered: characters, or token ids, per second of
vLLM busy). vLLM answers what it is sent in arrival order, so whatever the gateway has sent
is ahead of any newcomer; bounding each batch by time, not only by count, bounds that wait
on any engine. A light client's part leaves in the next batch (fair share) and waits for
at most the max_batches in flight and its own: about (max_batches + 1) x max_call_s of
vLLM's work, however long the flood's backlog here. Where vLLM answers max_items texts in
less than max_call_s, the count is the smaller bound and the pace changes nothing.

The time bound holds only while more than one client has called within SHARED_WINDOW_S: it
is there so that one client's calls do not stand in front of another's. One trainer alone
has nobody to stand in front of, and its calls are bounded by count alone, which merges the
most. That matters where vLLM's own work per call is most of its time (a small model, a
loaded CPU): the pace, measured per call, then counts that work too, and the bound would
shrink calls toward one part each, which is forwarding.

Within a batch the texts go in sorted order, so that texts sharing a prompt sit side by side and
vLLM's prefix cache (filled and matched block by block) is hit by all but the first of them, also
for completions of one prompt that arrived in separate requests. The answer's entries are mapped
back to each part in its own order.

Failures stay with their owners: each part is validated before it is queued (Scorer.plan), a
batch that vLLM refuses as a whole with a 400 (an over-long text, most often) is halved and each
half sent again, down to the text at fault, so that only its item fails (reward_gateway.scoring.per_item);
any other failure (5xx, a timeout, a broken answer) fails exactly the items of that batch. A part
is answered with an entry or a `Failure` per text.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from reward_gateway.config.gateway import CoalesceConfig
from reward_gateway.config.identity import ClientLabels
from reward_gateway.items.errors import upstream_unavailable
from reward_gateway.items.extract import ordered_data
from reward_gateway.items.kinds import CallBody
from reward_gateway.items.outcomes import Failure
from reward_gateway.scoring.fair_queue import FairQueue
from reward_gateway.scoring.per_item import answer_each
from reward_gateway.signals.load import CURRENT, Held
from reward_gateway.signals.metrics import GatewayMetrics
from reward_gateway.upstream.client import RETRY_AFTER_S, VllmClient

logger = logging.getLogger("reward_gateway")

# The queue's own answer when a part waited its whole timeout without being sent.
QUEUE_FULL_MESSAGE = "no room in a vLLM call within {timeout:g} s (the gateway's queue is full)"

# How recently a second client must have called for the time bound on a batch to hold.
SHARED_WINDOW_S = 10.0


# What one item sends: a text, or its token ids where the scorer tokenized it first (a model scored
# at a reward token, reward_gateway.scoring.reward_token). Sorted like texts: a shared prompt sorts together.
Prompt = str | list[int]


# vLLM's answer entry for a text, or the failure of its item.
Answered = dict[str, Any] | Failure


@dataclass(eq=False)
class _Part:
    texts: list[Prompt]
    client: str
    future: asyncio.Future[list[Answered]]
    enqueued: float
    dispatched: bool = False
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False)
    # vLLM's work for it, in characters (or token ids): what its pace is measured in. Read on every push,
    # take and answer, so counted once.
    cost: int = field(init=False)

    # Each text's answer as it comes (halves of a refused batch are answered on the way down).
    answered: list[Answered | None] = field(init=False, repr=False)
    unanswered: int = field(init=False)

    def __post_init__(self) -> None:
        self.cost = sum(len(text) for text in self.texts)
        self.answered = [None] * len(self.texts)
        self.unanswered = len(self.texts)

    def settle_one(self, index: int, answer: Answered) -> None:
        """One text's answer (its entry, with the index it has within this part); the part's own once all are in."""
        self.answered[index] = {**answer, "index": index} if isinstance(answer, dict) else answer
        self.unanswered -= 1
        if self.unanswered == 0:
            _settle(self, result=self.answered)  # type: ignore[arg-type]

    @property
    def items(self) -> int:
        return len(self.texts)

    def wanted(self) -> bool:
        return not self.future.done()


class Coalescer:
    """One model's queue of parts and the batches it sends to one vLLM route."""

    def __init__(
        self,
        client: VllmClient,
        body: CallBody,
        settings: CoalesceConfig,
        timeout_s: float,
        observe: QueueObserver | None = None,
    ):
        self.client = client
        self.body = body  # every call's body but its input: the model, the kind's settings
        self.settings = settings
        self.timeout_s = timeout_s
        self.observe = observe or QueueObserver()
        self.queue: FairQueue[_Part] = FairQueue(settings.weights, settings.default_weight, settings.fair_share)
        self.in_flight = 0
        self.pace = Pace()
        self._busy_mark = 0.0  # the last batch answered, or when vLLM last became busy
        self._last_call: dict[str, float] = {}  # client -> when it last queued a part
        self._kicked = False
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, texts: list[Prompt], client: str) -> list[Answered]:
        """vLLM's answer entries for ``texts`` (``index`` 0..n-1), or their items' failures, in their order."""
        loop = asyncio.get_running_loop()
        part = _Part(texts, client, loop.create_future(), loop.time())
        self._last_call[client] = part.enqueued
        part.expiry = loop.call_at(part.enqueued + self.timeout_s, self._expire, part)
        self.queue.push(part)
        self.observe.queued(client, self.queue.depth.get(client, 0))
        self._kick()
        try:
            return await part.future
        finally:
            part.expiry.cancel()

    def _kick(self) -> None:
        """Dispatch at the end of this turn of the loop: parts queued in the same turn go together."""
        if not self._kicked:
            self._kicked = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._kicked = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = asyncio.get_running_loop()
        while self.in_flight < self.settings.max_batches:
            oldest = self.queue.oldest()
            if oldest is None:
                return
            max_cost = self.max_cost()
            due = (
                self.in_flight == 0
                or self.queue.items >= self.settings.max_items
                or self.queue.cost >= max_cost
                or loop.time() - oldest >= self.settings.max_wait_s
            )
            if not due:
                self._timer = loop.call_at(oldest + self.settings.max_wait_s, self._dispatch)
                return
            batch = self.queue.take(self.settings.max_items, max_cost)
            if not batch:
                continue
            now = loop.time()
            for part in batch:
                self.observe.sent(part.client, self.queue.depth.get(part.client, 0), now - part.enqueued)
            if self.in_flight == 0:
                self._busy_mark = now
            self.in_flight += 1
            # The batch is no request's own: it is held for a cold predictor as one request of its own.
            held = Held()
            context = contextvars.copy_context()
            context.run(CURRENT.set, held)
            task = loop.create_task(self._send(batch, held), context=context)
            self._tasks.add(task)  # a task is kept until done: the loop holds it only weakly
            task.add_done_callback(self._tasks.discard)

    def max_cost(self) -> float:
        """What one batch may cost: what vLLM answers in max_call_s at its pace, while clients share vLLM
        (no bound before a pace is known, or with one client)."""
        per_second = self.pace.per_second()
        if per_second is None or not self.settings.max_call_s or not self._shared():
            return math.inf
        return per_second * self.settings.max_call_s

    def _shared(self) -> bool:
        """Whether more than one client has called within SHARED_WINDOW_S (forgetting those that have not)."""
        if len(self._last_call) < 2:
            return False
        since = asyncio.get_running_loop().time() - SHARED_WINDOW_S
        for client in [client for client, last in self._last_call.items() if last < since]:
            del self._last_call[client]
        return len(self._last_call) > 1

    async def _send(self, batch: list[_Part], held: Held) -> None:
        answered = False
        try:
            answered = await self._answer(batch)
        finally:
            now = asyncio.get_running_loop().time()
            # The pace counts vLLM answering, not waiting: a batch held for a predictor scaled to zero, or
            # one that failed, says nothing of it.
            if answered and held.since == 0.0:
                self.pace.add(sum(part.cost for part in batch), now - self._busy_mark)
            self._busy_mark = now
            self.in_flight -= 1
            self._kick()

    async def _answer(self, batch: list[_Part]) -> bool:
        """Settles each part of ``batch``; True where vLLM answered it in one call."""
        owners = [(part, index) for part in batch for index in range(part.items)]

        def settle(position: int, answer: Answered) -> None:
            part, index = owners[position]
            part.settle_one(index, answer)

        try:
            return await answer_each(self._post, [text for part in batch for text in part.texts], settle)
        except Exception as error:  # a bug: each request answers 500 with its own error, never waits
            for part in batch:
                _settle(part, exception=RuntimeError(f"coalesced call failed: {error!r}"))
            logger.exception("a coalesced call to vLLM failed in the gateway itself")
            return False

    async def _post(self, texts: list[Prompt]) -> list[dict[str, Any]]:
        """One vLLM call for ``texts``: sent in sorted order, answered in theirs."""
        order = sorted(range(len(texts)), key=texts.__getitem__)
        response = await self.client.post(self.body.path, self.body.of_inputs([texts[i] for i in order]))
        sent = ordered_data(response, len(texts))
        answered: list[dict[str, Any]] = [{}] * len(texts)
        for position, entry in zip(order, sent, strict=True):
            answered[position] = entry
        self.observe.batch(len(texts))
        return answered

    def _expire(self, part: _Part) -> None:
        if not part.dispatched and not part.future.done():
            part.future.set_exception(
                upstream_unavailable(QUEUE_FULL_MESSAGE.format(timeout=self.timeout_s), RETRY_AFTER_S, "timeout")
            )


class Pace:
    """vLLM's pace on this gateway's batches: their cost answered per second of vLLM busy with them.

    Each answered batch adds its cost and the busy time since the previous answer (or since vLLM became
    busy), so batches in flight together share the time rather than each counting all of it. Sums that
    decay by DECAY per batch: a change of load, of text lengths or of replicas shows within a few batches.
    """

    DECAY = 0.8

    def __init__(self) -> None:
        self.cost = 0.0
        self.seconds = 0.0

    def add(self, cost: float, seconds: float) -> None:
        self.cost = self.cost * self.DECAY + cost
        self.seconds = self.seconds * self.DECAY + max(seconds, 0.0)

    def per_second(self) -> float | None:
        return self.cost / self.seconds if self.seconds > 0 else None


class QueueObserver:
    """Where the queue's figures go (reward_gateway.signals.metrics' children; nowhere by default)."""

    def queued(self, client: str, depth: int) -> None:
        """A part of ``client``'s joined the queue; ``depth``: its items queued now."""

    def sent(self, client: str, depth: int, waited_s: float) -> None:
        """A part of ``client``'s left the queue after ``waited_s``."""

    def batch(self, items: int) -> None:
        """A call of ``items`` texts was answered."""


def _settle(part: _Part, result: list[Answered] | None = None, exception: BaseException | None = None) -> None:
    if part.future.done():  # its request gave up meanwhile
        return
    if exception is not None:
        part.future.set_exception(exception)
    else:
        part.future.set_result(result)  # type: ignore[arg-type]


class MetricsObserver(QueueObserver):
    """The queue's figures as reward_gateway_client_queue_* and reward_gateway_upstream_batch_items."""

    def __init__(self, metrics: GatewayMetrics, model: str, labels: ClientLabels):
        self.metrics = metrics
        self.model = model
        self.labels = labels
        self._batch = metrics.batch_items.labels(model)

    def queued(self, client: str, depth: int) -> None:
        self.metrics.client_queue_items.labels(self.model, self.labels.label(client)).set(depth)

    def sent(self, client: str, depth: int, waited_s: float) -> None:
        label = self.labels.label(client)
        self.metrics.client_queue_items.labels(self.model, label).set(depth)
        self.metrics.client_queue_wait.labels(self.model, label).observe(waited_s)

    def batch(self, items: int) -> None:
        self._batch.observe(items)
