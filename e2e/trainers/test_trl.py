"""TRL's own GRPOTrainer trains against the served RewardModel, and the rewards it logged are the
model's: transformers' numbers for the same completions.

The trainer is the docs' snippet ``trl`` (docs/trainers.md), run under the TRL venv by
drivers/trl_grpo.py: a random policy over the reward model's tokenizer, on the CPU, for at least two
optimizer steps, with ``reward_gateway_client.trl.GatewayReward`` pointed at the RewardModel's URL.
"""

from __future__ import annotations

from summary import TOLERANCE, max_diff, report
from trainer_venvs import run_driver

PROMPTS = ["what is two plus three?", "find the sum of four and seven", "name a prime number", "count to five"]


def test_grpo_trains_on_the_gateway_rewards_and_logs_the_models_numbers(served, transformers_scores, tmp_path):
    ran = run_driver("trl", "trl_grpo", {"url": served.url, "tokenizer": str(served.model.path),
                                         "output_dir": str(tmp_path / "grpo"), "prompts": PROMPTS},
                     served.wrap)  # fmt: skip
    assert ran["optimizer_steps"] >= 2, ran
    assert [step["step"] for step in ran["steps"]] == list(range(1, ran["optimizer_steps"] + 1))
    diffs, rewards = [], 0
    for step in ran["steps"]:
        # TRL's rows: the prompt and the completion as messages, as GatewayReward sent them
        items = [{"messages": prompt + completion} for prompt, completion in zip(step["prompts"], step["completions"],
                                                                                  strict=True)]  # fmt: skip
        want = transformers_scores(items)
        diffs.append(max_diff(step["rewards"], want))
        assert abs(step["mean"] - sum(want) / len(want)) <= TOLERANCE, (step["mean"], want)
        rewards += len(want)
    report(f"TRL {ran['version']} GRPOTrainer on {served.where}: {ran['optimizer_steps']} optimizer steps, "
           f"{rewards} rewards logged, max |diff| vs transformers {max(diffs):.2e}")  # fmt: skip
    assert max(diffs) <= TOLERANCE
