"""A judge's verdict, read from vLLM's chat completion answer: a reward, or why there is none.

Two modes (reward_gateway.config.judge):

- label probabilities: vLLM answers the log-probability of each label's token at the first generated
  position (``logprob_token_ids``: the raw log-softmax over the whole vocabulary, before any sampling
  setting). The reward is ``sum(value * p) / sum(p)`` over the labels, computed from the largest
  log-probability down so that nothing underflows; ``sum(p)``, the share of probability the labels
  hold, is kept for the metrics (a judge that stops following its format shows there first). Labels
  that hold no probability at all (vLLM writes -9999 for a log-probability of minus infinity) give
  no verdict: renormalising nothing would make up a number.
- structured: the generated text under vLLM's structured output, at temperature 0. A verdict cut
  short by ``maxTokens`` (finish_reason ``length``), one that does not parse, lacks the field, is no
  number or falls outside the range gives no verdict, with the text in the message.

An answer not of vLLM's shape is vLLM's fault (bad_response, a 502), never a verdict's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reward_gateway.config.judge import Label, Structured
from reward_gateway.items.extract import bad_response

# What vLLM's chat completions write for a log-probability of minus infinity (JSON has none).
VLLM_NO_PROBABILITY = -9999.0
# What a no-verdict message quotes of the judge's text.
QUOTED_CHARS = 120
# The causes of a verdict (reward_gateway_judge_verdicts_total's `outcome` label).
OK, CUT_SHORT, UNPARSED, OUT_OF_RANGE, NO_LABEL_PROBABILITY = (
    "ok",
    "cut_short",
    "unparsed",
    "out_of_range",
    "no_label_probability",
)
OUTCOMES = (OK, CUT_SHORT, UNPARSED, OUT_OF_RANGE, NO_LABEL_PROBABILITY)
TOKEN_ID_PREFIX = "token_id:"  # vLLM's token names with return_tokens_as_token_ids


@dataclass(frozen=True)
class Verdict:
    reward: float | None  # None: no verdict, ``message`` says why
    outcome: str
    message: str = ""
    label_share: float | None = None  # label probabilities: the probability the labels hold


def no_verdict(outcome: str, message: str) -> Verdict:
    return Verdict(None, outcome, message)


def _choice(answer: Any) -> dict[str, Any]:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise bad_response("a chat completion with one choice was expected")
    return choices[0]


def label_verdict(answer: Any, labels: Sequence[Label], ids: Sequence[int]) -> Verdict:
    """The label-probability verdict of one chat completion asked with ``logprob_token_ids`` = ``ids``."""
    logprobs = _choice(answer).get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        raise bad_response("no log-probabilities for the verdict's token")
    found: dict[int, float] = {}
    for entry in content[0].get("top_logprobs") or ():
        token = entry.get("token") if isinstance(entry, dict) else None
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX) and _is_number(value):
            found[int(token.removeprefix(TOKEN_ID_PREFIX))] = float(value)
    missing = [label.text for label, token in zip(labels, ids, strict=True) if token not in found]
    if missing:
        raise bad_response(f"no log-probability for the label(s) {', '.join(map(repr, missing))}")
    logs = [found[token] for token in ids]
    top = max(logs)
    if top <= VLLM_NO_PROBABILITY:
        return no_verdict(NO_LABEL_PROBABILITY, "the judge gives its labels no probability at all")
    weights = [math.exp(log - top) for log in logs]
    total = sum(weights)
    reward = sum(label.value * weight for label, weight in zip(labels, weights, strict=True)) / total
    return Verdict(reward, OK, label_share=math.exp(top) * total)


def structured_verdict(answer: Any, structured: Structured) -> Verdict:
    """The structured verdict of one chat completion asked under vLLM's structured output."""
    choice = _choice(answer)
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        text = ""
    if choice.get("finish_reason") == "length":
        return no_verdict(
            CUT_SHORT,
            f"the verdict was cut short at maxTokens ({structured.max_tokens} tokens): {_quoted(text)}",
        )
    if structured.choices is not None:
        chosen = next((label for label in structured.choices if label.text == text.strip()), None)
        if chosen is None:
            return no_verdict(UNPARSED, f"the verdict is none of the choices: {_quoted(text)}")
        return _in_range(chosen.value, structured)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return no_verdict(UNPARSED, f"the verdict is not JSON: {_quoted(text)}")
    value: Any = parsed
    for part in (structured.field or "").split("."):
        if not isinstance(value, dict) or part not in value:
            return no_verdict(UNPARSED, f"the verdict has no field {structured.field!r}: {_quoted(text)}")
        value = value[part]
    if not _is_number(value) or not math.isfinite(value):
        return no_verdict(UNPARSED, f"the verdict's {structured.field!r} is not a number: {_quoted(text)}")
    return _in_range(float(value), structured)


def _in_range(value: float, structured: Structured) -> Verdict:
    low, high = structured.minimum, structured.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
        return no_verdict(OUT_OF_RANGE, f"the verdict {value:g} is outside {bounds}")
    return Verdict(value, OK)


def _quoted(text: str) -> str:
    shown = text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."
    return json.dumps(shown, ensure_ascii=False)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
