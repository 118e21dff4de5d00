"""Coalescing and fair share against the fake vLLM (reward_gateway.scoring.coalesce, reward_gateway.scoring.fair_queue).

The real vLLM's side (scores, its refusal of an over-long text, prefix-cache hits): test_gateway_coalesce_vllm.py."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from reward_gateway.scoring.coalesce import QueueObserver
from reward_gateway.scoring.fair_queue import FairQueue
from reward_testing.fake_vllm import MAX_CHARS, EngineSteps, logit
from reward_testing.gated_upstream import GatedUpstream
from reward_testing.prometheus_text import sample_sum
from reward_testing.waiting import wait_until

ON = {"coalesce": "true", "coalesce_max_wait_ms": "20"}


def texts_of(calls) -> list[list[str]]:
    return [body["input"] for path, body in calls if path == "/classify"]


def test_concurrent_single_item_requests_share_calls_and_each_gets_its_own_score(start_gateway, backend):
    # vLLM held busy at a gate until all 64 requests are in the gateway: they merge however spread
    # their arrivals are on a loaded machine (an idle gateway sends at once, by design)
    gate = GatedUpstream(backend.url)
    try:
        gateway = start_gateway(upstream=gate.url, **ON)
        queries = [f"sample {i} " + "x" * (i % 7) for i in range(64)]

        def ask(query: str):
            return gateway.post("/get_reward", json={"query": [query]})

        def inside() -> float:
            return sample_sum(gateway.get("/metrics").text, "reward_gateway_inflight_requests")

        gate.close_gate()
        with ThreadPoolExecutor(64) as pool:
            asked = [pool.submit(ask, query) for query in queries]
            try:
                wait_until("the 64 requests in the gateway", lambda: inside() >= 64, timeout=30, interval=0.01)
            finally:
                gate.open_gate()
            answers = [future.result() for future in asked]
    finally:
        gate.stop()
    for query, answer in zip(queries, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["rewards"] == pytest.approx([logit(query)])
    calls = texts_of(backend.calls)
    assert sorted(text for call in calls for text in call) == sorted(queries)
    assert len(calls) <= 5, [len(call) for call in calls]  # at most 4 in flight at the gate, then the rest as one
    assert all(len(call) <= 64 for call in calls)


def test_a_merged_call_is_sent_sorted_so_shared_prompts_sit_together(start_gateway, backend):
    gateway = start_gateway(**ON)
    items = [{"text": f"prompt {i % 2} completion {i}"} for i in range(8)]  # ungrouped: one part each
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.json()["rewards"] == pytest.approx([logit(item["text"]) for item in items])
    (call,) = texts_of(backend.calls)
    assert call == sorted(item["text"] for item in items)


def test_an_over_long_text_fails_only_its_own_request(start_gateway, backend):
    gateway = start_gateway(**ON)
    queries = (
        [[f"fine {i}"] for i in range(20)] + [["y" * (MAX_CHARS + 1)]] + [[f"also fine {i}", "b"] for i in range(5)]
    )

    with ThreadPoolExecutor(len(queries)) as pool:
        answers = list(pool.map(lambda query: gateway.post("/get_reward", json={"query": query}), queries))
    for query, answer in zip(queries, answers, strict=True):
        if len(query[0]) > MAX_CHARS:
            assert answer.status_code == 400 and "maximum context length" in answer.json()["error"]
        else:
            assert answer.status_code == 200, answer.text
            assert answer.json()["rewards"] == pytest.approx([logit(text) for text in query])


def test_a_vllm_failure_fails_only_the_requests_in_that_call(start_gateway, backend):
    gateway = start_gateway(**ON)
    backend.misbehaviour = "duplicate_index"
    broken = gateway.post("/get_reward", json={"query": ["a", "b"]})
    assert broken.status_code == 502 and "index" in broken.json()["error"]
    backend.misbehaviour = None
    assert gateway.post("/get_reward", json={"query": ["a"]}).json()["rewards"] == pytest.approx([logit("a")])


def test_an_idle_gateway_sends_at_once(start_gateway, backend):
    gateway = start_gateway(coalesce="true", coalesce_max_wait_ms="5000")
    started = time.perf_counter()
    assert gateway.post("/get_reward", json={"query": ["alone"]}).status_code == 200
    # A wait would be the full 5 s: nothing was in flight, so the call went at once.
    assert time.perf_counter() - started < 4


def test_validation_failure_is_answered_before_anything_is_queued(start_gateway, backend):
    gateway = start_gateway(**ON)
    answer = gateway.post("/get_reward", json={"query": ["a", 3]})
    assert answer.status_code == 400
    assert backend.calls == []


def test_the_queue_figures_are_exported_by_client(start_gateway, backend):
    gateway = start_gateway(**ON)
    gateway.post("/get_reward", json={"query": ["a"]}, headers={"X-Reward-Client": "job-a"})
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_client_queue_wait_seconds_count{client="job-a",model="rm"} 1.0' in metrics
    assert 'reward_gateway_client_queue_items{client="job-a",model="rm"} 0.0' in metrics
    assert 'reward_gateway_upstream_batch_items_count{model="rm"} 1.0' in metrics


def test_the_bearer_tokens_name_is_the_client(start_gateway, backend, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("trainer-a secret-one\nsecret-two\n")
    gateway = start_gateway(auth_token_file=str(tokens), **ON)
    headers = {"Authorization": "Bearer secret-one", "X-Reward-Client": "someone-else"}
    assert gateway.post("/get_reward", json={"query": ["a"]}, headers=headers).status_code == 200
    assert (
        gateway.post("/get_reward", json={"query": ["a"]}, headers={"Authorization": "Bearer secret-two"}).status_code
        == 200
    )
    metrics = gateway.get("/metrics", headers={"Authorization": "Bearer secret-two"}).text
    assert 'client_queue_wait_seconds_count{client="trainer-a",model="rm"}' in metrics
    assert 'client="someone-else"' not in metrics
    assert 'client_queue_wait_seconds_count{client="token-' in metrics


@dataclass(eq=False)
class _Entry:
    client: str
    items: int
    cost: int = 1
    enqueued: float = 0.0
    dispatched: bool = False

    def wanted(self) -> bool:
        return True


def test_a_flooding_client_cannot_push_a_light_one_behind_its_backlog():
    queue: FairQueue[_Entry] = FairQueue({"light": 1.0, "heavy": 1.0})
    for _ in range(100):
        queue.push(_Entry("heavy", 8))
    queue.take(8)  # one heavy entry in flight
    queue.push(_Entry("light", 1))
    first = queue.take(8)
    assert [entry.client for entry in first] == ["light"]


def test_weights_share_the_queue_in_proportion_and_nobody_starves():
    queue: FairQueue[_Entry] = FairQueue({"a": 3.0, "b": 1.0})
    for _ in range(400):
        queue.push(_Entry("a", 1))
        queue.push(_Entry("b", 1))
    taken = [entry.client for _ in range(100) for entry in queue.take(4)]
    assert taken.count("a") == pytest.approx(300, abs=4)
    assert taken.count("b") == pytest.approx(100, abs=4)


def test_with_fair_share_off_the_queue_is_first_come_first_served():
    queue: FairQueue[_Entry] = FairQueue({}, fair=False)
    for client in ["heavy"] * 10 + ["light"]:
        queue.push(_Entry(client, 1))
    assert [entry.client for entry in queue.take(11)] == ["heavy"] * 10 + ["light"]


class _Recorder(QueueObserver):
    def __init__(self):
        self.events: list[tuple[str, str]] = []

    def queued(self, client: str, depth: int) -> None:
        self.events.append(("queued", client))

    def sent(self, client: str, depth: int, waited_s: float) -> None:
        self.events.append(("sent", client))


def test_the_light_client_waits_for_at_most_one_batch_behind_a_flood(start_gateway, backend):
    """Against the fake with a slow engine: the heavy client keeps 256 single-item requests queued; the light
    client's request leaves the queue in the first call after it arrives (fair share's bound: one call per busy
    client ahead of it, the one in flight). That call may carry heavy items too, even before the light one
    (equal start tags go in arrival order), but no call of heavy items alone leaves ahead of it: with a backlog
    of at least ``max_items`` such a call would take ``max_items`` of them."""
    gateway = start_gateway(coalesce="true", coalesce_max_items="16", coalesce_max_batches="1")
    recorder = gateway.gateway.scorer.coalescer.observe = _Recorder()
    backend.delay_s = 0.05

    async def flood_and_probe() -> None:
        # Each client its own connections: the light one must not queue behind the heavy one's in httpx's pool.
        limits = httpx.Limits(max_connections=None)
        async with (
            httpx.AsyncClient(base_url=str(gateway.base_url), timeout=60, limits=limits) as client,
            httpx.AsyncClient(base_url=str(gateway.base_url), timeout=60) as own,
        ):
            # The light client's connection is open before the flood (its connect would queue behind 256).
            assert (await own.get("/health")).status_code == 200
            heavy = [
                asyncio.ensure_future(
                    client.post("/get_reward", json={"query": [f"h{i}"]}, headers={"X-Reward-Client": "heavy"})
                )
                for i in range(256)
            ]
            flooded = lambda: gateway.gateway.scorer.coalescer.queue.items >= 64  # noqa: E731
            await asyncio.to_thread(wait_until, "the flood queued at the gateway", flooded, 60, 0.005)
            light = await own.post("/get_reward", json={"query": ["light"]}, headers={"X-Reward-Client": "light"})
            assert light.status_code == 200
            assert all(answer.status_code == 200 for answer in await asyncio.gather(*heavy))

    try:
        asyncio.run(flood_and_probe())
    finally:
        backend.delay_s = 0.002
    events = recorder.events
    arrived, left = events.index(("queued", "light")), events.index(("sent", "light"))
    queued_before = events[:arrived].count(("queued", "heavy")) - events[:arrived].count(("sent", "heavy"))
    assert queued_before >= 16, "the flood had a backlog when the light request arrived"
    ahead = events[arrived:left].count(("sent", "heavy"))
    assert ahead < 16, f"a call of heavy items alone left the queue ahead of the light one ({ahead} heavy items)"


def _merged_calls_under_a_flood(start_gateway, backend, max_call_ms: str, clients: int = 2) -> list[int]:
    """Sizes of the calls a flood of 160 single-text requests became, in order, against the fake's engine
    answering 2 texts of 10 characters per 10 ms step (200 a second, one call in flight). The flood is one
    client's; with ``clients`` 2 another client has called just before (the time bound is for clients
    sharing vLLM)."""
    gateway = start_gateway(coalesce="true", coalesce_max_batches="1", coalesce_max_call_ms=max_call_ms)
    if clients == 2:
        other = gateway.post("/get_reward", json={"query": ["the other 1"]}, headers={"X-Reward-Client": "b"})
        assert other.status_code == 200, other.text
    backend.calls.clear()
    backend.engine = EngineSteps(step_s=0.01, tokens_per_step=2, tokens_per_text=1)
    queries = [f"sample {i:03d}" for i in range(160)]

    def ask(query: str) -> httpx.Response:
        return gateway.post("/get_reward", json={"query": [query]}, headers={"X-Reward-Client": "a"})

    try:
        with ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(ask, queries))
    finally:
        backend.engine = None
    for query, answer in zip(queries, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["rewards"] == pytest.approx([logit(query)])
    return [len(call) for call in texts_of(backend.calls)]


def test_a_merged_call_holds_no_more_than_vllm_answers_in_the_time_bound(start_gateway, backend):
    """At most what vLLM answered in COALESCE_MAX_CALL_MS at its pace measured on the calls before: the
    engine answers 200 texts a second, so 40 ms is at most 8 texts (the gateway's measured pace can only be
    slower than the engine's, never faster). The first call, with no pace known yet, goes by count alone."""
    sizes = _merged_calls_under_a_flood(start_gateway, backend, max_call_ms="40")
    assert sum(sizes) == 160
    assert max(sizes[1:]) <= 8, sizes


def test_without_a_time_bound_a_merged_call_is_bounded_by_count_alone(start_gateway, backend):
    sizes = _merged_calls_under_a_flood(start_gateway, backend, max_call_ms="0")
    assert sum(sizes) == 160
    assert max(sizes) > 8, sizes  # the flood queued behind the call in flight goes as one call


def test_one_client_alone_is_bounded_by_count_alone(start_gateway, backend):
    """Nobody to stand in front of: the time bound holds only while clients share vLLM."""
    sizes = _merged_calls_under_a_flood(start_gateway, backend, max_call_ms="40", clients=1)
    assert sum(sizes) == 160
    assert max(sizes) > 8, sizes
