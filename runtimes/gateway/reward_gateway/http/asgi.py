"""The scoring routes as a plain ASGI front, ahead of any framework.

At training-burst rates the gateway's cost per request is what it adds to every
reward; a framework's routing and middleware were about half of it. The scoring
POST routes need none of that: they read bytes, call :meth:`Gateway.answer` and
write JSON. Everything else (liveness, readiness, /metrics) passes through to
the wrapped app.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from reward_gateway.http.routes import Answer, Gateway

# Memory is bounded here, before anything is parsed (the README's "Memory"
# states the arithmetic). A body may be at most MAX_BODY_BYTES (8192 items of
# 4 KiB); once read, a request is charged what answering it costs at most
# (measured: its parsed and validated objects and its calls to vLLM come to
# about 13 times its bytes plus 1 KiB per JSON string, plus vLLM's answers where
# they carry a value per token: ModelKind.answer_cost_per_byte), and the
# requests held at once may cost at most the gateway's memory budget
# (GatewayConfig.memory_budget_bytes: its container's limit less the process).
# A body being read is charged its declared length, or its bytes so far.
# During a rollout two models may score a request at once (reward_gateway.rollout.canary),
# each with its own payloads and answers: the whole charge is doubled, an upper
# bound (parsing and validation happen once), not a measurement.
MAX_BODY_BYTES = 32 * 1024 * 1024
COST_PER_BYTE = 13
COST_PER_STRING = 1024
BUSY_RETRY_AFTER_S = 1
# A body must arrive within this, however slowly its client sends it (32 MiB
# take 60 s at 560 KB/s): a slow client cannot hold its charge (and a task) for long.
BODY_TIMEOUT_S = 60.0


class _TooLarge(Exception):
    """The body outgrew the limit while it was read."""


class _Busy(Exception):
    """The bodies held at once outgrew the budget while this one was read."""


class _Charge:
    """What one request holds of the front's budget, resized as it is learnt."""

    def __init__(self, front: ScoringFront):
        self.front = front
        self.bytes = 0

    def resize(self, size: int) -> bool:
        """Hold ``size`` bytes instead; False where that overfills the budget."""
        self.front.held_bytes += size - self.bytes
        self.bytes = size
        return self.front.held_bytes <= self.front.max_held_bytes

    def release(self) -> None:
        self.resize(0)


class ScoringFront:
    def __init__(
        self,
        gateway: Gateway,
        app: Any,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_held_bytes: int | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ):
        self.gateway = gateway
        self.app = app
        self.scoring_paths = gateway.paths
        self.max_body_bytes = max_body_bytes
        self.max_held_bytes = gateway.config.memory_budget_bytes if max_held_bytes is None else max_held_bytes
        self.cost_per_byte = COST_PER_BYTE + gateway.answer_cost_per_byte
        self.copies = gateway.models_per_request
        self.client_header = gateway.client_header  # lower case
        self.body_timeout_s = body_timeout_s
        self.held_bytes = 0  # what the requests being read or answered may cost

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        label = self.scoring_paths.get(scope.get("path", "")) if scope["type"] == "http" else None
        if label is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await self._refuse(send, label, Answer(405, {"error": f"{scope['path']} takes POST"}, {"Allow": "POST"}))
            return
        authorization, client, declared = None, None, 0
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == self.client_header:
                client = value.decode("latin-1")
        # Refused before a byte of the body is read: a declared length over the
        # limit, or no room for it among the bodies held now.
        if declared > self.max_body_bytes:
            await self._refuse(send, label, self._too_large())
            return
        charge = _Charge(self)
        try:
            if not charge.resize(declared):
                await self._refuse(send, label, _busy())
                return
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    body = await self._read_body(receive, charge, charged=declared > 0)
            except TimeoutError:
                message = f"the request body did not arrive within {self.body_timeout_s:g} s"
                await self._refuse(send, label, Answer(408, {"error": message}, {"Connection": "close"}))
                return
            except _TooLarge:
                await self._refuse(send, label, self._too_large())
                return
            except _Busy:
                await self._refuse(send, label, _busy())
                return
            cost = request_cost(body, self.cost_per_byte) * self.copies
            if cost > self.max_held_bytes:  # would not fit even alone
                await self._refuse(send, label, self._too_large())
                return
            if not charge.resize(cost):
                await self._refuse(send, label, _busy())
                return
            await _send_json(send, await self.gateway.answer(label, body, authorization, client))  # counted there
        finally:
            charge.release()

    async def _refuse(self, send: Any, label: str, answer: Answer) -> None:
        """Answer without running the route; counted like every other answer."""
        self.gateway.count(label, answer.status)
        await _send_json(send, answer)

    def _too_large(self) -> Answer:
        message = (
            f"request body over {self.max_body_bytes} bytes, or too many strings to answer in the gateway's memory"
        )
        return Answer(413, {"error": message})

    async def _read_body(self, receive: Any, charge: _Charge, charged: bool) -> bytes:
        """The whole body; one without a declared length (chunked) is charged as it arrives."""
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes or (not charged and size > self.max_held_bytes):
                raise _TooLarge()
            if not charged and not charge.resize(size):
                raise _Busy()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def request_cost(body: bytes, cost_per_byte: int = COST_PER_BYTE) -> int:
    """The most memory answering this body takes (see the charge above), from its bytes alone."""
    return cost_per_byte * len(body) + COST_PER_STRING * (body.count(b'"') // 2)


def _busy() -> Answer:
    message = "the gateway holds as many request bodies as it has memory for; retry shortly"
    return Answer(503, {"error": message}, {"Retry-After": str(BUSY_RETRY_AFTER_S)})


async def _send_json(send: Any, answer: Answer) -> None:
    payload = orjson.dumps(answer.body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
