"""The reward scalar for each kind of model, taken from vLLM's responses.

These shapes are what vLLM 0.32 returns; a response of another shape is an
upstream `bad_response`, never a guessed number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reward_gateway.items.errors import UpstreamError


@dataclass(frozen=True)
class Score:
    reward: float
    step_scores: list[float] | None = None


def bad_response(message: str) -> UpstreamError:
    return UpstreamError("bad_response", 502, f"vLLM answered with an unexpected shape: {message}")


def ordered_data(response: Any, expected: int, field: str = "data") -> list[dict[str, Any]]:
    """The answer's ``field`` entries (``choices`` for completions), ordered by their ``index``."""
    data = response.get(field) if isinstance(response, dict) else None
    if not isinstance(data, list) or len(data) != expected:
        raise bad_response(f"expected {expected} entries in {field}")
    ordered: list[Any] = [None] * expected
    for entry in data:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
            raise bad_response(f"an entry in {field} has no index in 0..{expected - 1}")
        if ordered[index] is not None:
            raise bad_response(f"two entries in {field} have index {index}")
        ordered[index] = entry
    return ordered


# Every kind's scorer of one entry takes the step aggregate, so reward_gateway.items.kinds can hold any
# of them; only process models have steps to aggregate. An entry that is not the expected shape
# fails its own item (reward_gateway.items.outcomes), never the others'.


def _pooled(entry: dict[str, Any], when_missing: str) -> list[Any]:
    """A /pooling entry's values: a non-empty list, or the answer is malformed."""
    values = entry.get("data")
    if not isinstance(values, list) or not values:
        raise bad_response(when_missing)
    return values


def sequence_score(entry: dict[str, Any], aggregate: str) -> Score:
    """/classify with use_activation false: probs holds the raw logits; the last is the reward (verl's rule)."""
    probs = entry.get("probs")
    if not isinstance(probs, list) or not probs or not _is_number(probs[-1]):
        raise bad_response("classify entry without probs")
    return Score(float(probs[-1]))


def token_score(entry: dict[str, Any], aggregate: str) -> Score:
    """/pooling with ALL pooling: one value (or one row of labels) per token; the reward is the last token's."""
    return Score(token_value(_pooled(entry, "pooling entry without per-token values")[-1]))


def token_values(response: Any, expected: int) -> list[list[float]]:
    """/pooling with ALL pooling: every token's value, per text (a critic's values)."""
    return [
        [token_value(row) for row in _pooled(entry, "pooling entry without per-token values")]
        for entry in ordered_data(response, expected)
    ]


def token_value(row: Any) -> float:
    """One token's value: a number, or a row of labels whose last is the value (the reward head's one label)."""
    if isinstance(row, list):
        row = row[-1] if row else None
    if not _is_number(row):
        raise bad_response("per-token value is not a number")
    return float(row)


def process_score(entry: dict[str, Any], aggregate: str) -> Score:
    """/pooling with STEP pooling: [p_negative, p_positive] per step tag; the step score is p_positive."""
    steps = _pooled(entry, "no step scores: the input holds no step tag the model knows")
    step_scores = [positive_probability(step) for step in steps]
    return Score(aggregate_steps(step_scores, aggregate), step_scores)


# How far from 1 a pair of float32 softmax probabilities may add up (JSON keeps them to the last digit).
PAIR_SUM_TOLERANCE = 1e-4


def positive_probability(step: Any) -> float:
    """A step's p_positive, from the [p_negative, p_positive] pair of probabilities vLLM answers for it.

    Anything else is a setting that would give a wrong number, so it is refused, never read: one
    value is sigmoid(logit) of a single label (model.returnedTokenIds of one id), more than two are
    the softmax over that many labels, and values that are not probabilities adding up to 1 are raw
    logits (the activation off)."""
    if not (isinstance(step, list) and len(step) == 2 and all(_is_number(value) for value in step)):
        size = f"{len(step)} values" if isinstance(step, list) else "no list"
        raise bad_response(
            f"a step score is not a [p_negative, p_positive] pair ({size}): a process model's step is scored "
            "by the softmax over its head's two labels (model.returnedTokenIds, if set, must be [0, 1])"
        )
    negative, positive = float(step[0]), float(step[1])
    if not (0.0 <= negative <= 1.0 and 0.0 <= positive <= 1.0) or abs(negative + positive - 1.0) > PAIR_SUM_TOLERANCE:
        raise bad_response(
            f"a step score [{negative}, {positive}] is not a pair of probabilities adding up to 1 "
            "(vLLM's softmax over the head's two labels)"
        )
    return positive


def aggregate_steps(step_scores: list[float], how: str) -> float:
    if how == "last":
        return step_scores[-1]
    if how == "mean":
        return sum(step_scores) / len(step_scores)
    if how == "product":
        product = 1.0
        for score in step_scores:
            product *= score
        return product
    return min(step_scores)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
