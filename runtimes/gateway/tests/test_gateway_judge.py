"""A judge as a reward model, in front of the fake vLLM: the prompt template over each item, the verdicts as
rewards (label probabilities renormalised over the labels, structured verdicts read and checked), the labels
checked against the judge's tokenizer, and what the trainers' routes answer."""

from __future__ import annotations

import json
import math
import threading

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from reward_gateway.config.gateway import ConfigError, load_config
from reward_gateway.config.judge import Label, Structured
from reward_gateway.http import server
from reward_gateway.http.app import build_app
from reward_gateway.http.routes import Gateway
from reward_gateway.items.errors import GatewayError
from reward_gateway.judge.verdict import VLLM_NO_PROBABILITY, label_verdict, structured_verdict
from reward_gateway.signals.metrics import GatewayMetrics
from reward_testing.fake_vllm import conversation_text, judge_reward, judge_verdict, logit, serve_in_thread, token_id
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

TEMPLATE = "Question: {{ prompt }}\nAnswer: {{ response }}{% if reference %}\nReference: {{ reference }}{% endif %}"
YES_NO = {"Yes": 1.0, "No": 0.0}
LABELS = {"prompt": TEMPLATE, "labels": [{"token": t, "value": v} for t, v in YES_NO.items()]}
SCALE = {
    "prompt": TEMPLATE,
    "system": "You grade answers.",
    "labels": [{"token": str(i), "value": i} for i in (1, 2, 3)],
}
SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
STRUCTURED = {"prompt": TEMPLATE, "structured": {"jsonSchema": SCHEMA, "field": "score", "minimum": 0, "maximum": 10}}


def judge_env(judge: dict) -> dict[str, str]:
    return {"model_kind": "judge", "judge": json.dumps(judge)}


def judged_text(prompt: str, response: str, reference: str | None = None, system: str | None = None) -> str:
    """What the fake vLLM templates for the judge's messages on this item (its generation prompt included)."""
    content = f"Question: {prompt}\nAnswer: {response}" + (f"\nReference: {reference}" if reference else "")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return conversation_text(messages) + "<assistant>"


def test_label_probabilities_are_the_labels_values_expected_under_their_renormalised_probabilities(
    start_gateway, backend
):
    gateway = start_gateway(**judge_env(SCALE))
    items = [
        {"prompt": "2+2?", "response": "4", "reference": "4"},
        {"messages": [{"role": "user", "content": "capital of France?"}, {"role": "assistant", "content": "Paris"}]},
    ]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    labels = {"1": 1.0, "2": 2.0, "3": 3.0}
    texts = [
        judged_text("2+2?", "4", "4", "You grade answers."),
        judged_text("capital of France?", "Paris", None, "You grade answers."),
    ]
    assert answer.json()["rewards"] == pytest.approx([judge_reward(text, labels)[0] for text in texts], abs=1e-12)
    identity = answer.json()["identity"]
    assert identity["model"] == "rm" and len(identity["judge"]) == 16
    assert answer.headers["X-Reward-Model-Judge"] == identity["judge"]
    # the labels' ids learnt from the judge's tokenizer, without special tokens; then one chat completion per item
    tokenized = [body for path, body in backend.calls if path == "/tokenize"]
    assert [(body["prompt"], body["add_special_tokens"]) for body in tokenized] == [(t, False) for t in labels]
    calls = [body for path, body in backend.calls if path == "/v1/chat/completions"]
    assert len(calls) == 2
    for body in calls:
        assert body["logprob_token_ids"] == [token_id(t) for t in labels]
        assert (body["max_tokens"], body["temperature"], body["logprobs"]) == (1, 0, True)
        assert body["messages"][0] == {"role": "system", "content": "You grade answers."}


def test_the_labels_share_and_each_verdict_are_in_the_metrics(start_gateway, backend):
    gateway = start_gateway(**judge_env(LABELS))
    assert gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "r"}]}).status_code == 200
    share = judge_reward(judged_text("p", "r"), YES_NO)[1]
    exposed = generate_latest(gateway.gateway.metrics.registry).decode()
    assert _sample(exposed, 'reward_gateway_judge_label_share_sum{model="rm"}') == pytest.approx(share, abs=1e-12)
    assert 0 < share < 1
    assert _sample(exposed, 'reward_gateway_judge_verdicts_total{model="rm",outcome="ok"}') == 1.0


def _sample(exposition: str, series: str) -> float:
    line = next(line for line in exposition.splitlines() if line.startswith(series + " "))
    return float(line.rsplit(" ", 1)[1])


def test_openrlhfs_prompts_split_its_query_and_its_labels_are_the_references(start_gateway, backend):
    gateway = start_gateway(**judge_env(LABELS))
    prompt = "<|user|>2+2?<|assistant|>"
    body = {"query": [prompt + "4</s>"], "prompts": [prompt], "labels": ["4"]}
    answer = gateway.post("/get_reward", json=body)
    assert answer.status_code == 200, answer.text
    want = judge_reward(judged_text(prompt, "4</s>", "4"), YES_NO)[0]
    assert answer.json()["rewards"] == pytest.approx([want], abs=1e-12)
    # without prompts there is no telling the response from the prompt: refused, never guessed
    refused = gateway.post("/get_reward", json={"query": [prompt + "4</s>"]})
    assert refused.status_code == 400 and "prompt and the response apart" in refused.json()["error"]


def test_a_structured_verdict_is_the_field_read_from_vllms_structured_output(start_gateway, backend):
    gateway = start_gateway(**judge_env(STRUCTURED))
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "r", "reference": "x"}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == [json.loads(judge_verdict(judged_text("p", "r", "x")))["score"]]
    (body,) = [body for path, body in backend.calls if path == "/v1/chat/completions"]
    assert body["structured_outputs"] == {"json": SCHEMA}
    assert (body["temperature"], body["max_tokens"]) == (0, 64)
    assert "logprob_token_ids" not in body and not [path for path, _ in backend.calls if path == "/tokenize"]


def test_a_choice_verdict_is_its_choices_value(start_gateway, backend):
    choices = [{"text": "correct", "value": 1}, {"text": "partly correct", "value": 0.5}, {"text": "wrong", "value": 0}]
    gateway = start_gateway(**judge_env({"prompt": TEMPLATE, "structured": {"choices": choices}}))
    items = [{"prompt": f"q{i}", "response": "r"} for i in range(6)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    values = {choice["text"]: choice["value"] for choice in choices}
    texts = [choice["text"] for choice in choices]
    assert answer.json()["rewards"] == [values[judge_verdict(judged_text(f"q{i}", "r"), texts)] for i in range(6)]


@pytest.mark.parametrize(
    ("verdict", "saying"),
    [
        ('{"score": 11}', "outside [0, 10]"),
        ('{"score": "high"}', "is not a number"),
        ('{"grade": 3}', "has no field 'score'"),
        ("definitely good", "is not JSON"),
    ],
)
def test_a_verdict_that_gives_no_reward_fails_with_its_reason_never_a_number(start_gateway, backend, verdict, saying):
    gateway = start_gateway(**judge_env(STRUCTURED))
    backend.verdicts[judged_text("p", "bad")] = verdict
    answer = gateway.post(
        "/v1/rewards", json={"items": [{"prompt": "p", "response": "good"}, {"prompt": "p", "response": "bad"}]}
    )
    assert answer.status_code == 200, answer.text
    good = json.loads(judge_verdict(judged_text("p", "good")))["score"]
    assert answer.json()["rewards"] == [good, None]
    (failure,) = answer.json()["failures"]
    assert (failure["index"], failure["reason"], failure["retry"]) == (1, "no_verdict", False)
    assert failure["message"].startswith("the judge gave no verdict: ") and saying in failure["message"]
    exposed = generate_latest(gateway.gateway.metrics.registry).decode()
    outcome = "out_of_range" if "outside" in saying else "unparsed"
    assert _sample(exposed, f'reward_gateway_judge_verdicts_total{{model="rm",outcome="{outcome}"}}') == 1.0


def test_a_verdict_cut_short_by_max_tokens_gives_no_reward(start_gateway, backend):
    judge = {**STRUCTURED, "structured": {**STRUCTURED["structured"], "maxTokens": 2}}
    gateway = start_gateway(**judge_env(judge))
    answer = gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "r"}]})
    assert answer.status_code == 200 and answer.json()["rewards"] == [None]
    (failure,) = answer.json()["failures"]
    assert failure["reason"] == "no_verdict" and "cut short at maxTokens (2 tokens)" in failure["message"]
    # OpenRLHF has no missing reward: its request fails, with the item's status and reason
    openrlhf = gateway.post("/get_reward", json={"query": ["p r"], "prompts": ["p "]})
    assert openrlhf.status_code == 422 and "cut short" in openrlhf.json()["error"], openrlhf.text


def test_eight_items_whose_verdicts_fail_for_one_answer_seven_rewards_and_one_failure(start_gateway, backend):
    gateway = start_gateway(**judge_env(STRUCTURED))
    items = [{"prompt": f"q{i}", "response": "r", "group": "g"} for i in range(8)]
    backend.verdicts[judged_text("q5", "r")] = '{"score": 42}'
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    want = [json.loads(judge_verdict(judged_text(f"q{i}", "r")))["score"] for i in range(8)]
    want[5] = None
    assert answer.json()["rewards"] == want
    assert [(f["index"], f["reason"]) for f in answer.json()["failures"]] == [(5, "no_verdict")]
    assert "the verdict 42 is outside [0, 10]" in answer.json()["failures"][0]["message"]


def test_a_label_that_is_not_one_token_is_refused_naming_it(backend, tmp_path, monkeypatch):
    judge = {"prompt": TEMPLATE, "labels": [{"token": "Yes", "value": 1}, {"token": "Not really", "value": 0}]}
    env = {"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_MODEL_NAME": "rm"}
    env.update({"REWARD_GATEWAY_MODEL_KIND": "judge", "REWARD_GATEWAY_JUDGE": json.dumps(judge)})
    env["REWARD_GATEWAY_PORT"] = str(free_port())
    monkeypatch.setattr(server, "TERMINATION_LOG", str(tmp_path / "termination-log"))

    # the gateway's own server, with no request: vLLM answers the check at start, the label is two tokens,
    # and the server stops itself with the message kept for Kubernetes
    gateway_server = server.server_of(Gateway(load_config(env), GatewayMetrics(CollectorRegistry())))
    running = threading.Thread(target=gateway_server.run, daemon=True)
    running.start()
    running.join(timeout=20)
    assert not running.is_alive(), "the server did not stop on the refusal"
    assert "judge label 'Not really' is 2 tokens" in (gateway_server.refused or "")
    assert "'Not really'" in (tmp_path / "termination-log").read_text()

    # a request meets the refusal too (the check at the first request, where none ran at start)
    with serve_in_thread(build_app(Gateway(load_config(env), GatewayMetrics(CollectorRegistry())))) as url:
        answer = httpx.post(f"{url}/v1/rewards", json={"items": [{"prompt": "p", "response": "r"}]})
    assert answer.status_code == 500 and "'Not really'" in answer.json()["error"]
    assert not [path for path, _ in backend.calls if path == "/v1/chat/completions"]


def test_items_a_judge_cannot_read_are_refused(start_gateway, backend):
    gateway = start_gateway(**judge_env(LABELS))
    for item in ({"text": "<s>finished text"}, {"messages": [{"role": "user", "content": "no response yet"}]}):
        answer = gateway.post("/v1/rewards", json={"items": [item, {"prompt": "p", "response": "r"}]})
        assert answer.status_code == 200, answer.text
        (failure,) = answer.json()["failures"]
        assert failure["index"] == 0 and failure["reason"] == "invalid"
        assert "prompt and the response apart" in failure["message"], item
        assert answer.json()["rewards"][1] == pytest.approx(judge_reward(judged_text("p", "r"), YES_NO)[0])
    assert gateway.post("/classify", json={"input": "x"}).status_code == 404


@pytest.mark.parametrize(
    ("judge", "saying"),
    [
        ({"prompt": "{{ respons }}", "labels": LABELS["labels"]}, "the template names respons"),
        ({"prompt": "{% if %}", "labels": LABELS["labels"]}, "does not compile"),
        ({"prompt": TEMPLATE}, "give exactly one verdict"),
        ({"prompt": TEMPLATE, "labels": [{"token": "Yes", "value": 1}]}, "at least two labels"),
        ({"prompt": TEMPLATE, "labels": [{"token": "Yes", "value": 1}, {"token": "Yes", "value": 0}]}, "listed twice"),
        ({"prompt": TEMPLATE, "structured": {"jsonSchema": SCHEMA}}, "field read as the score is required"),
        ({"prompt": TEMPLATE, "structured": {"choices": [{"text": "a", "value": 1}], "maxTokens": 2}}, "two labels"),
        ({**STRUCTURED, "structured": {**STRUCTURED["structured"], "minimum": 5, "maximum": 1}}, "above maximum"),
    ],
)
def test_a_judge_the_gateway_cannot_run_is_refused_at_start_naming_the_field(judge, saying):
    env = {"REWARD_GATEWAY_UPSTREAM_URL": "http://127.0.0.1:1", "REWARD_GATEWAY_MODEL_NAME": "rm"}
    env.update({"REWARD_GATEWAY_MODEL_KIND": "judge", "REWARD_GATEWAY_JUDGE": json.dumps(judge)})
    with pytest.raises(ConfigError, match="REWARD_GATEWAY_JUDGE") as refused:
        load_config(env)
    assert saying in str(refused.value)


def test_a_judge_needs_its_settings_and_a_score_head_takes_none():
    env = {"REWARD_GATEWAY_UPSTREAM_URL": "http://127.0.0.1:1", "REWARD_GATEWAY_MODEL_NAME": "rm"}
    with pytest.raises(ConfigError, match="needs REWARD_GATEWAY_JUDGE"):
        load_config({**env, "REWARD_GATEWAY_MODEL_KIND": "judge"})
    with pytest.raises(ConfigError, match="applies only to REWARD_GATEWAY_MODEL_KIND=judge"):
        load_config({**env, "REWARD_GATEWAY_JUDGE": json.dumps(LABELS)})
    judge = {**env, "REWARD_GATEWAY_MODEL_KIND": "judge", "REWARD_GATEWAY_JUDGE": json.dumps(LABELS)}
    with pytest.raises(ConfigError, match="one chat completion each"):
        load_config({**judge, "REWARD_GATEWAY_COALESCE": "true"})
    with pytest.raises(ConfigError, match="judge model's own template"):
        load_config({**judge, "REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway", "REWARD_GATEWAY_CHAT_TEMPLATE": "x"})


def labels_answer(logprobs: dict[int, float]) -> dict:
    entries = [{"token": f"token_id:{token}", "logprob": value} for token, value in logprobs.items()]
    return {"choices": [{"index": 0, "logprobs": {"content": [{"top_logprobs": entries}]}, "finish_reason": "length"}]}


def test_label_probabilities_are_renormalised_without_underflow_and_none_is_no_verdict():
    labels = (Label("Yes", 1.0), Label("No", 0.0))
    # e^-800 is 0 in a double: renormalised from the largest down, the ratio e^-1 survives
    verdict = label_verdict(labels_answer({7: -800.0, 9: -801.0}), labels, (7, 9))
    assert verdict.reward == pytest.approx(1 / (1 + math.exp(-1)), abs=1e-15)
    assert verdict.label_share == 0.0
    none = label_verdict(labels_answer({7: VLLM_NO_PROBABILITY, 9: VLLM_NO_PROBABILITY}), labels, (7, 9))
    assert none.reward is None and none.outcome == "no_label_probability"
    with pytest.raises(GatewayError, match="no log-probability for the label"):
        label_verdict(labels_answer({7: -1.0}), labels, (7, 9))


def test_a_nested_field_is_read_along_its_path():
    structured = Structured(SCHEMA, "verdict.score", None, None, None, 8)
    answer = {"choices": [{"message": {"content": '{"verdict": {"score": 7.5}}'}, "finish_reason": "stop"}]}
    assert structured_verdict(answer, structured).reward == 7.5


def test_finished_text_with_its_prompt_is_split_there_and_a_score_head_scores_the_text(start_gateway, backend):
    item = {"text": "Is 2+2 4? yes it is", "prompt": "Is 2+2 4?", "reference": "4"}
    judge = start_gateway(**judge_env(LABELS)).post("/v1/rewards", json={"items": [item]})
    assert judge.json()["rewards"] == pytest.approx(
        [judge_reward(judged_text("Is 2+2 4?", " yes it is", "4"), YES_NO)[0]], abs=1e-12
    )
    head = start_gateway().post("/v1/rewards", json={"items": [item]})
    assert head.json()["rewards"] == pytest.approx([logit(item["text"])])
    wrong = start_gateway().post("/v1/rewards", json={"items": [{"text": "abc", "prompt": "xyz"}]})
    assert wrong.status_code == 400 and "the text must start with it" in wrong.json()["error"]


def test_a_new_judge_template_rolled_out_is_scored_by_its_own_template_and_compared(start_gateway, backend):
    """A candidate whose only change is its judge (REWARD_GATEWAY_CANARY_JUDGE, on the same weights): shadowed,
    its verdicts come from its own prompt, the trainer gets the stable judge's, and the two are compared."""
    new = {**LABELS, "prompt": "Grade it. " + TEMPLATE}
    gateway = start_gateway(
        **judge_env(LABELS),
        canary_url=backend.url,
        canary_name="rm-new-template",
        canary_judge=json.dumps(new),
        canary_half_life_seconds="0",
    )
    items = [{"prompt": f"q{i}", "response": "r", "group": "g"} for i in range(4)]
    answer = gateway.post("/v1/rewards", json={"items": items})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == pytest.approx(
        [judge_reward(judged_text(f"q{i}", "r"), YES_NO)[0] for i in range(4)], abs=1e-12
    )
    contents = sorted(body["messages"][0]["content"] for path, body in backend.calls if path == "/v1/chat/completions")
    assert sum(content.startswith("Grade it. ") for content in contents) == 4 and len(contents) == 8
    pairs = gateway.get("/canary").json()["pairs"]
    assert sum(pairs.values()) - pairs["ordered_by_stable"] == 6  # the group's pairs: both judges scored it
    stable = answer.json()["identity"]["judge"]
    candidate = gateway.gateway.canary.backends["candidate"].identity["judge"]
    assert stable != candidate and len(candidate) == 16


def test_a_judge_request_at_zero_is_held_and_answered_once_vllm_comes_up(start_gateway, predictor):
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="60", **judge_env(LABELS))
    answers: list[httpx.Response] = []
    sent = threading.Thread(
        target=lambda: answers.append(gateway.post("/v1/rewards", json={"items": [{"prompt": "p", "response": "r"}]}))
    )
    sent.start()
    wait_until("the judge's request held", lambda: gateway.gateway.load.held == 1, timeout=10, interval=0.05)
    predictor()
    sent.join(30)
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["rewards"] == pytest.approx([judge_reward(judged_text("p", "r"), YES_NO)[0]], abs=1e-12)


def test_a_judge_is_a_reward_step_of_a_pipeline(start_gateway, backend):
    """An RLHFPipeline's graph calls every RewardModel's gateway at /v1/pipeline/reward, a judge's too."""
    gateway = start_gateway(**judge_env(LABELS))
    answer = gateway.post("/v1/pipeline/reward", json={"prompts": ["p", "q"], "responses": ["r", "s"]})
    assert answer.status_code == 200, answer.text
    want = [judge_reward(judged_text(p, r), YES_NO)[0] for p, r in (("p", "r"), ("q", "s"))]
    assert answer.json()["rewards"] == pytest.approx(want, abs=1e-12)
