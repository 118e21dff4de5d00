"""One bad item fails alone: each route answers every item's reward or its failure, never a number for a failure.

Against the fake vLLM on a real port (its over-long refusal is vLLM's: a 400 for the whole call, naming no text).
The real vLLM's side, per kind and through coalescing: e2e/tests/test_real_vllm_parity.py and
test_real_vllm_coalesce.py. The trainers' side: clients/python/tests and e2e/trainers.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from reward_gateway_client.http import ItemFailure, _outcomes
from reward_gateway_client.trl import GatewayReward
from reward_gateway_client.verl import _Batcher

from reward_gateway.config.gateway import load_config
from reward_gateway.http.routes import Gateway
from reward_gateway.signals.metrics import GatewayMetrics
from reward_testing.fake_vllm import MAX_CHARS, STEP_TAG, conversation_text, logit
from reward_testing.prometheus_text import sample_sum

OVER_LONG = "x" * (MAX_CHARS + 1)
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def rendered(prompt: str, response: str) -> str:
    return f"<|user|>{prompt}<|assistant|>{response}"


def test_four_items_one_over_long_answers_three_rewards_and_one_failure(start_gateway, backend):
    gateway = start_gateway(chat_template_mode="gateway", chat_template=TEMPLATE)
    items = [{"prompt": "p", "response": r, "group": "g"} for r in ("a", "bb", OVER_LONG, "dddd")]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["rewards"][:2] + body["rewards"][3:] == pytest.approx(
        [logit(rendered("p", r)) for r in ("a", "bb", "dddd")]
    )
    assert body["rewards"][2] is None
    [failure] = body["failures"]
    assert (failure["index"], failure["reason"], failure["retry"]) == (2, "too_long", False)
    assert "maximum context length" in failure["message"]
    # the group's call, refused whole, halved down to the text at fault: [4] -> [2] [2] -> [1] [1]
    assert [len(call["input"]) for _, call in backend.calls] == [4, 2, 2, 1, 1]
    metrics = gateway.get("/metrics").text
    series = 'reward_gateway_item_failures_total{model="rm",reason="%s",route="rewards"}'
    assert sample_sum(metrics, series % "too_long") == 1
    assert sample_sum(metrics, "reward_gateway_item_failures_total") == 1  # every other reason's series at 0
    assert sample_sum(metrics, 'reward_gateway_items_total{model="rm",result="ok",route="rewards"}') == 3
    assert sample_sum(metrics, 'reward_gateway_items_total{model="rm",result="error",route="rewards"}') == 1


def test_an_answer_without_failures_is_as_it_always_was(start_gateway, backend):
    body = start_gateway().post("/v1/rewards", json={"items": [{"text": "a"}]}).json()
    assert set(body) == {"model", "rewards", "identity"}


@pytest.mark.parametrize(
    ("path", "read"),
    [
        ("/v1/models/rm:predict", lambda body: body["predictions"]),
        ("/v1/pipeline/reward", lambda body: body["rewards"]),
    ],
)
def test_every_scoring_route_answers_a_failed_item_as_null_beside_its_reason(start_gateway, backend, path, read):
    gateway = start_gateway()
    if path == "/v1/pipeline/reward":
        body = {"prompts": ["p", "p"], "responses": ["fine", OVER_LONG], "groups": [0, 0]}
    else:
        body = {"instances": [{"text": "fine"}, {"text": OVER_LONG}]}
    answer = gateway.post(path, json=body)
    assert answer.status_code == 200, answer.text
    scored = read(answer.json())
    assert isinstance(scored[0], float) and scored[1] is None
    assert [(f["index"], f["reason"]) for f in answer.json()["failures"]] == [(1, "too_long")]


@pytest.mark.parametrize("query", [[OVER_LONG], ["fine", OVER_LONG, "also fine"]])
def test_openrlhfs_request_with_a_failed_item_fails_with_the_items_status(start_gateway, backend, query):
    """OpenRLHF reads rewards into a tensor and has no missing reward but a failed request (docs/trainers.md)."""
    answer = start_gateway().post("/get_reward", json={"query": query})
    assert answer.status_code == 400
    body = answer.json()
    assert "rewards" not in body and "maximum context length" in body["error"]
    assert [f["reason"] for f in body["failures"]] == ["too_long"]


def test_a_process_item_without_a_step_tag_fails_alone_and_costs_vllm_nothing(start_gateway, backend):
    gateway = start_gateway(model_kind="process", chat_template_mode="gateway", chat_template=TEMPLATE)
    items = [{"prompt": "p", "steps": ["one", "two"]}, {"prompt": "p", "response": "no tags"}]
    body = gateway.post("/v1/rewards", json={"items": items}).json()
    assert body["rewards"][1] is None and body["step_scores"][1] is None
    assert len(body["step_scores"][0]) == 2 and isinstance(body["rewards"][0], float)
    assert [(f["index"], f["reason"]) for f in body["failures"]] == [(1, "invalid")]
    assert [len(call["input"]) for _, call in backend.calls] == [1]  # only the good item was sent


def test_a_request_none_of_whose_items_vllm_could_take_fails_whole_as_before(start_gateway, backend):
    backend.misbehaviour = "429"
    answer = start_gateway().post("/v1/rewards", json={"items": [{"text": "a"}, {"text": "b"}]})
    assert answer.status_code == 503 and "retry-after" in answer.headers
    assert "overloaded" in answer.json()["error"]


def test_through_coalescing_a_bad_item_fails_alone_inside_its_own_request(start_gateway, backend):
    """Merged calls are halved down to the text at fault: the other items of its request, and every other
    request merged with it, are answered."""
    gateway = start_gateway(coalesce="true", coalesce_max_wait_ms="20")
    queries = [[f"fine {i}", f"fine {i} too"] for i in range(16)]
    queries[5] = ["good", OVER_LONG, "better"]

    def ask(query: list[str]) -> httpx.Response:
        return gateway.post("/v1/rewards", json={"items": [{"text": text} for text in query]})

    with ThreadPoolExecutor(len(queries)) as pool:
        answers = list(pool.map(ask, queries))
    for query, answer in zip(queries, answers, strict=True):
        assert answer.status_code == 200, answer.text
        expected = [None if text == OVER_LONG else pytest.approx(logit(text)) for text in query]
        assert answer.json()["rewards"] == expected
    assert answers[5].json()["failures"][0]["index"] == 1


def test_a_failed_item_in_a_split_is_answered_by_the_stable_model_and_counted_as_the_candidates(
    start_gateway, backend, candidate_backend
):
    """The candidate refuses a text the stable model takes: the trainer gets the stable model's whole answer (one
    scale per request), and the candidate's failure is its own error; no failed item is ever compared."""
    env = {"canary_url": candidate_backend.url, "canary_mode": "split", "canary_percent": "100"}
    env["canary_half_life_seconds"] = "0"  # the window keeps everything: counts, not decayed weights
    gateway = start_gateway(**env)
    long_for_the_candidate = "y" * 100
    candidate_backend.max_chars = 50  # a candidate with a shorter context
    answer = gateway.post("/v1/rewards", json={"items": [{"text": "a"}, {"text": long_for_the_candidate}]})
    assert answer.status_code == 200
    assert answer.headers["x-reward-model"] == "stable"
    assert answer.json()["rewards"] == pytest.approx([logit("a"), logit(long_for_the_candidate)])
    summary = gateway.get("/canary").json()
    assert summary["models"]["candidate"]["errors"] == 1
    assert summary["models"]["stable"]["errors"] == 0


def test_an_item_both_models_fail_is_nobodys_error_and_never_a_disagreement(start_gateway, backend, candidate_backend):
    gateway = start_gateway(canary_url=candidate_backend.url, canary_half_life_seconds="0")
    items = [{"text": t, "group": "g"} for t in ("a", "bb", OVER_LONG)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.json()["rewards"][2] is None
    summary = gateway.get("/canary").json()
    assert summary["models"]["stable"]["errors"] == summary["models"]["candidate"]["errors"] == 0
    assert summary["items"] == 2  # the two items both scored; the failed one is in no pair


# The promise as a property: over kinds, routes, coalescing, grouping and which items fail, a failed item is
# never a number in any route's answer nor in any client's hands.

FATES = ("ok", "too_long", "no_step_tag", "no_verdict")
ROUTES = ("rewards", "v1_predict", "get_reward", "pipeline_reward")
# A judge's structured verdict on the response alone (so every route's item is judged on the same text); the
# fake answers a verdict out of its range for a response marked "no_verdict".
JUDGE = {
    "prompt": "{{ response }}",
    "structured": {"jsonSchema": {"type": "object"}, "field": "score", "minimum": 0, "maximum": 10},
}


def _response(kind: str, fate: str, index: int) -> str:
    text = f"step {index} {fate}" if fate != "too_long" else "x" * (MAX_CHARS + 1)
    return text + STEP_TAG if kind == "process" and fate != "no_step_tag" else text


def _request(route: str, kind: str, fates: list[str], grouped: bool) -> dict:
    responses = [_response(kind, fate, index) for index, fate in enumerate(fates)]
    groups = [index % 2 if grouped else None for index in range(len(fates))]
    if route == "get_reward":
        # a judge reads the response apart from the prompt OpenRLHF sends beside it
        prompts = {"prompts": ["q "] * len(fates)} if kind == "judge" else {}
        return {"query": [f"q {response}" for response in responses]} | prompts
    if route == "pipeline_reward":
        body: dict = {"prompts": ["q"] * len(fates), "responses": responses}
        return body | ({"groups": groups} if grouped else {})
    items = [
        {"prompt": "q", "response": r} | ({"group": g} if grouped else {})
        for r, g in zip(responses, groups, strict=True)
    ]
    return {"instances": items} if route == "v1_predict" else {"items": items}


def _failed(kind: str, fate: str) -> bool:
    return (
        fate == "too_long"
        or (fate == "no_step_tag" and kind == "process")
        or (fate == "no_verdict" and kind == "judge")
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(("sequence", "token", "process", "judge")),
    route=st.sampled_from(ROUTES),
    coalesce=st.booleans(),
    grouped=st.booleans(),
    fates=st.lists(st.sampled_from(FATES), min_size=1, max_size=6),
)
def test_no_route_and_no_client_turns_a_failure_into_a_number(backend, kind, route, coalesce, grouped, fates):
    env = {
        "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_MODEL_KIND": kind,
    }
    if kind == "judge":  # vLLM templates the judge's messages; its calls are chat completions, never coalesced
        env["REWARD_GATEWAY_JUDGE"] = orjson.dumps(JUDGE).decode()
        for index, fate in enumerate(fates):
            if fate == "no_verdict":
                backend.verdicts[
                    conversation_text([{"role": "user", "content": _response(kind, fate, index)}]) + "<assistant>"
                ] = '{"score": 11}'
    else:
        env["REWARD_GATEWAY_CHAT_TEMPLATE_MODE"] = "gateway"
        env["REWARD_GATEWAY_CHAT_TEMPLATE"] = TEMPLATE
        env["REWARD_GATEWAY_COALESCE"] = str(coalesce).lower()
    body = _request(route, kind, fates, grouped)

    async def answer():
        gateway = Gateway(load_config(env), GatewayMetrics(CollectorRegistry()))
        try:
            return await gateway.answer(route, orjson.dumps(body), None)
        finally:
            await gateway.close()

    answered = asyncio.run(answer())
    failed = {index for index, fate in enumerate(fates) if _failed(kind, fate)}
    if answered.status != 200:
        # failed whole: no reward of any item in it, only the reason
        assert failed and not {"rewards", "predictions", "scores"} & set(answered.body), answered.body
        return
    assert route != "get_reward" or not failed  # OpenRLHF's route never answers 200 with a failed item
    values = answered.body.get("rewards", answered.body.get("predictions"))
    for index, value in enumerate(values):
        reward = value["reward"] if isinstance(value, dict) else value
        assert (reward is None) if index in failed else _number(reward), (index, value)
    assert {f["index"] for f in answered.body.get("failures", [])} == failed
    if route == "rewards":
        _clients_give_no_number(answered.body, failed)


def _clients_give_no_number(body: dict, failed: set[int]) -> None:
    """The same answer in the client's hands: an ItemFailure, TRL's None, verl's exception; never a number."""
    outcomes = _outcomes(httpx.Response(200, json=body), len(body["rewards"]))
    assert {i for i, outcome in enumerate(outcomes) if isinstance(outcome, ItemFailure)} == failed
    trl = GatewayReward("http://unused")._rewards(outcomes, None)
    assert all((reward is None) == (index in failed) for index, reward in enumerate(trl))

    class Answered:
        async def outcomes(self, items):
            return outcomes

    async def verl() -> list:
        batcher = _Batcher(Answered(), window_s=60, max_batch=len(outcomes))  # type: ignore[arg-type]
        futures = [batcher.submit(str(i), {"text": str(i)}) for i in range(len(outcomes))]
        return await asyncio.gather(*futures, return_exceptions=True)

    for index, result in enumerate(asyncio.run(verl())):
        assert isinstance(result, Exception) if index in failed else _number(result), (index, result)
