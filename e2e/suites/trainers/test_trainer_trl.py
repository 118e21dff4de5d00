"""TRL's own GRPOTrainer trains against the served RewardModel, and the rewards it logged are the
model's: transformers' numbers for the same completions.

The trainer is the docs' snippet ``trl`` (docs/trainers.md), run under the TRL venv by
drivers/trl_grpo.py: a random policy over the reward model's tokenizer, on the CPU, for at least two
optimizer steps, with ``reward_gateway_client.trl.GatewayReward`` pointed at the RewardModel's URL.
"""

from __future__ import annotations

import time

import pytest
from summary import TOLERANCE, max_diff, report
from trainer_venvs import run_driver

PROMPTS = ["what is two plus three?", "find the sum of four and seven", "name a prime number", "count to five"]


def grpo(served, tmp_path, **options) -> dict:
    payload = {"url": served.url, "tokenizer": str(served.model.path), "output_dir": str(tmp_path / "grpo"),
               "prompts": PROMPTS}  # fmt: skip
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
