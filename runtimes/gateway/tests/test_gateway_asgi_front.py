"""The plain ASGI front that answers the scoring routes ahead of the framework."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.config.gateway import load_config
from reward_gateway.http.asgi import ScoringFront
from reward_gateway.http.routes import Gateway
from reward_gateway.signals.metrics import GatewayMetrics


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


def test_an_unexpected_failure_is_a_500_with_a_message_not_a_trace_and_counted(gateway, monkeypatch):
    async def broken(*args):
        raise RuntimeError("secret internals")

    monkeypatch.setitem(gateway.routes, "get_reward", broken)
    status, body = call(ScoringFront(gateway, None), "POST", "/get_reward", b'{"query": []}')
    assert status == 500
    assert b"internal error" in body and b"secret internals" not in body and b"Traceback" not in body
    counted = gateway.metrics.registry.get_sample_value(
        "reward_gateway_requests_total", {"model": "rm", "route": "get_reward", "code": "500"}
    )
    assert counted == 1


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(gateway):
    async def receive():
        raise AssertionError("the body was read")

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    front = ScoringFront(gateway, None, max_body_bytes=100)
    scope = {"type": "http", "method": "POST", "path": "/get_reward", "headers": [(b"content-length", b"10000000000")]}
    asyncio.run(front(scope, receive, send))
    assert sent[0]["status"] == 413


def test_requests_over_the_memory_budget_wait_for_room_with_503(gateway):
    front = ScoringFront(gateway, None, max_held_bytes=1_000_000)
    front.held_bytes = 999_000  # as if other requests held it
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b'{"query": ["a", "b"]}', "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/get_reward", "headers": [(b"content-length", b"21")]}
    asyncio.run(front(scope, receive, send))
    assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
    assert front.held_bytes == 999_000  # what the refused request held is given back
    front.held_bytes = 0
    assert call(front, "POST", "/get_reward", b'{"query": ["a", "b"]}')[0] == 200
    assert front.held_bytes == 0


def test_a_body_that_could_not_fit_even_alone_is_refused_with_413(gateway):
    # Small in bytes, but a million strings take far more memory once parsed.
    body = b'{"query": ["a"], "labels": [[' + b",".join([b'""'] * 1_000_000) + b"]]}"
    front = ScoringFront(gateway, None, max_body_bytes=len(body), max_held_bytes=256 * 1024 * 1024)
    status, answer = call(front, "POST", "/get_reward", body)
    assert status == 413 and b"too many strings" in answer


def test_a_body_that_does_not_arrive_in_time_answers_408(gateway):
    sent: list[dict] = []
    first = True

    async def receive():  # one chunk, then nothing more
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"query": ', "more_body": True}
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    async def main():
        front = ScoringFront(gateway, None, body_timeout_s=0.2)
        scope = {"type": "http", "method": "POST", "path": "/get_reward", "headers": []}
        async with asyncio.timeout(10):  # a bound for the test, not the gateway's
            await front(scope, receive, send)
        assert front.held_bytes == 0

    asyncio.run(main())
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]


def test_refusals_ahead_of_the_routes_are_counted_too(gateway):
    assert call(ScoringFront(gateway, None), "GET", "/get_reward")[0] == 405
    assert call(ScoringFront(gateway, None, max_body_bytes=10), "POST", "/get_reward", b"x" * 50)[0] == 413
    for code in ("405", "413"):
        labels = {"model": "rm", "route": "get_reward", "code": code}
        assert gateway.metrics.registry.get_sample_value("reward_gateway_requests_total", labels) == 1


def test_a_chunked_body_is_charged_as_it_arrives(gateway):
    """No Content-Length (chunked): the bytes read so far count against the budget at once, so
    many slow chunked uploads cannot each buffer up to the body limit uncharged."""
    front = ScoringFront(gateway, None, max_held_bytes=20_000)
    charged: list[int] = []
    chunks = [b"x" * 3000] * 3 + [b"x" * 3000]

    async def receive():
        charged.append(front.held_bytes)
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def main():
        front.held_bytes = 9_000  # another request's
        await front({"type": "http", "method": "POST", "path": "/get_reward", "headers": []}, receive, send)

    asyncio.run(main())
    assert charged == [9_000, 12_000, 15_000, 18_000], "each chunk charged as it is read"
    assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
    assert front.held_bytes == 9_000, "the refused upload's charge is given back"


def test_a_chunked_body_over_the_whole_budget_is_413(gateway):
    front = ScoringFront(gateway, None, max_held_bytes=1_000)
    status, _ = call(front, "POST", "/get_reward", b"x" * 5_000, chunks=5)
    assert status == 413 and front.held_bytes == 0


def test_a_token_models_charge_covers_vllms_answer_per_token(backend):
    """A token model's answer carries a value per token: its requests are charged for it."""
    env = {"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
    fronts = {
        kind: ScoringFront(
            Gateway(load_config({**env, "REWARD_GATEWAY_MODEL_KIND": kind}), GatewayMetrics(CollectorRegistry())), None
        )
        for kind in ("sequence", "token")
    }
    assert fronts["sequence"].cost_per_byte == 13
    assert fronts["token"].cost_per_byte == 13 + 370


def test_the_budget_is_the_containers_limit_less_the_process(backend):
    env = {"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
    limit = 2 * 1024**3
    config = load_config({**env, "REWARD_GATEWAY_MEMORY_LIMIT_BYTES": str(limit)})
    assert config.memory_budget_bytes == limit - 256 * 1024**2
    assert (
        ScoringFront(Gateway(config, GatewayMetrics(CollectorRegistry())), None).max_held_bytes == limit - 256 * 1024**2
    )
    with pytest.raises(ValueError, match="MEMORY_LIMIT_BYTES"):
        load_config({**env, "REWARD_GATEWAY_MEMORY_LIMIT_BYTES": str(300 * 1024**2)})
