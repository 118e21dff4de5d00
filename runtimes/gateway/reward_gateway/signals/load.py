"""What the gateway is doing now, for the autoscaler: requests and items in flight,
and the requests held while the predictor is away.

Plain counters on the event loop, bumped twice per request; the autoscaler's
side (reward_gateway.scale.scaler, KEDA's external scaler over gRPC) reads them and
is told of the two moments it must act on at once: the first request after a
quiet spell, and the first request held for a predictor that is not there.
Kept apart from the scaler so that a gateway without one imports no gRPC.

Held: a call that finds vLLM unreachable (refused, no endpoint: scaled to zero)
or loading (its 503) is retried until vLLM answers or the scale-from-zero wait
is spent (reward_gateway.upstream.client). Its request counts as held from the first
such call to the last; at most ``max_held`` requests are held at once, and one
more is answered 503 with Retry-After at once instead of waiting.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from contextvars import ContextVar


class Held:
    """One request's calls waiting for the predictor (shared by the request's tasks)."""

    __slots__ = ("calls", "since")

    def __init__(self) -> None:
        self.calls = 0
        self.since = 0.0


# The request being answered: Gateway.answer sets a fresh Held for each, and the
# tasks a request starts (one per group call) inherit it, so its calls count once.
CURRENT: ContextVar[Held | None] = ContextVar("reward_gateway_request", default=None)


class HeldFull(Exception):
    """As many requests are held as the bound allows."""


class Load:
    def __init__(self, max_held: int = 1024):
        self.max_held = max_held
        self.requests = 0  # being answered now, the held ones among them
        self.items = 0  # of the requests being answered (counted once admitted)
        self.held = 0  # requests held for the predictor now
        self.idle_since = -math.inf  # when the last request ended (none yet)
        # Told when a request arrives to a gateway with none in flight, and when
        # the first request is held (reward_gateway.scale.scaler listens; None: nobody).
        self.on_first: Callable[[], None] | None = None
        self.on_held: Callable[[], None] | None = None
        # Set once the pod is going away (SIGTERM): a request is held no longer here, but answered 503 so that
        # its client retries on a pod that stays (reward_gateway.upstream.client); in the event loop's thread only.
        self.leaving = asyncio.Event()

    def stop_holding(self) -> None:
        self.leaving.set()

    def begin(self) -> None:
        if self.requests == 0 and self.on_first is not None:
            self.on_first()
        self.requests += 1

    def admit(self, items: int) -> None:
        self.items += items

    def end(self, items: int) -> None:
        self.requests -= 1
        self.items -= items
        if self.requests == 0:
            self.idle_since = time.monotonic()

    def hold(self) -> Held:
        """The current request's calls are one more waiting for the predictor; raises
        HeldFull where the request is not held yet and the bound is reached."""
        request = CURRENT.get()
        if request is None:  # a call outside a request (tests, start-up): held on its own
            request = Held()
        if request.calls == 0:
            if self.held >= self.max_held:
                raise HeldFull()
            request.since = time.monotonic()
            self.held += 1
            if self.held == 1 and self.on_held is not None:
                self.on_held()
        request.calls += 1
        return request

    def release(self, request: Held) -> float | None:
        """One of the request's calls stops waiting; returns how long the request was
        held where this was its last waiting call."""
        request.calls -= 1
        if request.calls:
            return None
        self.held -= 1
        return time.monotonic() - request.since
