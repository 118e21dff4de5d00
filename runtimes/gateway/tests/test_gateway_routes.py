"""Each wire format end to end: gateway -> real HTTP fake vLLM -> expected rewards."""

from __future__ import annotations

import pytest

from reward_testing.fake_vllm import STEP_TAG, conversation_text, logit, sigmoid, step_probability

# What a gateway started with no identity settings says of its model.
IDENTITY = {"model": "rm", "revision": None, "digest": None, "generation": None, "role": "stable"}


def pair(prompt: str, response: str) -> str:
    return conversation_text([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])


def test_rewards_for_sequence_model_are_raw_logits_in_order(start_gateway, backend):
    gateway = start_gateway()
    items = [{"prompt": f"q{i}", "response": f"answer number {i}"} for i in range(40)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    expected = [logit(pair(f"q{i}", f"answer number {i}")) for i in range(40)]
    assert answer.json() == {"model": "rm", "rewards": pytest.approx(expected), "identity": IDENTITY}
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
    gateway = start_gateway(model_kind="token")
    answer = gateway.post("/get_reward", json={"query": ["the cat sat", "<s>a dog ran far"]})
    assert answer.status_code == 200, answer.text
    expected = [logit("the cat sat"), logit("<s>a dog ran far")]
    assert answer.json() == {
        "rewards": pytest.approx(expected),
        "scores": pytest.approx(expected),
        "extra_logs": {},
        "identity": IDENTITY,
    }
    for path, body in backend.calls:
        assert path == "/pooling"
        assert body["task"] == "token_classify"
        # OpenRLHF's text, scored as its serve_rm.py tokenises it: unchanged, nothing added.
        assert body["add_special_tokens"] is False
    sent = sorted(text for _, body in backend.calls for text in body["input"])
    assert sent == ["<s>a dog ran far", "the cat sat"]


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


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("one_label", "is not a [p_negative, p_positive] pair (1 values)"),
        ("logits", "is not a pair of probabilities adding up to 1"),
        ("every_token", "vLLM scored 6 steps where the input holds 2 step tags"),
    ],
)
def test_process_model_refuses_step_rows_that_would_give_a_wrong_number(start_gateway, backend, rows, message):
    """What vLLM answers under a setting that cannot be right (model.returnedTokenIds of one id, seen on
    the real vLLM 0.32; the activation off; a model.stepTagId of another token) is a 502 naming the cause,
    not a reward."""
    gateway = start_gateway(model_kind="process")
    backend.step_rows = rows
    item = {"prompt": "2+2 then *3?", "steps": ["First, 2+2=4.", "Then 4*3=12."]}
    answer = gateway.post("/v1/rewards", json={"items": [item]})
    assert answer.status_code == 502, answer.text
    assert message in answer.json()["error"]


def test_process_model_rejects_items_without_step_tags(start_gateway, backend):
    gateway = start_gateway(model_kind="process")
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "no tags here"}]})
    assert answer.status_code == 200  # the item fails, in the answer; vLLM is not asked
    [failure] = answer.json()["failures"]
    assert (answer.json()["rewards"], failure["reason"], failure["retry"]) == ([None], "invalid", False)
    assert STEP_TAG in failure["message"]
    assert backend.calls == []


def test_openrlhf_empty_query_answers_empty_lists(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/get_reward", json={"query": [], "prompts": [], "labels": []})
    assert answer.status_code == 200
    assert answer.json() == {"rewards": [], "scores": [], "extra_logs": {}, "identity": IDENTITY}
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
    assert answer.json() == {
        "predictions": pytest.approx([logit(pair("a", "b")), logit(pair("c", "d"))]),
        "identity": IDENTITY,
    }
    assert gateway.get("/v1/models/rm").json() == {"name": "rm", "ready": True}


def test_items_of_one_group_go_to_vllm_in_one_call(start_gateway, backend):
    # The planner's calls, before the coalescer merges them (test_gateway_coalesce.py).
    gateway = start_gateway(
        chat_template_mode="gateway",
        chat_template="{% for m in messages %}[{{ m.content }}]{% endfor %}",
        coalesce="false",
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


def test_the_mean_score_is_read_from_two_growing_sums_since_the_histogram_has_no_sum():
    from prometheus_client import CollectorRegistry, generate_latest

    from reward_gateway.signals.metrics import GatewayMetrics

    registry = CollectorRegistry()
    recorder = GatewayMetrics(registry).score_recorder("rm")
    for reward in (1.5, -0.5, -2.0, 0.0, float("nan")):
        recorder.observe(reward)
    text = generate_latest(registry).decode()
    assert 'reward_gateway_score_count{model="rm"} 4.0' in text  # a nan falls in no bucket
    assert "reward_gateway_score_sum" not in text  # prometheus-client's choice: the buckets go below zero
    assert 'reward_gateway_score_positive_sum_total{model="rm"} 1.5' in text
    assert 'reward_gateway_score_negative_sum_total{model="rm"} 2.5' in text  # magnitudes: only ever grows


def _find_all(text: str, tag: str) -> list[int]:
    found, start = [], 0
    while (index := text.find(tag, start)) != -1:
        found.append(index)
        start = index + 1
    return found


# Inputs trainers send (TRL's tool-calling and reasoning completions, OpenAI content parts,
# standard datasets): each reaches the template, or vLLM, as vLLM 0.32 would hand it over.
TOOL_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.reasoning_content is defined %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call>{{ c.function.name }}{{ c.function.arguments | tojson }}</call>{% endfor %}"
    "{% endfor %}"
)
TOOL_TURN = [
    {"role": "user", "content": [{"type": "text", "text": "weather in"}, {"type": "text", "text": "Paris?"}]},
    {
        "role": "assistant",
        "reasoning": "I should call the tool.",
        "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]},
]


def test_tool_calls_reasoning_and_content_parts_reach_the_template(start_gateway, backend):
    gateway = start_gateway(chat_template_mode="gateway", chat_template=TOOL_TEMPLATE)
    answer = gateway.post("/v1/rewards", json={"items": [{"messages": TOOL_TURN}]})
    assert answer.status_code == 200, answer.text
    [text] = backend.calls[-1][1]["input"]
    assert text == (
        "<user>weather in\nParis?"
        '<assistant><think>I should call the tool.</think><call>weather{"city": "Paris"}</call>'
        "<tool>sunny<assistant>It is sunny."
    )
    assert answer.json()["rewards"] == pytest.approx([logit(text)])


def test_tool_calls_reasoning_and_content_parts_reach_vllm_normalised(start_gateway, backend):
    gateway = start_gateway()  # upstream templating: vLLM gets the messages
    answer = gateway.post("/v1/rewards", json={"items": [{"messages": TOOL_TURN}]})
    assert answer.status_code == 200, answer.text
    sent = backend.calls[-1][1]["messages"]
    assert [m["content"] for m in sent] == ["weather in\nParis?", "", "sunny", "It is sunny."]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert sent[1]["reasoning"] == sent[1]["reasoning_content"] == "I should call the tool."
    assert sent[2]["tool_call_id"] == "c1"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "scores text parts only"),
        ({"role": "user", "content": [{"type": "text"}]}, 'part 0: a text part is {"type": "text", "text": <string>}'),
        ({"role": "assistant"}, "only an assistant message with tool_calls may omit it"),
        ({"role": "user", "content": "hi", "thinking": "x"}, "items.0.messages.0.thinking: unknown field"),
    ],
)
def test_message_forms_the_gateway_cannot_score_are_400_naming_why(start_gateway, backend, message, expected):
    gateway = start_gateway()
    answer = gateway.post("/v1/rewards", json={"items": [{"messages": [message]}]})
    assert answer.status_code == 400 and expected in answer.json()["error"], answer.text
    assert backend.calls == []


@pytest.mark.parametrize("mode", ["upstream", "gateway"])
def test_text_items_are_scored_as_given_without_a_template(start_gateway, backend, mode):
    """A standard (non-chat) dataset's prompt + completion, as TRL's own reward model scores it."""
    settings = {"chat_template_mode": "gateway", "chat_template": TOOL_TEMPLATE} if mode == "gateway" else {}
    gateway = start_gateway(coalesce="false", **settings)  # the planner's calls, before any merge
    items = [{"text": "2+2= 4", "group": "p"}, {"text": "2+2= 5", "group": "p"}, {"text": "<s>other"}]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == pytest.approx([logit(item["text"]) for item in items])
    sent = sorted((body["input"], body["add_special_tokens"]) for _, body in backend.calls)
    assert sent == [(["2+2= 4", "2+2= 5"], False), (["<s>other"], False)]  # a group in one call


def test_text_items_take_no_other_shape(start_gateway, backend):
    gateway = start_gateway()
    answer = gateway.post("/v1/rewards", json={"items": [{"text": "a", "prompt": "b", "response": "c"}]})
    assert answer.status_code == 400 and "give text alone" in answer.json()["error"]
