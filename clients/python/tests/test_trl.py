"""The TRL adapter, called exactly as TRL's GRPOTrainer calls a reward function, against the
real gateway process and the fake vLLM.

TRL's call (trl/trainer/grpo_trainer.py::_calculate_rewards, repo f2cd577 L1612-1690; 1.16.0
wheel L1579-1661): ``reward_func(prompts=prompts, completions=completions,
completion_ids=completion_ids_list, **reward_kwargs)`` where reward_kwargs holds the other
dataset columns, one value per completion, plus ``trainer_state``, ``log_extra`` and
``log_metric`` (L1616-1627); async functions are told apart with
``inspect.iscoroutinefunction`` (L1654) and awaited; names come from
``get_callable_name`` (trl/trainer/utils.py L224-232). TRL's RepeatSampler repeats each
prompt num_generations times in a row (grpo_trainer.py L1264-1267).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import pickle

import pytest
from reward_gateway_client.http import GatewayError
from reward_gateway_client.trl import GatewayReward

from reward_testing.fake_vllm import MAX_CHARS, conversation_text, logit

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
GENERATIONS = 4


def rendered(messages: list[dict]) -> str:
    """TEMPLATE, by hand."""
    return "".join(f"<|{m['role']}|>{m['content']}" for m in messages)


def conversational_step() -> tuple[list, list]:
    """Two prompts, each repeated GENERATIONS times in a row, as TRL's RepeatSampler orders them."""
    prompts, completions = [], []
    for p in range(2):
        for g in range(GENERATIONS):
            prompts.append([{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question {p}"}])
            completions.append([{"role": "assistant", "content": f"answer {p}.{g}"}])
    return prompts, completions


def trl_kwargs(count: int) -> dict:
    """The keywords TRL adds beside prompts, completions and completion_ids (L1616-1627)."""
    return {
        "answer": [f"gold {i}" for i in range(count)],  # a dataset column, repeated per generation
        "trainer_state": object(),
        "log_extra": lambda *args, **kwargs: None,
        "log_metric": lambda *args, **kwargs: None,
    }


def call_as_trl(reward_func, prompts, completions):
    completion_ids = [[1, 2, 3] for _ in completions]
    kwargs = trl_kwargs(len(prompts))
    if inspect.iscoroutinefunction(reward_func):  # L1654: TRL awaits these on its own event loop
        return asyncio.run(
            reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        )
    return reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)


def trl_name(func) -> str:
    """trl/trainer/utils.py::get_callable_name: partials unwrapped, then __name__, else the class name."""
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_step_is_one_request_with_groups_together_and_raw_logits_in_order(gateway, backend, form):
    running = gateway(chat_template_mode="gateway", chat_template=TEMPLATE)
    reward = GatewayReward(running.url)
    reward_func = reward if form == "sync" else reward.as_async()
    assert inspect.iscoroutinefunction(reward_func) is (form == "async")
    prompts, completions = conversational_step()

    rewards = call_as_trl(reward_func, prompts, completions)

    expected = [logit(rendered(p + c)) for p, c in zip(prompts, completions, strict=True)]
    assert rewards == pytest.approx(expected)
    assert running.requests("rewards", 200) == 1  # the whole step in one request
    # Each prompt's completions reached vLLM together, in one call per group.
    inputs = sorted(tuple(body["input"]) for _, body in backend.calls)
    assert inputs == [
        tuple(rendered(p + c) for p, c in zip(prompts, completions, strict=True) if p[1]["content"] == f"question {n}")
        for n in range(2)
    ]
    assert all(body["use_activation"] is False for _, body in backend.calls)  # raw logits, not sigmoid


def test_conversations_templated_by_vllm_score_prompt_plus_completion(gateway, backend):
    running = gateway()  # upstream templating: vLLM applies the model's own template, once
    prompts, completions = conversational_step()
    rewards = GatewayReward(running.url)(prompts=prompts, completions=completions, completion_ids=None)
    assert rewards == pytest.approx(
        [logit(conversation_text(p + c)) for p, c in zip(prompts, completions, strict=True)]
    )
    assert sorted(str(body["messages"]) for _, body in backend.calls) == sorted(
        str(p + c) for p, c in zip(prompts, completions, strict=True)
    )


def test_standard_dataset_text_is_scored_as_given_as_trls_own_reward_model_does(gateway, backend):
    """TRL's own reward model scores p + c untemplated with add_special_tokens=False (L1646-1649)."""
    running = gateway(chat_template_mode="gateway", chat_template=TEMPLATE)
    prompts = [p for p in ("2+2=", "<s>The sky is") for _ in range(GENERATIONS)]
    completions = [f" guess {i}" for i in range(len(prompts))]
    rewards = call_as_trl(GatewayReward(running.url), prompts, completions)
    assert rewards == pytest.approx([logit(p + c) for p, c in zip(prompts, completions, strict=True)])
    sent = sorted((tuple(body["input"]), body["add_special_tokens"]) for _, body in backend.calls)
    assert sent == sorted(
        (tuple(p + c for p, c in zip(prompts, completions, strict=True) if p == prompt), False)
        for prompt in ("2+2=", "<s>The sky is")
    )


def test_tool_calls_reasoning_and_content_parts_pass_through(gateway, backend):
    running = gateway()
    prompt = [{"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]}]
    completion = [
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should call the tool.",
            "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny.", "reasoning": "easy"},
    ]
    rewards = GatewayReward(running.url)(prompts=[prompt], completions=[completion])
    assert len(rewards) == 1 and isinstance(rewards[0], float)
    [(_, body)] = backend.calls
    sent = body["messages"]
    assert sent[0]["content"] == "weather in Paris?"
    assert sent[1]["tool_calls"][0]["function"]["name"] == "weather"
    assert sent[1]["reasoning_content"] == "I should call the tool."
    assert sent[2]["tool_call_id"] == "c1" and sent[2]["name"] == "weather"
    assert sent[3]["reasoning"] == "easy"


def test_a_whole_4xx_raises_with_the_gateways_message_and_is_not_retried(gateway, backend, tmp_path):
    accepted = tmp_path / "token"
    accepted.write_text("s3cret\n")
    running = gateway(auth_token_file=str(accepted))
    with pytest.raises(GatewayError) as raised:
        GatewayReward(running.url)(prompts=["p", "q"], completions=["a", "b"])  # no token: 401
    assert raised.value.status == 401 and raised.value.attempts == 1
    assert running.requests("rewards", 401) == 1


@pytest.mark.parametrize("form", ["sync", "async"])
def test_an_over_long_completion_gets_none_and_the_others_their_rewards_in_one_request(gateway, backend, form, caplog):
    """TRL's own "no reward", with the client's defaults: one request, no second, the failure logged and counted."""
    running = gateway()
    reward = GatewayReward(running.url)
    prompts = ["p", "p", "q", "q"]
    completions = [" fine", " also fine", " ok", "x" * (MAX_CHARS + 1)]
    logged: list[tuple[str, float]] = []
    kwargs = {**trl_kwargs(4), "log_metric": lambda name, value: logged.append((name, value))}
    reward_func = reward if form == "sync" else reward.as_async()
    call = reward_func(prompts=prompts, completions=completions, completion_ids=[[1]] * 4, **kwargs)
    rewards = asyncio.run(call) if form == "async" else call
    assert rewards[:3] == pytest.approx([logit("p fine"), logit("p also fine"), logit("q ok")])
    assert rewards[3] is None
    assert running.requests("rewards", 200) == 1 and running.requests("rewards", 400) == 0
    assert logged == [("reward_gateway/failed_items", 1.0)]
    assert "1 of 4 completions not scored (1 too_long)" in caplog.text


def test_on_error_none_gives_none_to_every_completion_of_a_request_that_fails_whole(gateway, backend, tmp_path):
    accepted = tmp_path / "token"
    accepted.write_text("s3cret\n")
    running = gateway(auth_token_file=str(accepted))
    reward = GatewayReward(running.url, on_error="none")  # no token: 401
    assert reward(prompts=["p", "q"], completions=["a", "b"]) == [None, None]
    assert running.requests("rewards", 401) == 1


@pytest.mark.parametrize("on_error", ["raise", "none"])
def test_a_503_that_persists_is_retried_a_bounded_number_of_times(gateway, backend, on_error):
    backend.healthy = False  # vLLM loading: the gateway answers 503 + Retry-After after its wait
    running = gateway(scale_from_zero_timeout_seconds="0.2")
    reward = GatewayReward(running.url, attempts=3, on_error=on_error)
    waits: list[float] = []
    reward.client.sleep = waits.append  # record the back-off instead of waiting it
    prompts, completions = conversational_step()
    if on_error == "raise":
        with pytest.raises(GatewayError) as raised:
            reward(prompts=prompts, completions=completions)
        assert raised.value.status == 503 and raised.value.attempts == 3
    else:
        assert reward(prompts=prompts, completions=completions) == [None] * len(prompts)
    assert running.requests("rewards", 503) == 3
    assert len(waits) == 2 and all(0 < wait <= 30 for wait in waits)  # Retry-After, capped


def test_a_predictor_waking_up_is_waited_for(gateway, backend):
    backend.healthy = False
    running = gateway(scale_from_zero_timeout_seconds="0.2")
    reward = GatewayReward(running.url)

    def predictor_ready(wait: float) -> None:  # the back-off's signal: vLLM is up for the next try
        backend.healthy = True

    reward.client.sleep = predictor_ready
    rewards = reward(prompts=["p"], completions=["r"])
    assert rewards == pytest.approx([logit("pr")])
    assert (running.requests("rewards", 503), running.requests("rewards", 200)) == (1, 1)


def test_a_bearer_token_is_sent_from_the_argument_the_environment_or_a_file(gateway, backend, tmp_path, monkeypatch):
    accepted = tmp_path / "accepted"
    accepted.write_text("s3cret\n")
    running = gateway(auth_token_file=str(accepted))
    call = {"prompts": ["p"], "completions": ["r"]}

    with pytest.raises(GatewayError) as raised:
        GatewayReward(running.url)(**call)
    assert raised.value.status == 401 and raised.value.attempts == 1

    assert GatewayReward(running.url, token="s3cret")(**call) == pytest.approx([logit("pr")])
    mine = tmp_path / "mine"
    mine.write_text("s3cret\n")
    assert GatewayReward(running.url, token_file=str(mine))(**call) == pytest.approx([logit("pr")])
    monkeypatch.setenv("REWARD_GATEWAY_TOKEN", "s3cret")
    monkeypatch.setenv("REWARD_GATEWAY_URL", running.url)
    assert GatewayReward()(**call) == pytest.approx([logit("pr")])
    assert running.requests("rewards", 401) == 1 and running.requests("rewards", 200) == 3
    assert all("s3cret" not in str(body) for _, body in backend.calls)


def test_trl_sees_a_name_and_the_reward_pickles():
    """TRL logs rewards under get_callable_name(func); its async GRPO worker pickles reward funcs."""
    reward = GatewayReward("http://gateway", name="skywork")
    assert trl_name(reward) == "skywork"
    assert trl_name(reward.as_async()) == "reward_gateway"
    assert trl_name(pickle.loads(pickle.dumps(reward))) == "skywork"
    again = pickle.loads(pickle.dumps(reward.as_async()))
    assert inspect.iscoroutinefunction(again) and again.args[0].client.settings.url == "http://gateway"


def test_prompts_and_completions_must_agree_in_shape():
    with pytest.raises(TypeError, match="both be strings"):
        GatewayReward("http://gateway")(prompts=["p"], completions=[[{"role": "assistant", "content": "r"}]])
    with pytest.raises(ValueError, match="on_error"):
        GatewayReward("http://gateway", on_error="ignore")
