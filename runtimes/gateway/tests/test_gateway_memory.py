"""A request's objects die with its answer, by reference counting alone.

The server tunes the garbage collector down (reward_gateway.http.server: frozen
start-up objects, young collections every 100 000 allocations): anything a
request leaves in a reference cycle is promoted past the young generation
while other requests run, and then waits for a full collection that hardly
ever comes. So no request may leave a cycle behind; failures are where they
hide (an exception's traceback holds the frames that hold the request; a call
cancelled by a failed sibling closes its connection, whose parser holds it). These
tests run with the collector off, which is the server's setting made strict.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from contextlib import contextmanager

import orjson
import pytest
from prometheus_client import CollectorRegistry

from reward_gateway.config.gateway import load_config
from reward_gateway.http.routes import Gateway
from reward_gateway.pipeline.routes import PipelineRole
from reward_gateway.scoring.scorer import Scorer
from reward_gateway.signals.metrics import GatewayMetrics
from reward_gateway.upstream.http_pool import HttpPool
from reward_testing.fake_vllm import MAX_CHARS

OVER_LONG = "x" * (MAX_CHARS + 1)  # the fake vLLM answers 400 for it


@contextmanager
def collector_off():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def leftovers(backend, monkeypatch, route: str, body: dict, planned: bool = True, **env: str) -> tuple[int, list[str]]:
    """Answer one request with the collector off; returns its status and what of it is still alive
    (``planned``: scored through the scorer's plan, as every scoring route is)."""
    watched: list[tuple[str, weakref.ref]] = []
    plan = Scorer.plan

    def watching_plan(self, items, outcomes):
        calls = plan(self, items, outcomes)
        watched.extend((f"item {i}", weakref.ref(item)) for i, item in enumerate(items))
        watched.extend((f"call {i}", weakref.ref(call)) for i, call in enumerate(calls))
        return calls

    monkeypatch.setattr(Scorer, "plan", watching_plan)
    connect = HttpPool._connect

    async def watching_connect(self):
        connection = await connect(self)
        watched.append((f"connection {len(watched)}", weakref.ref(connection)))
        return connection

    monkeypatch.setattr(HttpPool, "_connect", watching_connect)
    settings = {"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
    settings.update({f"REWARD_GATEWAY_{key.upper()}": value for key, value in env.items()})

    async def main() -> tuple[int, list[str]]:
        gateway = Gateway(load_config(settings), GatewayMetrics(CollectorRegistry()))
        answer = await gateway.answer(route, orjson.dumps(body), None)
        await gateway.close()  # its idle connections are the pool's to keep until then
        for _ in range(5):  # the finished tasks' callbacks run, closed connections are lost
            await asyncio.sleep(0)  # noqa: TID251 sleep(0) yields to the loop once: no time passes
        return answer.status, [name for name, ref in watched if ref() is not None]

    with collector_off():
        status, alive = asyncio.run(main())
    assert watched or not planned, "the request was not planned"
    return status, alive


def test_a_succeeding_multi_item_request_leaves_nothing_alive(backend, monkeypatch):
    status, alive = leftovers(backend, monkeypatch, "get_reward", {"query": ["a", "bb", "ccc"]})
    assert status == 200
    assert alive == []


@pytest.mark.parametrize("failing", [0, 1, 3])
def test_a_failing_multi_item_request_leaves_nothing_alive(backend, monkeypatch, failing):
    query = ["a", "bb", "ccc", "dddd"]
    query[failing] = OVER_LONG
    status, alive = leftovers(backend, monkeypatch, "get_reward", {"query": query})
    assert status == 400
    assert alive == [], "a failed request's items wait for a full collection"


def test_a_failing_group_request_leaves_nothing_alive(backend, monkeypatch):
    items = [{"prompt": "p", "response": "r", "group": g} for g in ("a", "b", "a", "b")]
    items.append({"prompt": "p", "response": OVER_LONG})
    status, alive = leftovers(backend, monkeypatch, "rewards", {"items": items})
    assert status == 200  # the over-long item fails alone, in the answer
    assert alive == []


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("both answer", 200),
        ("candidate down", 200),
        ("candidate too slow", 200),
        ("split to a failing candidate", 200),
        ("both refuse an item", 200),
    ],
)
def test_a_rollouts_request_leaves_nothing_alive(backend, candidate_backend, monkeypatch, case, status):
    """Two models per request: the shadow call's outcome, its cancellation and a fallback drop everything too."""
    env = {"canary_url": candidate_backend.url, "canary_half_life_seconds": "0", "canary_shadow_wait_seconds": "0.05"}
    items = [{"prompt": "p", "response": f"r{i}", "group": "a"} for i in range(3)]
    if case == "candidate down":
        candidate_backend.healthy = False
    elif case == "candidate too slow":
        candidate_backend.misbehaviour = "hang"
    elif case == "split to a failing candidate":
        candidate_backend.healthy = False
        env |= {"canary_mode": "split", "canary_percent": "100"}
    else:
        items[1]["response"] = OVER_LONG if case == "both refuse an item" else "r1"
    answer_status, alive = leftovers(backend, monkeypatch, "rewards", {"items": items}, **env)
    assert answer_status == status
    assert alive == []


@pytest.mark.parametrize("role", ["reference", "critic"])
@pytest.mark.parametrize("failing", [None, 0, 2])
def test_a_pipeline_roles_request_leaves_nothing_alive(backend, monkeypatch, role, failing):
    """A role's calls run at once (the prompts' /tokenize beside the scoring call): a failed one
    cancels the others, and neither the request nor a connection may be left in a cycle."""
    requests: list[weakref.ref] = []
    items = PipelineRole._items

    def watching_items(self, body, admit):
        request = items(self, body, admit)
        requests.append(weakref.ref(request))
        return request

    monkeypatch.setattr(PipelineRole, "_items", watching_items)
    body = {"prompts": ["p one", "p two", "p three"], "responses": [" a", " b", " c"]}
    if failing is not None:
        body["responses"][failing] = OVER_LONG
    route = "pipeline_logprobs" if role == "reference" else "pipeline_values"
    status, alive = leftovers(backend, monkeypatch, route, body, pipeline_role=role, planned=False)
    assert status == (200 if failing is None else 400)
    assert alive == []
    assert requests and all(ref() is None for ref in requests), "the request waits for a full collection"
