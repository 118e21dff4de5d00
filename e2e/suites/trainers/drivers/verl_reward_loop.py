"""verl's reward loop scores a rollout batch through the gateway, run under the verl venv.

Request: ``{"overrides": [hydra override, ...], "tokenizer": folder, "ray_dir": folder,
"samples": [{"messages", "response"}]}``. The overrides are the docs' snippet ``verl``
(docs/trainers.md) with the RewardModel's URL in it, plus the policy's tokenizer path.

What runs is verl's own: its ``ppo_trainer`` config composed by Hydra with those overrides (as
``main_ppo`` composes it), a ``DataProto`` shaped as its rollout hands it over (left-padded
``prompts``, right-padded ``responses``, ``attention_mask`` over both; ``data_source``,
``reward_model.ground_truth``, ``extra_info`` with the prompt's messages, ``raw_prompt``), and
``RewardLoopManager.compute_rm_score`` on a local Ray: its ``reward.num_workers`` workers each call
``load_reward_manager`` (which loads our ``compute_score`` from ``reward.custom_reward_function``)
and the naive reward manager's ``run_single`` per sample. Answer: the version, the
``rm_scores`` tensor, and per sample the response verl decoded and its last valid token's index;
and whether the same settings under the top-level key of older docs load our function at all. Where
verl's reward loop raised instead (a sample the gateway could not score), ``error``: what it raised.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import ray
import torch
import transformers
import verl
from common import answer, request
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.reward_loop import RewardLoopManager
from verl.trainer.ppo.reward import get_custom_reward_fn

CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


def padded(rows: list[list[int]], pad: int, left: bool) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([[pad] * (width - len(r)) + r if left else r + [pad] * (width - len(r)) for r in rows])


def objects(values: list) -> np.ndarray:
    """A 1-d object array of these values (np.array alone would make lists of lists 2-d)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def rollout_batch(tokenizer, samples: list[dict]) -> tuple[DataProto, list[list[int]]]:
    """The batch verl's rollout hands the reward loop, for these prompts and responses."""
    prompts = [tokenizer.apply_chat_template(s["messages"], add_generation_prompt=True, tokenize=True,
                                             return_dict=False) for s in samples]  # fmt: skip
    responses = [[*tokenizer(s["response"], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
                 for s in samples]  # fmt: skip
    prompt_ids, response_ids = (
        padded(prompts, tokenizer.pad_token_id, True),
        padded(responses, tokenizer.pad_token_id, False),
    )
    mask = torch.cat(
        [padded([[1] * len(p) for p in prompts], 0, True), padded([[1] * len(r) for r in responses], 0, False)], 1
    )
    batch = DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_ids, response_ids], 1)},
        non_tensors={
            "data_source": objects(["reward-operator/e2e"] * len(samples)),
            "reward_model": objects([{"ground_truth": ""} for _ in samples]),
            "extra_info": objects([{"prompt": s["messages"]} for s in samples]),
            "raw_prompt": objects([s["messages"] for s in samples]),
        },
    )  # fmt: skip
    return batch, responses


def composed(overrides: list[str]):
    """verl's ppo_trainer config with these overrides, as main_ppo composes it."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def legacy_key_loads(overrides: list[str]) -> bool:
    """Whether the same settings under the top-level ``custom_reward_function.`` of older docs load
    a reward function at all (verl's get_custom_reward_fn, which load_reward_manager calls)."""
    legacy = [o.replace("reward.custom_reward_function.", "custom_reward_function.", 1) for o in overrides]
    return get_custom_reward_fn(composed(legacy)) is not None


def main() -> None:
    asked = request()
    config = composed(asked["overrides"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(asked["tokenizer"])
    batch, responses = rollout_batch(tokenizer, asked["samples"])
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=asked["ray_dir"],
             runtime_env={"env_vars": {k: os.environ[k] for k in ("PYTHONPATH", "HF_HUB_OFFLINE")}})  # fmt: skip
    try:
        scored = RewardLoopManager(config).compute_rm_score(batch)
    except Exception as error:  # what verl's own code raised: the step stops here
        answer({"trainer": "verl", "version": importlib.metadata.version("verl"), "error": f"{error!r}"})
        return
    finally:
        ray.shutdown()
    answer({
        "trainer": "verl",
        "version": importlib.metadata.version("verl"),
        "workers": config.reward.num_workers,
        "rm_scores": scored.batch["rm_scores"].tolist(),
        # naive.py's solution_str: the valid response ids decoded without special tokens
        "responses": [tokenizer.decode(ids, skip_special_tokens=True) for ids in responses],
        "last_token": [len(ids) - 1 for ids in responses],
        "legacy_key_loads": legacy_key_loads(asked["overrides"]),
    })  # fmt: skip


if __name__ == "__main__":
    main()
