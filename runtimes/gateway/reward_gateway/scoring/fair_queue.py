"""The queue of scoring calls waiting for vLLM, taken in weighted fair order between clients.

Several training jobs share one reward model; under contention a job that floods must not decide
another's latency. Each entry belongs to a client (reward_gateway.config.identity) and costs its item
count. With fair share on, entries leave in start-time fair-queuing order: an entry's start tag is
the later of the queue's virtual time (the start tag of the last entry taken) and its client's
previous finish tag, its finish tag that plus items / weight. A flooding client's backlog thus
carries tags far in the future, and a light client's next entry starts at the present virtual
time: it waits behind at most one entry per busy client, never behind a backlog. Nobody starves:
virtual time only moves forward, so every tag is reached. With fair share off, entries leave in
arrival order.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar


class Entry(Protocol):
    client: str
    items: int
    cost: int  # its work for vLLM, for a bound on what one take may cost
    enqueued: float
    dispatched: bool  # set when taken

    def wanted(self) -> bool:
        """False once nobody waits for it any more (its request gave up)."""
        ...


E = TypeVar("E", bound=Entry)


class FairQueue(Generic[E]):
    def __init__(self, weights: Mapping[str, float], default_weight: float = 1.0, fair: bool = True):
        self.weights = dict(weights)
        self.default_weight = default_weight
        self.fair = fair
        self._heap: list[tuple[float, int, E]] = []
        self._arrivals: deque[E] = deque()  # arrival order, for the oldest entry's wait
        self._finish: dict[str, float] = {}  # each client's last finish tag
        self._virtual = 0.0
        self._seq = 0
        self.items = 0  # queued items, of entries still wanted or not yet skipped
        self.cost = 0  # their cost
        self.depth: dict[str, int] = {}  # queued items by client

    @property
    def pushed(self) -> int:
        """Entries queued since the start."""
        return self._seq

    def __len__(self) -> int:
        return len(self._heap)

    def weight(self, client: str) -> float:
        return self.weights.get(client, self.default_weight)

    def push(self, entry: E) -> None:
        self._seq += 1
        if self.fair:
            start = max(self._virtual, self._finish.get(entry.client, 0.0))
            self._finish[entry.client] = start + entry.items / self.weight(entry.client)
            key = start
        else:
            key = float(self._seq)
        heapq.heappush(self._heap, (key, self._seq, entry))
        self._arrivals.append(entry)
        self.items += entry.items
        self.cost += entry.cost
        self.depth[entry.client] = self.depth.get(entry.client, 0) + entry.items

    def oldest(self) -> float | None:
        """When the longest-waiting wanted entry was queued (None: nothing wanted is queued)."""
        while self._arrivals and (self._arrivals[0].dispatched or not self._arrivals[0].wanted()):
            self._arrivals.popleft()
        return self._arrivals[0].enqueued if self._arrivals else None

    def take(self, max_items: int, max_cost: float = math.inf) -> list[E]:
        """Entries in fair order up to ``max_items`` items and ``max_cost`` (at least one entry, however large)."""
        taken: list[E] = []
        total = cost = 0
        while self._heap:
            key, _, entry = self._heap[0]
            if taken and (total + entry.items > max_items or cost + entry.cost > max_cost):
                break
            heapq.heappop(self._heap)
            self._forget(entry)
            if not entry.wanted():
                continue
            entry.dispatched = True
            if self.fair:
                self._virtual = max(self._virtual, key)
            taken.append(entry)
            total += entry.items
            cost += entry.cost
        if not self._heap:
            # Nothing queued: no client's history can matter any more (each restarts at the virtual time).
            self._finish.clear()
        return taken

    def _forget(self, entry: E) -> None:
        self.items -= entry.items
        self.cost -= entry.cost
        left = self.depth[entry.client] - entry.items
        if left:
            self.depth[entry.client] = left
        else:
            del self.depth[entry.client]
