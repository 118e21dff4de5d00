"""Every bad input answers 4xx with a message; vLLM down answers 503 with Retry-After."""

from __future__ import annotations

import time

import pytest

from reward_testing.fake_vllm import MAX_CHARS
from reward_testing.gateway_process import retry_later_error
from reward_testing.ports import free_port

BAD_REWARDS_BODIES = [
    (b"", "empty"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"items": [{"prompt": "p"}]}', "exactly one of response or steps"),
    (b'{"items": [{"response": "r"}]}', "prompt"),
    (b'{"items": [{"prompt": "p", "response": "r", "score_me": true}]}', "items.0.score_me: unknown field"),
    (b'{"items": [{"prompt": 3, "response": "r"}]}', "items.0.prompt"),
    (b'{"items": [{"messages": []}]}', "messages must not be empty"),
    (b'{"items": [{"messages": [{"role": "user"}]}]}', "content"),
    (b'{"items": [], "extra": 1}', "extra: unknown field"),
    (b'{"model": "other", "items": []}', "not served here"),
]


@pytest.mark.parametrize(("body", "message"), BAD_REWARDS_BODIES)
def test_malformed_rewards_requests_answer_4xx_with_a_message(start_gateway, backend, body, message):
    gateway = start_gateway()
    answer = gateway.post("/v1/rewards", content=body, headers={"content-type": "application/json"})
    assert 400 <= answer.status_code < 500
    assert message in answer.json()["error"]
    assert backend.calls == []


@pytest.mark.parametrize(
    ("route", "body", "message"),
    [
        ("/get_reward", {"query": "one string"}, "query"),
        ("/get_reward", {"query": ["a"], "prompts": ["a", "b"]}, "prompts has 2 entries"),
        ("/get_reward", {"query": ["a"], "reward_kind": "x"}, "unknown field"),
        ("/classify", {"model": "rm"}, "input"),
        ("/v1/models/rm:predict", {"inputs": []}, "unknown field"),
    ],
)
def test_malformed_trainer_requests_answer_4xx_with_a_message(start_gateway, backend, route, body, message):
    answer = start_gateway().post(route, json=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]


def test_too_many_items_answers_400(start_gateway, backend):
    answer = start_gateway(max_items="2").post("/get_reward", json={"query": ["a", "b", "c"]})
    assert answer.status_code == 400
    assert "at most 2" in answer.json()["error"]
    assert backend.calls == []


def test_over_long_input_without_truncation_answers_400_with_vllms_message(start_gateway, backend):
    answer = start_gateway().post("/get_reward", json={"query": ["x" * (MAX_CHARS + 1)]})
    assert answer.status_code == 400
    assert "maximum context length" in answer.json()["error"]


def test_truncation_policy_is_sent_to_vllm(start_gateway, backend):
    answer = start_gateway(truncate_prompt_tokens="-1").post("/get_reward", json={"query": ["x" * (MAX_CHARS + 1)]})
    assert answer.status_code == 200
    assert backend.calls[0][1]["truncate_prompt_tokens"] == -1


def test_classify_on_a_token_model_says_which_route_to_use(start_gateway, backend):
    answer = start_gateway(model_kind="token").post("/classify", json={"input": "x"})
    assert answer.status_code == 404
    assert "/v1/rewards" in answer.json()["error"]


def test_vllm_down_answers_503_with_retry_after(start_gateway, backend):
    gateway = start_gateway(upstream=f"http://127.0.0.1:{free_port()}", scale_from_zero_timeout_seconds="0.3")
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "r"}]})
    assert "unreachable" in retry_later_error(answer)
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_upstream_errors_total{model="rm",reason="connect"} 1.0' in metrics
    # the other reasons exist at 0 from the start, so alerts see their first increase
    assert 'reward_gateway_upstream_errors_total{model="rm",reason="timeout"} 0.0' in metrics


def test_vllm_loading_answers_503_after_the_scale_from_zero_wait(start_gateway, backend):
    backend.healthy = False
    gateway = start_gateway(scale_from_zero_timeout_seconds="0.3")
    answer = gateway.post("/get_reward", json={"query": ["a"]})
    assert answer.status_code == 503
    assert "retry-after" in answer.headers
    assert len(backend.calls) >= 2  # retried while the wait lasted, not refused at the first 503
    assert 'reward_gateway_upstream_errors_total{model="rm",reason="status_5xx"} 1.0' in gateway.get("/metrics").text


def test_missing_or_wrong_bearer_token_answers_401(start_gateway, backend, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    gateway = start_gateway(auth_token_file=str(token_file))
    body = {"query": ["a"]}
    assert gateway.post("/get_reward", json=body).status_code == 401
    assert gateway.post("/get_reward", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert gateway.post("/v1/models/rm:predict", json={"instances": []}).status_code == 401
    ok = gateway.post("/get_reward", json=body, headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200
    assert backend.calls and all("s3cret" not in str(call) for call in backend.calls)


def test_an_item_count_over_the_limit_is_refused_before_validation(start_gateway, backend, monkeypatch):
    from reward_gateway.items.wire import OpenRLHFRequest

    def not_validated(*args, **kwargs):
        raise AssertionError("validated before the item count was checked")

    gateway = start_gateway(max_items="100")
    monkeypatch.setattr(OpenRLHFRequest, "model_validate", not_validated)
    answer = gateway.post("/get_reward", json={"query": ["a"] * 100_000})
    assert answer.status_code == 400
    assert "at most 100" in answer.json()["error"]


def test_a_field_the_gateway_ignores_is_bounded_too(start_gateway, backend):
    answer = start_gateway(max_items="100").post("/get_reward", json={"query": ["a"], "labels": [0] * 10_000})
    assert answer.status_code == 400
    assert "labels" in answer.json()["error"]
    assert backend.calls == []


@pytest.mark.parametrize("route", ["/classify", "/get_reward", "/v1/rewards"])
def test_deeply_nested_json_answers_400(start_gateway, backend, route):
    nested = b"[" * 300 + b"]" * 300
    bodies = {
        "/classify": b'{"input": "x", "extra": ' + nested + b"}",
        "/get_reward": b'{"query": ["a"], "labels": ' + nested + b"}",
        "/v1/rewards": b'{"items": ' + nested + b"}",
    }
    answer = start_gateway().post(route, content=bodies[route], headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert "nests deeper" in answer.json()["error"]
    assert backend.calls == []


def test_a_validation_answer_names_a_bounded_number_of_problems(start_gateway, backend):
    answer = start_gateway().post("/v1/rewards", json={"items": [1] * 1000})
    assert answer.status_code == 400
    assert answer.json()["error"].endswith("and 980 more")


def test_vllm_overloaded_429_answers_503_with_retry_after_at_once(start_gateway, backend):
    backend.misbehaviour = "429"
    answer = start_gateway().post("/get_reward", json={"query": ["a"]})
    assert "overloaded" in retry_later_error(answer)
    assert len(backend.calls) == 1


def test_an_answer_cut_short_answers_502_at_once_and_is_not_sent_again(start_gateway, backend):
    backend.misbehaviour = "cut"
    gateway = start_gateway()  # the scale-from-zero wait is 300 s: a retry would take that long
    started = time.monotonic()
    answer = gateway.post("/get_reward", json={"query": ["a"]})
    assert answer.status_code == 502, answer.text
    assert time.monotonic() - started < 5
    assert len(backend.calls) == 1
    assert 'reward_gateway_upstream_errors_total{model="rm",reason="bad_response"} 1.0' in gateway.get("/metrics").text


MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


@pytest.mark.parametrize("misbehaviour", ["duplicate_index", "index_out_of_range"])
def test_wrong_indexes_in_vllms_answer_are_a_502_not_swapped_rewards(start_gateway, backend, misbehaviour):
    backend.misbehaviour = misbehaviour
    gateway = start_gateway()
    requests = [("/classify", {"input": ["a", "bb", "ccc"]}), ("/v1/rewards", {"items": [{"messages": MESSAGES}]})]
    if misbehaviour == "duplicate_index":  # one entry cannot repeat an index
        requests.pop()
    for route, body in requests:
        answer = gateway.post(route, json=body)
        assert answer.status_code == 502, answer.text
        assert "index" in answer.json()["error"]


def test_the_access_line_filter_escapes_and_leaves_out_the_query():
    import logging

    from reward_gateway.http.logs import SafeAccessLine

    record = logging.LogRecord("uvicorn.access", 20, "", 0, '%s - "%s %s HTTP/%s" %d', None, None)
    record.args = ("1.2.3.4:5", "GET", "/health\r\nFORGED?token=s3cret", "1.1", 404)
    assert SafeAccessLine().filter(record)
    line = record.getMessage()
    assert line == '1.2.3.4:5 - "GET /health\\r\\nFORGED?... HTTP/1.1" 404'
    assert "\n" not in line and "s3cret" not in line


def test_a_vllm_error_without_a_message_is_named_by_its_type_and_code():
    # vLLM answers a raw exception without text as `{"error": {"message": "", ...}}` (seen once at a cold start)
    from reward_gateway.upstream.client import _message

    assert _message(b'{"error": {"message": "", "type": "BadRequestError", "code": 400}}') == (
        "no message; BadRequestError 400"
    )
    assert _message(b'{"error": {"message": "too long", "code": 400}}') == "too long"


def test_a_4xx_with_an_empty_body_names_its_status_and_the_empty_body(start_gateway, backend):
    # seen once at a wake from zero: a 4xx with an empty body reached the client as "rejected the input: "
    backend.misbehaviour = "empty_404"
    answer = start_gateway().post("/get_reward", json={"query": ["a"]})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "vLLM rejected the input (404): an empty body"
