"""Coalescing in front of a real vLLM (the pinned CPU build) serving a tiny random-weight sequence model.

- 64 concurrent OpenRLHF requests of 1-4 texts each, one of them over-long among them: every request
  gets its own scores (vLLM's for the same text sent alone), in order; the over-long one alone gets
  vLLM's 400, the others are not poisoned by it.
- Completions of one prompt sent as separate concurrent requests, queued behind a call in flight, end
  up in one vLLM call, and vLLM's own prefix-cache counters (vllm:prefix_cache_hits_total /
  _queries_total) count the shared blocks. The call in flight is held at a gate between the gateway
  and vLLM (reward_testing.gated_upstream) until the gateway's metrics show the eight queued: a signal,
  not a race against long calls on a loaded machine.

The gateway runs as the operator renders it, with REWARD_GATEWAY_COALESCE=true. One vLLM for the
module; without the vLLM venv the module skips (or fails where REWARD_OPERATOR_REQUIRE_VLLM=1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import NamedTuple

import httpx
import pytest

from reward_operator.render import render_reward_model
from reward_testing.gated_upstream import GatedUpstream
from reward_testing.gateway_fixtures import gateway_process, rendered_gateway
from reward_testing.ports import free_port
from reward_testing.prometheus_text import sample_sum
from reward_testing.tiny_model_maker import WORD_LIST
from reward_testing.vllm_server import started_vllm, wait_healthy
from reward_testing.waiting import wait_until

WORDS = WORD_LIST.split()
TOLERANCE = 1e-4


class Served(NamedTuple):
    vllm: str  # vLLM's own URL (its metrics, scores of a text alone)
    gateway: str  # the coalescing gateway's URL
    model: str  # the served model name
    gate: GatedUpstream  # between the two: a test can hold vLLM's calls


def reward_model() -> dict:
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "tiny-sequence", "namespace": "test", "uid": "00000000-0000-4000-8000-000000000002"},
        "spec": {
            "model": {"uri": "hf://tiny/reward-model", "kind": "sequence", "dtype": "float32"},
            "resources": {"gpus": 0},
        },
    }


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory) -> Iterator[Served]:
    """The coalescing gateway in front of a gate in front of vLLM."""
    workdir = tmp_path_factory.mktemp("coalesce")
    isvc = next(o for o in render_reward_model(reward_model()) if o["kind"] == "InferenceService")
    with ExitStack() as stack:
        vllm = stack.enter_context(started_vllm(isvc, tiny_models["sequence"].path, workdir / "vllm"))
        wait_healthy(vllm)
        gate = GatedUpstream(vllm.url)
        stack.callback(gate.stop)
        env, args = rendered_gateway(isvc)
        port = free_port()
        env.update(
            {
                "REWARD_GATEWAY_PORT": str(port),
                "REWARD_GATEWAY_UPSTREAM_URL": gate.url,
                "REWARD_GATEWAY_COALESCE": "true",
                "REWARD_GATEWAY_COALESCE_MAX_WAIT_MS": "10",
                "REWARD_GATEWAY_COALESCE_MAX_ITEMS": "16",
                "REWARD_GATEWAY_COALESCE_MAX_BATCHES": "1",
            }
        )
        log = workdir / "gateway.log"
        stack.enter_context(gateway_process(args, env, port, env["REWARD_GATEWAY_MODEL_NAME"], log))
        yield Served(vllm.url, f"http://127.0.0.1:{port}", env["REWARD_GATEWAY_MODEL_NAME"], gate)


def sentence(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(words))


def alone(vllm: str, model: str, text: str) -> float:
    """vLLM's raw logit for one text sent alone, as the gateway sends finished text."""
    body = {"model": model, "input": [text], "add_special_tokens": False, "use_activation": False}
    answer = httpx.post(f"{vllm}/classify", json=body, timeout=120).json()
    return answer["data"][0]["probs"][-1]


def test_each_of_64_concurrent_requests_gets_its_own_scores_and_a_poisoned_one_fails_alone(served):
    vllm, gateway, model, _ = served
    queries = [[sentence(i * 5 + j, 3 + (i + j) % 11) for j in range(1 + i % 4)] for i in range(64)]
    poisoned = 17
    queries[poisoned] = [sentence(1, 4), " ".join(["reward"] * 3000)]  # past the model's 1024 positions

    def ask(query: list[str]) -> httpx.Response:
        return httpx.post(f"{gateway}/get_reward", json={"query": query}, timeout=300)

    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(ask, queries))
    bad = answers[poisoned]
    assert bad.status_code == 400 and bad.json()["error"], bad.text
    for index, (query, answer) in enumerate(zip(queries, answers, strict=True)):
        if index == poisoned:
            continue
        assert answer.status_code == 200, answer.text
        want = [alone(vllm, model, text) for text in query]
        assert answer.json()["rewards"] == pytest.approx(want, abs=TOLERANCE)
    batches = sample_sum(httpx.get(f"{gateway}/metrics").text, "reward_gateway_upstream_batch_items_count")
    assert batches < 63, f"{batches} vLLM calls for 63 requests: nothing was merged"


def test_completions_of_one_prompt_in_separate_requests_share_one_call_and_hit_the_prefix_cache(served):
    vllm, gateway, _, gate = served
    prompt = sentence(99, 400)  # several of vLLM's 128-token blocks on the CPU
    completions = [f"{prompt} answer {sentence(i, 6)}" for i in range(8)]
    before = sample_sum(httpx.get(f"{vllm}/metrics").text, "vllm:prefix_cache_hits_total")
    calls = lambda: sample_sum(httpx.get(f"{gateway}/metrics").text, "reward_gateway_upstream_batch_items_count")  # noqa: E731
    queued = lambda: sample_sum(httpx.get(f"{gateway}/metrics").text, "reward_gateway_client_queue_items")  # noqa: E731
    calls_before = calls()

    async def hold_then_send() -> list[httpx.Response]:
        # One call held at the gate in front of vLLM (MAX_BATCHES is 1: nothing else goes meanwhile);
        # the eight, sent as separate requests, queue at the gateway behind it, however spread their
        # arrivals are on a loaded machine; then the gate opens.
        async with httpx.AsyncClient(base_url=gateway, timeout=300) as client:
            gate.close_gate()
            try:
                held = asyncio.ensure_future(client.post("/get_reward", json={"query": [sentence(7, 20)]}))
                await asyncio.to_thread(wait_until, "the first call held at the gate", lambda: gate.held == 1, 60, 0.01)
                answers = [asyncio.ensure_future(client.post("/get_reward", json={"query": [t]})) for t in completions]
                await asyncio.to_thread(wait_until, "the eight queued at the gateway", lambda: queued() == 8, 60, 0.01)
            finally:
                gate.open_gate()
            assert (await held).status_code == 200
            return list(await asyncio.gather(*answers))

    answers = asyncio.run(hold_then_send())
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    hits = sample_sum(httpx.get(f"{vllm}/metrics").text, "vllm:prefix_cache_hits_total") - before
    eight = calls() - calls_before - 1
    assert eight == 1, f"the eight completions took {eight} vLLM calls"
    assert hits >= 128 * 6, f"vLLM counted {hits} prefix-cache hits for eight completions of one prompt"


def test_a_flooding_client_does_not_hold_a_light_one_behind_its_backlog(served):
    """Fair share's bound: a light client's request waits in the gateway's queue for the call in flight
    and its own, never for a flooding client's backlog. Judged on the gateway's own queue-wait figures
    of both clients in the same run (reward_gateway_client_queue_wait_seconds), not on a time: first
    come, first served would keep the light request queued as long as the flood items queued with it,
    longer than their mean."""
    _, gateway, _, _ = served
    flood = 768

    def waited(client: str) -> tuple[float, float]:
        """(seconds waited in the queue in all, requests) of ``client``'s."""
        text = httpx.get(f"{gateway}/metrics").text
        series = f'reward_gateway_client_queue_wait_seconds_{{}}{{{{client="{client}",model="tiny-sequence"}}}}'
        return sample_sum(text, series.format("sum")), sample_sum(text, series.format("count"))

    def queued() -> float:
        text = httpx.get(f"{gateway}/metrics").text
        return sample_sum(text, 'reward_gateway_client_queue_items{client="heavy",model="tiny-sequence"}')

    async def flood_and_probe() -> tuple[int, float]:
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=gateway, timeout=600, limits=limits) as client:
            body = lambda i: {"query": [sentence(1000 + i, 200)]}  # noqa: E731
            heavy = [
                asyncio.ensure_future(client.post("/get_reward", json=body(i), headers={"X-Reward-Client": "heavy"}))
                for i in range(flood)
            ]
            await asyncio.to_thread(wait_until, "the flood queued at the gateway", lambda: queued() >= 256, 300, 0.01)
            backlog = queued()
            light = await asyncio.to_thread(
                httpx.post, f"{gateway}/get_reward", json={"query": [sentence(5, 50)]},
                headers={"X-Reward-Client": "light"}, timeout=600,
            )  # fmt: skip
            answers = await asyncio.gather(*heavy)
            assert all(answer.status_code == 200 for answer in answers)
            return light.status_code, backlog

    status, backlog = asyncio.run(flood_and_probe())
    assert status == 200
    (light_wait, light_count), (heavy_wait, heavy_count) = waited("light"), waited("heavy")
    assert (light_count, heavy_count) == (1, flood)
    heavy_mean = heavy_wait / heavy_count
    assert light_wait <= heavy_mean / 4, (
        f"the light request waited {light_wait:.3f} s in the queue, the flood's {heavy_mean:.3f} s on average "
        f"({backlog:.0f} flood items were queued when it was sent)"
    )
