"""The scoring routes as a plain ASGI front, ahead of any framework.

At training-burst rates the gateway's cost per request is what it adds to every
reward; a framework's routing and middleware were about half of it. The scoring
POST routes need none of that: they read bytes, call :meth:`Gateway.answer` and
write JSON. Everything else (liveness, readiness, /metrics) passes through to
the wrapped app.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from reward_gateway.errors import forget
from reward_gateway.gateway import Answer, Gateway

logger = logging.getLogger("reward_gateway")

# Far above any real batch (8192 items of long text), low enough that one bad
# client cannot take the gateway's memory.
MAX_BODY_BYTES = 256 * 1024 * 1024


class ScoringFront:
    def __init__(self, gateway: Gateway, app: Any, max_body_bytes: int = MAX_BODY_BYTES):
        self.gateway = gateway
        self.app = app
        self.scoring_paths = gateway.paths
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        label = self.scoring_paths.get(scope.get("path", "")) if scope["type"] == "http" else None
        if label is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _send_json(send, Answer(405, {"error": f"{scope['path']} takes POST"}, {"Allow": "POST"}))
            return
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            await _send_json(send, Answer(413, {"error": f"request body over {self.max_body_bytes} bytes"}))
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
        try:
            answer = await self.gateway.answer(label, body, authorization)
        except Exception as error:  # the client gets a message, never a stack trace
            logger.exception("unexpected error on %s", scope["path"])
            answer = Answer(500, {"error": "internal error in the reward gateway"})
            forget(error)
        await _send_json(send, answer)


async def _read_body(receive: Any, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_json(send: Any, answer: Answer) -> None:
    payload = orjson.dumps(answer.body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
