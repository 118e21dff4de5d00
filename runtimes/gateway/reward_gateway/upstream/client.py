"""HTTP calls to the vLLM predictor, with its failures mapped to gateway errors.

The one place that maps vLLM's outcomes to the gateway's answers:

- unreachable (refused, reset before answering, no endpoint: scaled to zero; or
  silent for http_pool.DEAD_PEER_S, a vLLM pod gone without a reset) or
  vLLM's 503 while it loads: the request is held (reward_gateway.signals.load) and the
  call retried until vLLM answers or the scale-from-zero wait is spent, then
  503 with Retry-After; with REWARD_GATEWAY_MAX_HELD_REQUESTS held already,
  503 with Retry-After at once;
- 429 (vLLM's queue is full): 503 with Retry-After at once, as trainers retry that;
- any other 4xx: 400 with vLLM's message (the input was refused);
- 5xx: 502;
- an answer cut short, not HTTP, not JSON, or larger than its call can be
  answered with (ANSWER_BYTES_PER_BYTE_SENT): 502 at once, never sent again
  (vLLM was reached and may have done the work);
- no answer within the request timeout: 504;
- no free slot for the call (REWARD_GATEWAY_MAX_CONCURRENCY in flight) within
  the request timeout: 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.items.errors import UpstreamError, upstream_unavailable
from reward_gateway.items.kinds import TOKENIZE_PATH
from reward_gateway.signals.load import Held, HeldFull, Load
from reward_gateway.signals.metrics import UPSTREAM_ERROR_REASONS, GatewayMetrics
from reward_gateway.upstream.http_pool import BrokenAnswer, HttpPool

# vLLM's answer to a call is at most this many bytes per byte sent, plus a
# base: a few numbers per text, or about 21 bytes per token for token models
# (at most a token per byte). More is broken, and is not read into memory.
ANSWER_BYTES_PER_BYTE_SENT = 64
ANSWER_BASE_BYTES = 1024 * 1024
RETRY_PAUSE_S = 0.5
# While calls are held for an unreachable vLLM, one connection attempt every this
# long tells them all when it takes connections (a refused one costs microseconds).
PROBE_PAUSE_S = 0.05
PROBE_CONNECT_TIMEOUT_S = 1.0  # in-cluster connects take milliseconds; a dropped SYN is not waited for long
UNREACHABLE, LOADING = "unreachable", "loading"
RETRY_AFTER_S = 10
OVERLOADED_RETRY_AFTER_S = 1
# A gateway pod on its way out answers the requests it holds, and those it would hold, at once: the pod that
# replaces it (Ready before this one was told to go) holds them, and wakes the predictor (its scaler).
LEAVING_MESSAGE = "vLLM is not up yet and this gateway pod is shutting down; retry (another pod holds it)"


class VllmClient:
    def __init__(
        self, config: GatewayConfig, metrics: GatewayMetrics, label: str | None = None, load: Load | None = None
    ):
        self.config = config
        self.metrics = metrics
        # Where the requests held for the predictor are counted and bounded (the
        # gateway's, shared with the autoscaler; a client of its own elsewhere).
        self.load = load or Load(config.max_held_requests)
        # The `model` label of its errors: a candidate's vLLM may serve under the
        # stable model's name, and its failures must not count as the stable's.
        self.label = label or config.model_name
        # One connection per concurrent call, kept alive: reconnecting per call
        # would cost more than the gateway's whole latency budget.
        self.pool = HttpPool(
            config.upstream_url,
            max_idle=config.max_concurrency,
            connect_timeout_s=min(10.0, config.request_timeout_s),
        )
        self.limit = asyncio.Semaphore(config.max_concurrency)
        # The probe held calls wait on (_until_reachable), while any are held.
        self._probe: asyncio.Task | None = None
        self._reachable: asyncio.Event | None = None
        # Every reason's series exists from the start at 0, so rate() and the
        # error-ratio alerts see the first error as an increase, not a new series.
        for reason in UPSTREAM_ERROR_REASONS:
            metrics.upstream_errors.labels(self.label, reason)
        self._held = metrics.held.labels(self.label)
        self._hold_refused = metrics.hold_refused.labels(self.label)
        self._hold_duration = metrics.hold_duration.labels(self.label)

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        await self.pool.close()

    async def post(self, path: str, body: dict[str, Any], max_answer_bytes: int | None = None) -> Any:
        """POST a JSON body and return vLLM's JSON answer, or raise UpstreamError.

        ``max_answer_bytes``: where the answer's size is not bounded by what is sent
        (generated text), its own bound; by default ANSWER_BYTES_PER_BYTE_SENT's.

        At most REWARD_GATEWAY_MAX_CONCURRENCY calls are in flight, whichever
        route made them; the rest wait here, at most the request timeout (then 503).
        A call held for vLLM gives its slot back while it waits: it is not in
        flight, and the held requests have a bound of their own."""
        payload = orjson.dumps(body)
        deadline = time.monotonic() + self.config.scale_from_zero_timeout_s
        held: Held | None = None
        try:
            while True:
                await self._acquire()
                try:
                    answered = await self._attempt(path, payload, deadline, max_answer_bytes)
                finally:
                    self.limit.release()
                if isinstance(answered, tuple):
                    return self._answer(*answered)
                self._unless_leaving()
                held = held or self._hold()
                if answered is UNREACHABLE:
                    await self._until_reachable(deadline)
                else:  # vLLM's 503: it is there, loading; no sooner than the pause
                    await self._until_leaving(RETRY_PAUSE_S)
                self._unless_leaving()
        finally:
            if held is not None:
                self._release(held)

    async def tokenize(self, body: dict[str, Any]) -> Any:
        """vLLM's /tokenize answer for ``body``, as any call: held while vLLM is not up, bounded and counted."""
        return await self.post(TOKENIZE_PATH, body)

    async def probe_tokenize(self, body: dict[str, Any]) -> Any:
        """vLLM's /tokenize answer for ``body`` where vLLM answers now, from a check that must neither wake a
        predictor at zero nor wait for one: not held, not counted in the load the autoscaler reads, not in the
        error metrics. Where vLLM is not up (unreachable, loading, a broken answer), UpstreamError at once."""
        try:
            status, answer = await self.pool.post_json(TOKENIZE_PATH, orjson.dumps(body), ANSWER_BASE_BYTES)
        except (OSError, BrokenAnswer) as error:
            raise upstream_unavailable(f"vLLM is not up ({type(error).__name__})", RETRY_AFTER_S) from None
        if status != 200:
            raise UpstreamError("status_5xx" if status >= 500 else "status_4xx", 502, f"vLLM answered {status}")
        try:
            return orjson.loads(answer)
        except orjson.JSONDecodeError:
            raise UpstreamError("bad_response", 502, "vLLM answered with a body that is not JSON") from None

    async def _acquire(self) -> None:
        if self.limit.locked():  # all slots taken: wait, but not for ever
            try:
                async with asyncio.timeout(self.config.request_timeout_s):
                    await self.limit.acquire()
            except TimeoutError:
                message = f"no free slot for a call to vLLM within {self.config.request_timeout_s:g} s"
                raise self._failed(upstream_unavailable(message, RETRY_AFTER_S, reason="timeout")) from None
        else:
            await self.limit.acquire()

    def _unless_leaving(self) -> None:
        if self.load.leaving.is_set():
            raise self._failed(upstream_unavailable(LEAVING_MESSAGE, OVERLOADED_RETRY_AFTER_S))

    async def _until_leaving(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.load.leaving.wait()

    async def _until_reachable(self, deadline: float) -> None:
        """Wait until vLLM takes connections, or until the deadline: one probe for all
        held calls, every PROBE_PAUSE_S, so that they make no attempts of their own
        (each would hold a slot, and where packets are dropped rather than refused,
        a connect timeout), and all go as soon as it comes up."""
        if self._probe is None or self._probe.done():
            self._reachable = asyncio.Event()
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_reachable(self._reachable))
        reachable = asyncio.ensure_future(self._reachable.wait())  # type: ignore[union-attr]
        leaving = asyncio.ensure_future(self.load.leaving.wait())
        try:
            await asyncio.wait((reachable, leaving), timeout=max(0.0, deadline - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            reachable.cancel()
            leaving.cancel()

    async def _probe_until_reachable(self, reachable: asyncio.Event) -> None:
        while self.load.held:
            try:
                await self.pool.connect_idle(PROBE_CONNECT_TIMEOUT_S)
            except OSError:
                await asyncio.sleep(PROBE_PAUSE_S)
                continue
            reachable.set()
            return

    async def _attempt(
        self, path: str, payload: bytes, deadline: float, max_answer_bytes: int | None = None
    ) -> tuple[int, bytes] | str:
        """One try: vLLM's status and answer, or where the scale-from-zero wait is not
        spent yet, UNREACHABLE (refused, reset, no endpoint) or LOADING (its 503)."""
        if max_answer_bytes is None:
            max_answer_bytes = ANSWER_BYTES_PER_BYTE_SENT * len(payload) + ANSWER_BASE_BYTES
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                status, answer = await self.pool.post_json(path, payload, max_answer_bytes)
        except TimeoutError:
            message = f"vLLM did not answer within {self.config.request_timeout_s:g} s"
            raise self._failed(UpstreamError("timeout", 504, message)) from None
        except BrokenAnswer as error:
            raise self._failed(UpstreamError("bad_response", 502, f"vLLM's answer was broken: {error}")) from None
        except OSError as error:  # refused, reset, closed unanswered, unresolvable, TLS
            if time.monotonic() < deadline:
                return UNREACHABLE
            message = f"vLLM is unreachable ({type(error).__name__}); it may be scaled to zero"
            raise self._failed(upstream_unavailable(message, RETRY_AFTER_S)) from None
        if status == 503 and time.monotonic() < deadline:
            return LOADING
        return status, answer

    def _hold(self) -> Held:
        """Count this call's request as held for the predictor, or refuse it at the bound."""
        try:
            held = self.load.hold()
        except HeldFull:
            self._hold_refused.inc()
            message = (
                f"vLLM is not ready (scaled to zero or starting) and the gateway already holds "
                f"{self.load.max_held} requests for it; retry later"
            )
            raise self._failed(upstream_unavailable(message, RETRY_AFTER_S)) from None
        self._held.set(self.load.held)
        return held

    def _release(self, held: Held) -> None:
        duration = self.load.release(held)
        if duration is not None:
            self._held.set(self.load.held)
            self._hold_duration.observe(duration)

    def _answer(self, status: int, payload: bytes) -> Any:
        if status == 503:
            raise self._failed(upstream_unavailable("vLLM is not ready yet", RETRY_AFTER_S, reason="status_5xx"))
        if status == 429:
            message = f"vLLM is overloaded: {_message(payload)}"
            raise self._failed(upstream_unavailable(message, OVERLOADED_RETRY_AFTER_S, reason="status_4xx"))
        if status >= 500:
            raise self._failed(UpstreamError("status_5xx", 502, f"vLLM failed with {status}: {_message(payload)}"))
        if status >= 400:
            # vLLM's 4xx are about the input (over-long prompts most often), so
            # they go back to the client as its own fault, with vLLM's message.
            # the status and "an empty body" say what answered where vLLM's message is empty
            message = f"vLLM rejected the input ({status}): {_message(payload) or 'an empty body'}"
            raise self._failed(UpstreamError("status_4xx", 400, message))
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            error = UpstreamError("bad_response", 502, "vLLM answered with a body that is not JSON")
            raise self._failed(error) from None

    def _failed(self, error: UpstreamError) -> UpstreamError:
        self.metrics.upstream_errors.labels(self.label, error.reason).inc()
        return error


def _message(payload: bytes) -> str:
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode(errors="replace")[:500]
    if isinstance(body, dict):
        error = body.get("error", body.get("message", body))
        if isinstance(error, dict):
            # vLLM's error without a message (an exception with none, seen once at a cold start): its type
            error = error.get("message") or f"no message; {error.get('type', 'error')} {error.get('code', '')}".strip()
        return str(error)[:500]
    return str(body)[:500]
