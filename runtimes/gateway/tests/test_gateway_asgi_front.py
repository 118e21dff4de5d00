"""The plain ASGI front that answers the scoring routes ahead of the framework."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.asgi import ScoringFront
from reward_gateway.config import load_config
from reward_gateway.gateway import Gateway
from reward_gateway.metrics import GatewayMetrics


def call(front: ScoringFront, method: str, path: str, body: bytes = b"", chunks: int = 1) -> tuple[int, bytes]:
    """Drive the ASGI app directly, the way uvicorn would."""
    parts = [body[i::chunks] for i in range(chunks)] if chunks > 1 else [body]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(front(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def gateway(backend):
    return Gateway(
        load_config({"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}),
        GatewayMetrics(CollectorRegistry()),
    )


def test_other_paths_reach_the_wrapped_app(gateway):
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    status, _ = call(ScoringFront(gateway, app), "GET", "/metrics")
    assert status == 204 and reached == ["/metrics"]


def test_scoring_routes_take_post_only(gateway):
    status, body = call(ScoringFront(gateway, None), "GET", "/get_reward")
    assert status == 405 and b"takes POST" in body


def test_oversized_bodies_are_refused_with_413(gateway):
    status, body = call(ScoringFront(gateway, None, max_body_bytes=100), "POST", "/get_reward", b"x" * 500, chunks=5)
    assert status == 413 and b"over 100 bytes" in body


def test_an_unexpected_failure_is_a_500_with_a_message_not_a_trace(gateway, monkeypatch):
    async def broken(*args):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(gateway, "answer", broken)
    status, body = call(ScoringFront(gateway, None), "POST", "/get_reward", b'{"query": []}')
    assert status == 500
    assert b"internal error" in body and b"secret internals" not in body and b"Traceback" not in body
