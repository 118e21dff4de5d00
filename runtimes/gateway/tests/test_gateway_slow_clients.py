"""Slow or stuck peers do not hold the gateway's resources for ever: request heads
that never finish, and calls waiting for a free upstream slot behind a stuck vLLM."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.config.gateway import load_config
from reward_gateway.http import server
from reward_gateway.http.routes import Gateway
from reward_gateway.signals.metrics import GatewayMetrics
from reward_testing.fake_vllm import serve_in_thread


@pytest.fixture
def guarded_url(monkeypatch):
    """The gateway's HTTP protocol on a real port, with a short head timeout."""
    monkeypatch.setattr(server, "HEAD_TIMEOUT_S", 0.3)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve_in_thread(app, http=server.GuardedHttpToolsProtocol) as url:
        yield url


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow:"])
def test_a_head_that_does_not_arrive_in_time_closes_the_connection(guarded_url, sent):
    host, port = guarded_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(sent)
        assert raw.recv(100) == b""  # closed by the gateway; a timeout here fails the test


def test_a_kept_alive_connection_serves_requests_past_the_head_timeout(guarded_url):
    host, port = guarded_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        for _ in range(2):
            raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert raw.recv(1000).startswith(b"HTTP/1.1 200")
            # idle longer than the head timeout: that is keep-alive's to bound, not the head's
            raw.settimeout(0.6)
            with pytest.raises(TimeoutError):
                raw.recv(100)
            raw.settimeout(5)


def test_a_call_waiting_for_a_free_upstream_slot_gives_up_with_503():
    async def main():
        arrived = asyncio.Event()

        async def never_answers(reader, writer):
            arrived.set()
            await reader.read()  # until the gateway gives up and closes

        upstream = await asyncio.start_server(never_answers, "127.0.0.1", 0)
        settings = {
            "REWARD_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}",
            "REWARD_GATEWAY_MODEL_NAME": "rm",
            "REWARD_GATEWAY_MAX_CONCURRENCY": "1",
            "REWARD_GATEWAY_REQUEST_TIMEOUT_SECONDS": "1",
        }
        gateway = Gateway(load_config(settings), GatewayMetrics(CollectorRegistry()))
        body = orjson.dumps({"query": ["a"]})
        async with upstream, asyncio.timeout(10):
            first = asyncio.create_task(gateway.answer("get_reward", body, None))
            await arrived.wait()  # the one slot is taken by a call vLLM never answers
            # Two more wait for the slot: one may get it when the first times out,
            # the other is still waiting when its own wait is spent.
            waiting = await asyncio.gather(*(gateway.answer("get_reward", body, None) for _ in range(2)))
            assert (await first).status == 504
            gave_up = [answer for answer in waiting if answer.status == 503]
            assert gave_up, [answer.status for answer in waiting]
            assert "no free slot" in gave_up[0].body["error"] and "Retry-After" in gave_up[0].headers
            await gateway.close()

    asyncio.run(main())
