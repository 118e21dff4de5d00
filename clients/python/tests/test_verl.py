"""The verl adapter, called exactly as verl 0.9 calls a custom reward function, against the
real gateway process and the fake vLLM.

verl's call (tag v0.9.0, 483b8a0; the 0.9.1 wheel has the same lines):
- verl/trainer/ppo/reward.py L50-86: the function named by reward.custom_reward_function is
  wrapped so the config's reward_kwargs are merged into each call's keywords, winning
  (``_call_with_kwargs_async``, L41-47).
- verl/experimental/reward_loop/reward_manager/naive.py L66-73: ``await compute_score(
  data_source=..., solution_str=..., ground_truth=..., extra_info=...)``, one call per sample.
- verl/experimental/reward_loop/reward_loop.py L138-143: a worker starts every sample of its
  share as a task on one event loop and gathers them.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest
from reward_gateway_client.http import GatewayError, ItemFailed
from reward_gateway_client.verl import compute_score

from reward_testing.fake_vllm import MAX_CHARS, conversation_text, logit

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def verl_reward_fn(raw_fn, reward_kwargs: dict):
    """What get_custom_reward_fn hands the reward manager: the config's kwargs win (L41-47, L82-86)."""
    assert inspect.iscoroutinefunction(raw_fn)  # L83: so verl awaits it on the worker's loop

    async def wrapped(*args, **kwargs):
        return await raw_fn(*args, **{**kwargs, **reward_kwargs})

    return wrapped


def samples(prompts: int = 2, rollouts: int = 4) -> list[dict]:
    """verl's per-sample arguments (naive.py L42-52, L66-73); the prompt in extra_info."""
    out = []
    for p in range(prompts):
        chat = [{"role": "user", "content": f"question {p}"}]
        for r in range(rollouts):
            extra_info = {"prompt": chat, "index": p, "num_turns": None, "rollout_reward_scores": {}}
            out.append(
                {
                    "data_source": "demo",
                    "solution_str": f"answer {p}.{r}",
                    "ground_truth": "4",
                    "extra_info": extra_info,
                }
            )
    return out


async def run_single(reward_fn, sample: dict) -> float:
    """run_single (naive.py L66-73): one call per sample."""
    return await reward_fn(
        data_source=sample["data_source"],
        solution_str=sample["solution_str"],
        ground_truth=sample["ground_truth"],
        extra_info=sample["extra_info"],
    )


async def worker_batch(reward_fn, batch: list[dict]) -> list[float]:
    """compute_score_batch (reward_loop.py L138-143) gathering run_single per sample."""
    return await asyncio.gather(*(asyncio.create_task(run_single(reward_fn, sample)) for sample in batch))


def messages_of(sample: dict) -> list[dict]:
    return [*sample["extra_info"]["prompt"], {"role": "assistant", "content": sample["solution_str"]}]


def test_a_workers_samples_go_in_one_request_grouped_by_prompt_with_raw_logits_in_order(gateway, backend):
    running = gateway(chat_template_mode="gateway", chat_template=TEMPLATE)
    batch = samples()
    reward_fn = verl_reward_fn(compute_score, {"url": running.url})

    rewards = asyncio.run(worker_batch(reward_fn, batch))

    texts = ["".join(f"<|{m['role']}|>{m['content']}" for m in messages_of(sample)) for sample in batch]
    assert rewards == pytest.approx([logit(text) for text in texts])
    assert running.requests("rewards", 200) == 1
    assert sorted(tuple(body["input"]) for _, body in backend.calls) == [tuple(texts[:4]), tuple(texts[4:])]


def test_the_url_comes_from_the_environment_as_host_and_port(gateway, backend, monkeypatch):
    running = gateway()
    monkeypatch.setenv("REWARD_GATEWAY_URL", running.url.removeprefix("http://"))
    batch = samples(prompts=1, rollouts=2)
    rewards = asyncio.run(worker_batch(verl_reward_fn(compute_score, {}), batch))
    assert rewards == pytest.approx([logit(conversation_text(messages_of(sample))) for sample in batch])


def test_text_prompts_become_prompt_and_response_items(gateway, backend):
    running = gateway(chat_template_mode="gateway", chat_template=TEMPLATE)
    batch = samples(prompts=1, rollouts=1)
    batch[0]["extra_info"]["prompt"] = "question 0"
    [reward] = asyncio.run(worker_batch(verl_reward_fn(compute_score, {"url": running.url}), batch))
    assert reward == pytest.approx(logit("<|user|>question 0<|assistant|>answer 0.0"))


def test_an_over_long_sample_raises_in_its_own_call_alone(gateway, backend):
    """verl has no missing reward (its reward loop makes a tensor of every score): the sample the gateway could
    not score raises with the reason, never a number; the others of the same request get their rewards."""
    running = gateway()
    batch = samples(prompts=1, rollouts=3)
    batch[1]["solution_str"] = "x" * (MAX_CHARS + 1)
    reward_fn = verl_reward_fn(compute_score, {"url": running.url})

    async def each() -> list:
        return await asyncio.gather(*(run_single(reward_fn, sample) for sample in batch), return_exceptions=True)

    first, failed, third = asyncio.run(each())
    assert (first, third) == pytest.approx([logit(conversation_text(messages_of(batch[i]))) for i in (0, 2)])
    assert isinstance(failed, ItemFailed) and failed.failure.reason == "too_long" and not failed.failure.retry
    assert "maximum context length" in str(failed)
    assert running.requests("rewards", 200) == 1


def test_a_whole_4xx_raises_in_every_caller_and_is_not_retried(gateway, backend, tmp_path):
    accepted = tmp_path / "token"
    accepted.write_text("s3cret\n")
    running = gateway(auth_token_file=str(accepted))
    with pytest.raises(GatewayError) as raised:  # no token: 401
        asyncio.run(worker_batch(verl_reward_fn(compute_score, {"url": running.url}), samples(prompts=1, rollouts=2)))
    assert raised.value.status == 401
    assert running.requests("rewards", 401) == 1


def test_a_token_from_reward_kwargs_is_sent(gateway, backend, tmp_path):
    accepted = tmp_path / "token"
    accepted.write_text("s3cret\n")
    running = gateway(auth_token_file=str(accepted))
    batch = samples(prompts=1, rollouts=1)
    with pytest.raises(GatewayError) as raised:
        asyncio.run(worker_batch(verl_reward_fn(compute_score, {"url": running.url}), batch))
    assert raised.value.status == 401
    reward_fn = verl_reward_fn(compute_score, {"url": running.url, "token_file": str(accepted)})
    assert asyncio.run(worker_batch(reward_fn, batch)) == pytest.approx(
        [logit(conversation_text(messages_of(batch[0])))]
    )


def test_a_missing_prompt_says_where_to_put_it():
    batch = samples(prompts=1, rollouts=1)
    del batch[0]["extra_info"]["prompt"]
    with pytest.raises(ValueError, match=r"extra_info\['prompt'\] is missing"):
        asyncio.run(worker_batch(verl_reward_fn(compute_score, {"url": "http://gateway"}), batch))


def test_a_prompt_kept_as_a_numpy_object_array_is_sent_as_json(gateway, backend):
    """verl keeps non-tensor columns as numpy object arrays; a prompt stored that way still goes as messages."""
    import numpy  # in the test extras through transformers

    running = gateway()
    batch = samples(prompts=1, rollouts=1)
    chat = batch[0]["extra_info"]["prompt"]
    batch[0]["extra_info"]["prompt"] = numpy.array(chat, dtype=object)
    [reward] = asyncio.run(worker_batch(verl_reward_fn(compute_score, {"url": running.url}), batch))
    assert reward == pytest.approx(logit(conversation_text([*chat, {"role": "assistant", "content": "answer 0.0"}])))
