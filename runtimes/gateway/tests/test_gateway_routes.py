"""Each wire format end to end: gateway -> real HTTP fake vLLM -> expected rewards."""

from __future__ import annotations

import pytest

from reward_testing.fake_vllm import STEP_TAG, conversation_text, logit, sigmoid, step_probability


def pair(prompt: str, response: str) -> str:
    return conversation_text([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])


def test_rewards_for_sequence_model_are_raw_logits_in_order(start_gateway, backend):
    gateway = start_gateway()
    items = [{"prompt": f"q{i}", "response": f"answer number {i}"} for i in range(40)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    expected = [logit(pair(f"q{i}", f"answer number {i}")) for i in range(40)]
    assert answer.json() == {"model": "rm", "rewards": pytest.approx(expected)}
    # The raw logit, not vLLM's default sigmoid (which would lie in 0..1).
    assert all(body["use_activation"] is False for _, body in backend.calls)
    assert {path for path, _ in backend.calls} == {"/classify"}


def test_messages_items_are_forwarded_for_vllm_to_template(start_gateway, backend):
    gateway = start_gateway()
    messages = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"}]
    messages.append({"role": "assistant", "content": "hello"})
    answer = gateway.post("/v1/rewards", json={"items": [{"messages": messages}]})
    assert answer.json()["rewards"] == pytest.approx([logit(conversation_text(messages))])
    assert backend.calls[0][1]["messages"] == messages
    assert "input" not in backend.calls[0][1]


def test_token_model_reward_is_the_last_tokens_value(start_gateway, backend):
    gateway = start_gateway(model_kind="token", bos_token="<s>")
    answer = gateway.post("/get_reward", json={"query": ["the cat sat", "<s>a dog ran far"]})
    assert answer.status_code == 200, answer.text
    expected = [logit("<s>the cat sat"), logit("<s>a dog ran far")]
    assert answer.json() == {"rewards": pytest.approx(expected), "scores": pytest.approx(expected), "extra_logs": {}}
    for path, body in backend.calls:
        assert path == "/pooling"
        assert body["task"] == "token_classify"
        # BOS is in the text exactly once, so vLLM must not add another.
        assert body["add_special_tokens"] is False
        assert body["input"][0].count("<s>") == 1


def test_process_model_returns_one_score_per_step(start_gateway, backend):
    gateway = start_gateway(model_kind="process")
    steps = ["First, 2+2=4.", "Then 4*3=12.", "So the answer is 12."]
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "2+2 then *3?", "steps": steps}]})
    assert answer.status_code == 200, answer.text
    text = pair("2+2 then *3?", "".join(step + STEP_TAG for step in steps))
    prefixes = [text[: index + len(STEP_TAG)] for index in _find_all(text, STEP_TAG)]
    expected_steps = [step_probability(prefix) for prefix in prefixes]
    body = answer.json()
    assert body["step_scores"] == [pytest.approx(expected_steps)]
    assert body["rewards"] == pytest.approx([min(expected_steps)])
    # step probabilities: vLLM's default activation, so use_activation is not sent
    assert [(path, call["task"], "use_activation" in call) for path, call in backend.calls] == [
        ("/pooling", "token_classify", False)
    ]


def test_process_model_rejects_items_without_step_tags(start_gateway, backend):
    gateway = start_gateway(model_kind="process")
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "no tags here"}]})
    assert answer.status_code == 400
    assert STEP_TAG in answer.json()["error"]
    assert backend.calls == []


def test_openrlhf_empty_query_answers_empty_lists(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/get_reward", json={"query": [], "prompts": [], "labels": []})
    assert answer.status_code == 200
    assert answer.json() == {"rewards": [], "scores": [], "extra_logs": {}}
    assert backend.calls == []


def test_verl_classify_is_passed_through_with_raw_logits(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/classify", json={"model": "/models/rm", "input": "rendered text", "use_activation": False})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["data"][-1]["probs"][-1] == pytest.approx(logit("rendered text"))
    assert set(body) >= {"id", "object", "created", "model", "data"}
    # The trainer's model name is replaced by the served one behind this gateway.
    assert backend.calls[0][1]["model"] == "rm"


def test_classify_defaults_to_raw_logit_when_the_caller_omits_use_activation(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/classify", json={"input": ["x"]})
    assert answer.json()["data"][0]["probs"][0] == pytest.approx(logit("x"))
    assert answer.json()["data"][0]["probs"][0] != pytest.approx(sigmoid(logit("x")))


def test_kserve_v1_predict_scores_instances(start_gateway, backend):
    gateway = start_gateway()
    instances = [{"prompt": "a", "response": "b"}, {"prompt": "c", "response": "d"}]
    answer = gateway.post("/v1/models/rm:predict", json={"instances": instances})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"predictions": pytest.approx([logit(pair("a", "b")), logit(pair("c", "d"))])}
    assert gateway.get("/v1/models/rm").json() == {"name": "rm", "ready": True}


def test_items_of_one_group_go_to_vllm_in_one_call(start_gateway, backend):
    gateway = start_gateway(
        chat_template_mode="gateway", chat_template="{% for m in messages %}[{{ m.content }}]{% endfor %}"
    )
    items = [{"prompt": f"p{i % 3}", "response": f"r{i}", "group": f"g{i % 3}"} for i in range(12)]
    items.append({"prompt": "alone", "response": "x"})
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    expected = [logit(f"[p{i % 3}][r{i}]") for i in range(12)] + [logit("[alone][x]")]
    assert answer.json()["rewards"] == pytest.approx(expected)
    inputs = sorted(tuple(body["input"]) for _, body in backend.calls)
    assert len(inputs) == 4  # three groups and one ungrouped item
    assert (
        "[p0][r0]",
        "[p0][r3]",
        "[p0][r6]",
        "[p0][r9]",
    ) in inputs


def test_many_items_keep_their_order_under_concurrency(start_gateway, backend):
    gateway = start_gateway(max_concurrency="8")
    items = [{"prompt": "p", "response": f"response {i}"} for i in range(200)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.json()["rewards"] == pytest.approx([logit(pair("p", f"response {i}")) for i in range(200)])
    assert len(backend.calls) == 200


def test_metrics_count_requests_items_and_scores(start_gateway, backend):
    gateway = start_gateway()
    gateway.post("/v1/rewards", json={"items": [{"prompt": "a", "response": "b"}] * 3})
    gateway.post("/v1/rewards", json={"items": [{"prompt": "a"}]})
    text = gateway.get("/metrics").text
    assert 'reward_gateway_requests_total{code="200",model="rm",route="rewards"} 1.0' in text
    assert 'reward_gateway_requests_total{code="400",model="rm",route="rewards"} 1.0' in text
    assert 'reward_gateway_items_total{model="rm",result="ok",route="rewards"} 3.0' in text
    assert 'reward_gateway_score_count{model="rm"} 3.0' in text
    assert 'reward_gateway_request_duration_seconds_count{model="rm",route="rewards"} 2.0' in text
    assert 'reward_gateway_inflight_requests{model="rm"} 0.0' in text


def _find_all(text: str, tag: str) -> list[int]:
    found, start = [], 0
    while (index := text.find(tag, start)) != -1:
        found.append(index)
        start = index + 1
    return found
