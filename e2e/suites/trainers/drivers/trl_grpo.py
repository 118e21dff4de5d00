"""TRL's GRPOTrainer trains a tiny random policy on the CPU, its reward the gateway's
(``reward_gateway_client.trl.GatewayReward``), run under the TRL venv.

Request: ``{"url": status.url, "tokenizer": folder, "output_dir": folder, "prompts": [str, ...],
"pause_after_step"?: n}`` (after step n it prints ``STEP n`` and waits for the test's line on stdin).
The policy is a random 2-layer LlamaForCausalLM over the reward model's own tokenizer (the same
family, as a policy and its reward model are). The trainer is built by the docs' snippet
``trl`` (docs/trainers.md), then trained. Answer: TRL's version, the optimizer steps it made, and
per step what TRL logged: each prompt, completion and reward (its ``_logs``, the rows of its
completions table; NaN where the reward function gave None) and the step's ``rewards/<name>/mean``
and ``<name>/failed_items`` metrics (the latter logged by the reward function, through TRL's
``log_metric``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
import trl
from common import answer, request, snippet, wait_for_test
from datasets import Dataset

POLICY_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}


class StepCapture(transformers.TrainerCallback):
    """At each log (every step: the snippet's logging_steps=1), what TRL logged for the step."""

    def __init__(self, trainer, reward_name: str, pause_after_step: int | None):
        self.trainer, self.reward_name, self.steps = trainer, reward_name, []
        self.pause_after_step = pause_after_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or f"rewards/{self.reward_name}/mean" not in logs:
            return  # the run's closing summary
        logged = self.trainer._logs  # what TRL's completions table is made of
        self.steps.append(
            {
                "step": state.global_step,
                "prompts": list(logged["prompt"]),
                "completions": list(logged["completion"]),
                "rewards": [float(r) for r in logged["rewards"][self.reward_name]],
                "mean": logs[f"rewards/{self.reward_name}/mean"],
                "failed_items": logs.get(f"{self.reward_name}/failed_items"),
            }
        )
        print(f"STEP {state.global_step}", flush=True)
        if state.global_step == self.pause_after_step:
            wait_for_test()  # the test acts between two steps (deletes the predictor pod)


def main() -> None:
    asked = request()
    torch.manual_seed(0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(asked["tokenizer"])
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **POLICY_SHAPE,
    )
    policy = transformers.LlamaForCausalLM(config)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in asked["prompts"]])
    scope = {
        "STATUS_URL": asked["url"],
        "OUTPUT_DIR": asked["output_dir"],
        "policy": policy,
        "tokenizer": tokenizer,
        "dataset": dataset,
    }
    exec(snippet("trl"), scope)  # defines `reward` and `trainer`, as the docs do
    trainer, reward = scope["trainer"], scope["reward"]
    capture = StepCapture(trainer, reward.__name__, asked.get("pause_after_step"))
    trainer.add_callback(capture)
    trainer.train()
    answer({"trainer": "trl", "version": trl.__version__, "optimizer_steps": trainer.state.global_step,
            "steps": capture.steps})  # fmt: skip


if __name__ == "__main__":
    main()
