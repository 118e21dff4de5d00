"""TRL's own GRPOTrainer trains against the served RewardModel, and the rewards it logged are the
model's: transformers' numbers for the same completions.

The trainer is the docs' snippet ``trl`` (docs/trainers.md), run under the TRL venv by
drivers/trl_grpo.py: a random policy over the reward model's tokenizer, on the CPU, for at least two
optimizer steps, with ``reward_gateway_client.trl.GatewayReward`` pointed at the RewardModel's URL.
"""

from __future__ import annotations

import math
import time

import pytest
from summary import TOLERANCE, max_diff, report
from trainer_venvs import run_driver

PROMPTS = ["what is two plus three?", "find the sum of four and seven", "name a prime number", "count to five"]
# Past the reward model's 1024 positions (vLLM's max_model_len for it); the policy's own context is longer.
OVER_LONG_PROMPT = " ".join(["reward"] * 1200)


def grpo(served, tmp_path, prompts: list[str] = PROMPTS, **options) -> dict:
    payload = {"url": served.url, "tokenizer": str(served.model.path), "output_dir": str(tmp_path / "grpo"),
               "prompts": prompts}  # fmt: skip
    return run_driver("trl", "trl_grpo", payload, served.wrap, **options)


def held_to_transformers(ran: dict, transformers_scores) -> tuple[float, int]:
    """Every step's logged rewards and mean against transformers' scores of the same prompt and
    completion; the max |diff| and the number of rewards."""
    assert ran["optimizer_steps"] >= 2, ran
    assert [step["step"] for step in ran["steps"]] == list(range(1, ran["optimizer_steps"] + 1))
    diffs, count = [], 0
    for step in ran["steps"]:
        # TRL's rows: the prompt and the completion as messages, as GatewayReward sent them
        pairs = zip(step["prompts"], step["completions"], strict=True)
        want = transformers_scores([{"messages": prompt + completion} for prompt, completion in pairs])
        diffs.append(max_diff(step["rewards"], want))
        assert abs(step["mean"] - sum(want) / len(want)) <= TOLERANCE, (step["mean"], want)
        count += len(want)
    return max(diffs), count


def test_grpo_trains_on_the_gateway_rewards_and_logs_the_models_numbers(served, transformers_scores, tmp_path):
    ran = grpo(served, tmp_path)
    diff, count = held_to_transformers(ran, transformers_scores)
    report(f"TRL {ran['version']} GRPOTrainer on {served.where}: {ran['optimizer_steps']} optimizer steps, "
           f"{count} rewards logged, max |diff| vs transformers {diff:.2e}")  # fmt: skip
    assert diff <= TOLERANCE


def test_grpo_survives_the_predictor_pod_deleted_between_steps(served, transformers_scores, tmp_path, request):
    """After step 1 the predictor pod (vLLM) is deleted and the trainer goes on at once: step 2's
    rewards wait while Kubernetes starts a new vLLM (the gateway holds, the client retries), and none
    is made up: each still equals transformers'."""
    if served.namespace is None:
        pytest.skip("deletes a pod: the real node only (TRAINERS_SERVE=node)")
    cluster = request.getfixturevalue("cluster")
    selector = f"component=predictor,serving.kserve.io/inferenceservice={served.name}"
    deleted = {}

    def delete_predictor(line: str) -> str | None:
        if line != "STEP 1":
            return None
        listed = cluster.kubectl("get", "pods", "-n", served.namespace, "-l", selector, "-o", "name").stdout.split()
        cluster.kubectl("delete", "-n", served.namespace, *listed, "--wait=true", "--timeout=120s")
        deleted["pods"], deleted["at"] = listed, time.monotonic()
        return "go on"

    started = time.monotonic()
    ran = grpo(served, tmp_path, on_line=delete_predictor)
    assert deleted, "the driver never reached step 1"
    diff, count = held_to_transformers(ran, transformers_scores)
    waited = time.monotonic() - deleted["at"]
    report(f"TRL {ran['version']} with the predictor pod deleted after step 1: {ran['optimizer_steps']} optimizer "
           f"steps, {count} rewards, none made up (max |diff| {diff:.2e}); step 2 and the rest took {waited:.0f}s "
           f"of the run's {time.monotonic() - started:.0f}s")  # fmt: skip
    assert diff <= TOLERANCE


def test_grpo_trains_on_the_others_when_one_prompts_completions_are_over_the_models_context(
    served, transformers_scores, tmp_path
):
    """A prompt longer than the reward model's context among the dataset's: the gateway answers its completions
    as failures (too_long) in the step's one answer, the client gives TRL None for them (NaN in TRL's table,
    counted in its logged reward_gateway/failed_items), and TRL trains every step on the other completions,
    whose rewards are still transformers'. No second request, no 0 in their place."""
    ran = grpo(served, tmp_path, prompts=[OVER_LONG_PROMPT, *PROMPTS[:3]])
    assert ran["optimizer_steps"] >= 2, ran
    failed, diffs = 0, []
    for step in ran["steps"]:
        rows = list(zip(step["prompts"], step["completions"], step["rewards"], strict=True))
        over = [reward for prompt, _, reward in rows if prompt[-1]["content"] == OVER_LONG_PROMPT]
        assert all(math.isnan(reward) for reward in over), over  # None to TRL, never a number
        assert step["failed_items"] == len(over), step["failed_items"]
        scored = [(prompt, completion, reward) for prompt, completion, reward in rows if not math.isnan(reward)]
        assert scored, "a step with nothing to train on"
        want = transformers_scores([{"messages": prompt + completion} for prompt, completion, _ in scored])
        diffs.append(max_diff([reward for *_, reward in scored], want))
        assert abs(step["mean"] - sum(want) / len(want)) <= TOLERANCE, (step["mean"], want)  # the others' mean
        failed += len(over)
    assert failed, "the over-long prompt was never drawn: no failure was shown"
    report(f"TRL {ran['version']} GRPOTrainer on {served.where} with one prompt over the model's context: "
           f"{ran['optimizer_steps']} optimizer steps, {failed} completions given None (logged as "
           f"reward_gateway/failed_items), the others trained on, max |diff| {max(diffs):.2e}")  # fmt: skip
    assert max(diffs) <= TOLERANCE
