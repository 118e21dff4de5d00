"""A trainer's prompts and completions as the gateway's /v1/rewards items.

Two dataset shapes, as TRL defines them (and scores them with its own reward model,
trl/trainer/grpo_trainer.py::_calculate_rewards):

- conversational: each prompt and completion is a list of message dicts. The item is
  ``{"messages": prompt + completion}``; the gateway applies the reward model's chat
  template once. Messages go as they are (tool_calls, tool_call_id, name, reasoning,
  reasoning_content, content as a list of text parts): the gateway takes the fields a
  chat template reads, and refuses (400, naming it) what a text reward model cannot score.
- standard: each is a string. The item is ``{"text": prompt + completion}``: sent to vLLM
  exactly as given, no template, no special tokens added, as TRL's own reward model
  tokenizes ``p + c`` with ``add_special_tokens=False``.

Each item carries a ``group``: completions of one prompt go to vLLM together in one call.
The key is the prompt's position among the step's distinct prompts (a small number, not
the prompt itself, which would repeat every prompt in the body once per completion).
Equal prompts share a group, which only batches them together: a reward never depends on
its group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def is_conversational(value: Any) -> bool:
    """A list of message dicts (TRL's conversational form), as opposed to a string."""
    return isinstance(value, list) and all(isinstance(message, dict) and "role" in message for message in value)


def _prompt_key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)


def reward_items(prompts: Sequence[Any], completions: Sequence[Any]) -> list[dict[str, Any]]:
    """One item per completion, in order, grouped by prompt."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    groups: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    for prompt, completion in zip(prompts, completions, strict=True):
        group = groups.setdefault(_prompt_key(prompt), len(groups))
        if is_conversational(prompt) and is_conversational(completion):
            items.append({"messages": [*prompt, *completion], "group": group})
        elif isinstance(prompt, str) and isinstance(completion, str):
            items.append({"text": prompt + completion, "group": group})
        else:
            raise TypeError(
                "a prompt and its completion must both be strings (standard dataset) or both lists of "
                f"messages (conversational), got {type(prompt).__name__} and {type(completion).__name__}"
            )
    return items
