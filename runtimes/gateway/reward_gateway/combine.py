"""The actor's combined reward: each reward model's part, weighted, optionally normalised.

For item i, ``combined_i = sum over reward models m of weight_m * x_m,i``, where x is
the model's raw reward, or for ``normalise: running`` the reward standardised by
that model's running mean and standard deviation in this gateway process.

The running statistics (Welford's algorithm, population variance) take in every
batch *before* it is standardised: the first batch is standardised by its own
mean and deviation, not passed through raw, and a later batch moves the
statistics by its share of everything seen. Where the deviation is still zero
(one reward seen, or all equal) a reward is only centred (divided by 1), never
divided by zero. The statistics live in one process and start afresh with it:
each replica of the actor's gateway keeps its own, and a restart forgets them.
Every combination counts, the best-of-n flow's candidates included.

Pure: no I/O. The parts arrive as KServe's Ensemble answer (``{"<step>": <its
answer>}``), so a part that is missing or malformed is a step's fault, never the
client's: 502, naming the step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reward_gateway.config import PipelineReward
from reward_gateway.errors import UpstreamError

INPUT_STEP = "input"  # the actor's own /v1/pipeline/input, in both Ensembles
CRITIC_STEP = "critic"
REFERENCE_STEP = "reference"
# Below this a deviation counts as none: rewards are centred only.
MIN_STD = 1e-8


def step_error(step: str, message: str) -> UpstreamError:
    return UpstreamError("bad_response", 502, f"step {step!r}: {message}")


class RunningStats:
    """Mean and variance of every reward seen, updated a value at a time (Welford)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0  # sum of squared distances from the mean

    @property
    def std(self) -> float:
        return math.sqrt(self._m2 / self.count) if self.count else 0.0

    def update(self, values: Sequence[float]) -> None:
        for value in values:
            self.count += 1
            delta = value - self.mean
            self.mean += delta / self.count
            self._m2 += delta * (value - self.mean)

    def standardise(self, values: Sequence[float]) -> list[float]:
        std = self.std
        scale = std if std > MIN_STD else 1.0
        return [(value - self.mean) / scale for value in values]


@dataclass
class Combined:
    rewards: list[float]  # per item
    parts: dict[str, list[float]]  # raw, by reward model name
    normalised: dict[str, list[float]] = field(default_factory=dict)  # running-normalised models only


class Combiner:
    """Weights (and normalises) the parts of REWARD_GATEWAY_PIPELINE_REWARDS; keeps the running statistics."""

    def __init__(self, rewards: Sequence[PipelineReward]):
        self.rewards = tuple(rewards)
        self.steps = frozenset(reward.step for reward in self.rewards)
        self.stats = {reward.step: RunningStats() for reward in self.rewards if reward.normalise == "running"}

    def combine(self, parts: dict[str, list[float]], count: int) -> Combined:
        """``parts``: each reward step's raw rewards (checked by :func:`reward_parts`)."""
        combined = Combined([0.0] * count, {})
        # No await between a model's update and its use: one request's batch is never
        # standardised with statistics half-updated by another's.
        for reward in self.rewards:
            raw = parts[reward.step]
            combined.parts[reward.name] = raw
            used = raw
            stats = self.stats.get(reward.step)
            if stats is not None:
                stats.update(raw)
                used = combined.normalised[reward.name] = stats.standardise(raw)
            for index, value in enumerate(used):
                combined.rewards[index] += reward.weight * value
        return combined


def reward_parts(answer: dict[str, Any], combiner: Combiner, count: int) -> dict[str, list[float]]:
    """Each reward step's rewards from an Ensemble's answer: ``{"rewards": [number per item]}``."""
    parts = {}
    for step in sorted(combiner.steps):
        part = answer.get(step)
        if part is None:
            raise step_error(step, "its answer is missing from the Ensemble's (a reward model's part)")
        rewards = part.get("rewards") if isinstance(part, dict) else None
        parts[step] = numbers(step, "rewards", rewards, count)
    return parts


def unexpected_steps(answer: dict[str, Any], expected: set[str] | frozenset[str]) -> None:
    """Refuse a step this gateway does not combine: a graph and REWARD_GATEWAY_PIPELINE_REWARDS that
    disagree would otherwise give a reward with a model left out, silently."""
    unknown = sorted(set(answer) - set(expected))
    if unknown:
        raise step_error(
            unknown[0],
            f"not a step this gateway combines (expected {', '.join(sorted(expected))}): check "
            "REWARD_GATEWAY_PIPELINE_REWARDS against the graph",
        )


def numbers(step: str, name: str, values: Any, count: int) -> list[float]:
    if not isinstance(values, list) or len(values) != count:
        raise step_error(step, f"expected {name}: a list of {count} numbers")
    if not all(_is_number(value) for value in values):
        raise step_error(step, f"{name} holds something other than a number")
    return [float(value) for value in values]


def rows_of_numbers(step: str, name: str, part: Any, count: int) -> list[list[float]]:
    """``{name: [[number, ...] per item]}``, as the critic's values and the reference's log-probabilities."""
    rows = part.get(name) if isinstance(part, dict) else None
    if not isinstance(rows, list) or len(rows) != count:
        raise step_error(step, f"expected {name}: a list of {count} lists of numbers")
    if not all(isinstance(row, list) and all(_is_number(value) for value in row) for row in rows):
        raise step_error(step, f"{name} holds something other than lists of numbers")
    return [[float(value) for value in row] for row in rows]


def best_by_group(
    prompts: list[str], responses: list[str], groups: list[int], combined: Combined
) -> list[dict[str, Any]]:
    """Per group (in the order groups first appear) its candidates and the best by combined reward
    (on a tie, the first); ``best.index`` is the best's position among the group's candidates."""
    members: dict[int, list[int]] = {}
    for item, group in enumerate(groups):
        members.setdefault(group, []).append(item)
    results = []
    for group, items in members.items():
        if any(prompts[item] != prompts[items[0]] for item in items):
            raise step_error(INPUT_STEP, f"group {group} holds candidates of different prompts")
        candidates = [
            {
                "response": responses[item],
                "reward": combined.rewards[item],
                "parts": {name: part[item] for name, part in combined.parts.items()},
            }
            for item in items
        ]
        best = max(range(len(items)), key=lambda index: (combined.rewards[items[index]], -index))
        results.append(
            {
                "prompt": prompts[items[0]],
                "best": {"response": responses[items[best]], "reward": combined.rewards[items[best]], "index": best},
                "candidates": candidates,
            }
        )
    return results


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
