"""A trainer's prompts and completions as the gateway's /v1/rewards items.

Two dataset shapes, as TRL defines them (and scores them with its own reward model,
trl/trainer/grpo_trainer.py::_calculate_rewards):

- conversational: each prompt and completion is a list of message dicts. The item is
  ``{"messages": prompt + completion}``; the gateway applies the reward model's chat
  template once. Messages go as they are (tool_calls, tool_call_id, name, reasoning,
  reasoning_content, content as a list of text parts): the gateway takes the fields a
  chat template reads, and refuses (400, naming it) what a text reward model cannot score.
- standard: each is a string. The item is ``{"text": prompt + completion, "prompt": prompt}``:
  a score head gets the text exactly as given, no template, no special tokens added, as TRL's
  own reward model tokenizes ``p + c`` with ``add_special_tokens=False``; a judge reads the
  completion apart from the prompt the text starts with.

``references`` (one per completion, where given): each item's ``reference``, the answer a
judge compares the completion with (a score head scores without it).

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


def reference_text(reference: Any) -> str | None:
    """A dataset's reference answer as an item's ``reference``: its text (anything else as JSON)."""
    if reference is None or isinstance(reference, str):
        return reference
    return json.dumps(reference, ensure_ascii=False, default=str)


def reward_items(
    prompts: Sequence[Any], completions: Sequence[Any], references: Sequence[Any] | None = None
) -> list[dict[str, Any]]:
    """One item per completion, in order, grouped by prompt."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    if references is not None and len(references) != len(completions):
        raise ValueError(f"{len(references)} references but {len(completions)} completions")
    groups: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        group = groups.setdefault(_prompt_key(prompt), len(groups))
        if is_conversational(prompt) and is_conversational(completion):
            items.append({"messages": [*prompt, *completion], "group": group})
        elif isinstance(prompt, str) and isinstance(completion, str):
            items.append({"text": prompt + completion, "prompt": prompt, "group": group})
        else:
            raise TypeError(
                "a prompt and its completion must both be strings (standard dataset) or both lists of "
                f"messages (conversational), got {type(prompt).__name__} and {type(completion).__name__}"
            )
        reference = None if references is None else reference_text(references[index])
        if reference is not None:
            items[-1]["reference"] = reference
    return items
