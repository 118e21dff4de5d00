"""Hostile input against the real `python -m reward_gateway` process, and a fake vLLM
that misbehaves on demand: every answer is a 4xx/5xx with a message, at once,
counted, and the process's memory stays flat."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest

from reward_testing.fake_vllm import MAX_CHARS
from reward_testing.ports import free_port


@pytest.fixture
def gateway(run_gateway, backend):
    port = free_port()
    env = {
        "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(port),
        "REWARD_GATEWAY_MAX_ITEMS": "1000",
    }
    url, _ = run_gateway([], env, port, "rm")
    with httpx.Client(base_url=url, timeout=30) as client:
        client.port = port
        client.process = run_gateway.process
        yield client


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return sock.recv(1000)


def test_a_huge_declared_body_is_refused_before_it_is_sent(gateway):
    head = b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Content-Length: 10000000000\r\n\r\n"  # and no body follows
    assert raw(gateway.port, head).startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize(
    ("route", "body", "status"),
    [
        ("/get_reward", b'{"query": [' + b",".join([b"0"] * 1_000_000) + b"]}", 400),
        ("/get_reward", b'{"query": [' + b",".join([b'"a"'] * 1_000_000) + b"]}", 413),  # too many strings
        ("/get_reward", b'{"query": ["a"], "labels": [' + b",".join([b"0"] * 100_000) + b"]}", 400),
        ("/classify", b'{"input": "x", "deep": ' + b"[" * 1000 + b"]" * 1000 + b"}", 400),
        ("/v1/rewards", b'{"items": [' + b"[" * 200 + b"]" * 200 + b"]}", 400),
        ("/v1/rewards", b'{"items": "' + b"\xff" * 10 + b'"}', 400),
        ("/get_reward", b"\x00" * 1000, 400),
    ],
)
def test_hostile_bodies_answer_4xx_quickly(gateway, backend, route, body, status):
    started = time.monotonic()
    answer = gateway.post(route, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status, answer.text
    assert "error" in answer.json() and "Traceback" not in answer.text
    assert time.monotonic() - started < 5
    assert backend.calls == []


@pytest.mark.parametrize(
    ("misbehaviour", "status"),
    [("429", 503), ("cut", 502), ("duplicate_index", 502), ("index_out_of_range", 502), ("oversized", 502)],
)
def test_a_misbehaving_vllm_gets_an_answer_at_once(gateway, backend, misbehaviour, status):
    backend.misbehaviour = misbehaviour
    started = time.monotonic()
    answer = gateway.post("/classify", json={"input": ["a", "bb"]})
    assert answer.status_code == status, answer.text
    assert time.monotonic() - started < 5  # no scale-from-zero wait (300 s here)
    if status == 503:
        assert int(answer.headers["retry-after"]) > 0
    if misbehaviour == "oversized":  # not read into memory past its bound
        assert "more than its request allows" in answer.json()["error"]
    metrics = gateway.get("/metrics").text
    assert f'reward_gateway_requests_total{{code="{status}",model="rm",route="classify"}} 1.0' in metrics


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_memory_stays_flat_over_rounds_of_failing_and_succeeding_requests(gateway, backend):
    long_text = "y" * 3000
    good = orjson.dumps({"query": [f"{i} {long_text}" for i in range(16)]})
    bad = orjson.dumps({"query": [f"{i} {long_text}" for i in range(15)] + ["x" * (MAX_CHARS + 1)]})
    headers = {"content-type": "application/json"}

    def one_round() -> None:
        for _ in range(40):
            assert gateway.post("/get_reward", content=good, headers=headers).status_code == 200
            assert gateway.post("/get_reward", content=bad, headers=headers).status_code == 400

    one_round()  # warm-up: connections, caches, allocator arenas
    warm = rss_kib(gateway.process.pid)
    seen = []
    for _ in range(4):
        one_round()
        seen.append(rss_kib(gateway.process.pid) - warm)
    # Each failed request cancels its sibling calls and closes their connections;
    # kept alive (in reference cycles the calm collector leaves), that was about
    # 1 MiB a round. Flat is a few KiB.
    assert seen[-1] < 1024, f"RSS grew after warm-up, by round (KiB): {seen}"


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


PEAK_SHAPES = {
    # finished text: parsed, validated, sent
    "text": ({}, lambda text: {"text": text, "group": "g"}),
    # a conversation rendered here: parsed, validated, templated, sent (the most work per byte)
    "rendered": (
        {"REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway", "REWARD_GATEWAY_CHAT_TEMPLATE": "{{ messages }}"},
        lambda text: {"prompt": text[: len(text) // 2], "response": text[len(text) // 2 : -100], "group": "g"},
    ),
}


@pytest.mark.parametrize("shape", sorted(PEAK_SHAPES))
def test_the_peak_under_the_largest_allowed_requests_stays_under_the_container_limit(run_gateway, backend, shape):
    """The operator's default transformer limit for sequence models is 1 GiB, which the gateway reads
    through the downward API; requests of the largest allowed size sent all at once are held as far
    as the budget goes (the rest wait with 503), and the process's peak stays under the limit."""
    limit = 1024**3
    port = free_port()
    env = {
        "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(port),
        "REWARD_GATEWAY_MEMORY_LIMIT_BYTES": str(limit),
    }
    settings, item = PEAK_SHAPES[shape]
    url, _ = run_gateway([], env | settings, port, "rm")
    pid = run_gateway.process.pid

    def body(items: int) -> bytes:  # one group: a single vLLM call carrying every text
        return orjson.dumps({"items": [item(f"{i:05d}" + "t" * (MAX_CHARS - 5)) for i in range(items)]})

    bodies = [body(8192)] * 2 + [body(4096)] * 4 + [body(2048)] * 6
    assert max(map(len, bodies)) <= 32 * 1024 * 1024, "the largest body the gateway accepts"

    async def send_all() -> list[int]:
        import asyncio

        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            answers = await asyncio.gather(
                *(client.post("/v1/rewards", content=b, headers={"content-type": "application/json"}) for b in bodies)
            )
        return [answer.status_code for answer in answers]

    import asyncio

    statuses = asyncio.run(send_all())
    peak = peak_rss_kib(pid) * 1024
    print(f"\n{shape}: peak RSS {peak / 2**20:.0f} MiB of a {limit / 2**20:.0f} MiB limit; answers {sorted(statuses)}")
    assert set(statuses) <= {200, 503} and 200 in statuses, statuses
    assert peak < limit, f"peak RSS {peak / 2**20:.0f} MiB over the {limit / 2**20:.0f} MiB limit"
