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

An item a reward model could not score (null in its part, its reason in the part's
``failures``: reward_gateway.items.outcomes) has no combined reward: a sum without that part
would be a number on another scale. It is answered null with a ``part_failed`` failure
naming the model, and leaves the running statistics as they were; best-of-n picks among
the candidates that were scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reward_gateway.config.gateway import PipelineReward
from reward_gateway.items.errors import UpstreamError
from reward_gateway.items.outcomes import Failure

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

    def standardise(self, values: Sequence[float | None]) -> list[float | None]:
        std = self.std
        scale = std if std > MIN_STD else 1.0
        return [None if value is None else (value - self.mean) / scale for value in values]


@dataclass
class Part:
    """One reward model's answer for the items: each reward (None where it failed) and why each failed."""

    rewards: list[float | None]
    failures: dict[int, Failure] = field(default_factory=dict)


@dataclass
class Combined:
    rewards: list[float | None]  # per item; None where a part failed
    parts: dict[str, list[float | None]]  # raw, by reward model name
    normalised: dict[str, list[float | None]] = field(default_factory=dict)  # running-normalised models only
    failures: dict[int, Failure] = field(default_factory=dict)  # by item: the first part that failed it

    def failure_list(self) -> list[dict[str, Any]]:
        return [self.failures[index].answer(index) for index in sorted(self.failures)]


class Combiner:
    """Weights (and normalises) the parts of REWARD_GATEWAY_PIPELINE_REWARDS; keeps the running statistics."""

    def __init__(self, rewards: Sequence[PipelineReward]):
        self.rewards = tuple(rewards)
        self.steps = frozenset(reward.step for reward in self.rewards)
        self.stats = {reward.step: RunningStats() for reward in self.rewards if reward.normalise == "running"}

    def combine(self, parts: dict[str, Part], count: int) -> Combined:
        """``parts``: each reward step's rewards (checked by :func:`reward_parts`)."""
        total: list[float | None] = [0.0] * count
        combined = Combined(total, {})
        # No await between a model's update and its use: one request's batch is never
        # standardised with statistics half-updated by another's.
        for reward in self.rewards:
            part = parts[reward.step]
            raw = part.rewards
            combined.parts[reward.name] = raw
            used = raw
            stats = self.stats.get(reward.step)
            if stats is not None:
                stats.update([value for value in raw if value is not None])
                used = combined.normalised[reward.name] = stats.standardise(raw)
            for index, value in enumerate(used):
                if value is None:
                    total[index] = None
                    if index not in combined.failures:
                        combined.failures[index] = _part_failed(reward.name, part.failures.get(index))
                elif total[index] is not None:
                    total[index] += reward.weight * value  # type: ignore[operator]
        return combined


def _part_failed(name: str, failure: Failure | None) -> Failure:
    """An item's combined reward failed for reward model ``name``'s failure (None: its part gave no reason)."""
    if failure is None:
        return Failure("part_failed", f"reward model {name!r} answered no reward for this item", retry=False)
    message = f"reward model {name!r}: {failure.reason}: {failure.message}"
    return Failure("part_failed", message, failure.retry, failure.status, failure.headers)


def reward_parts(answer: dict[str, Any], combiner: Combiner, count: int) -> dict[str, Part]:
    """Each reward step's part from an Ensemble's answer: ``{"rewards": [number or null per item],
    "failures"?: [{"index", "reason", "message", "retry"}]}`` (a reward model's /v1/pipeline/reward)."""
    parts = {}
    for step in sorted(combiner.steps):
        part = answer.get(step)
        if part is None:
            raise step_error(step, "its answer is missing from the Ensemble's (a reward model's part)")
        if not isinstance(part, dict):
            raise step_error(step, "expected a JSON object")
        rewards = part.get("rewards")
        if not isinstance(rewards, list) or len(rewards) != count:
            raise step_error(step, f"expected rewards: a list of {count} numbers (null where an item failed)")
        if not all(value is None or _is_number(value) for value in rewards):
            raise step_error(step, "rewards holds something other than a number or null")
        values = [None if value is None else float(value) for value in rewards]
        parts[step] = Part(values, _failures(part.get("failures"), count))
    return parts


def _failures(listed: Any, count: int) -> dict[int, Failure]:
    """A part's failures by item (what a reward model's answer says of its nulls; anything else ignored)."""
    failures = {}
    for entry in listed if isinstance(listed, list) else ():
        index = entry.get("index") if isinstance(entry, dict) else None
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count:
            failures[index] = Failure(str(entry.get("reason")), str(entry.get("message")), entry.get("retry") is True)
    return failures


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
    (on a tie, the first); ``best.index`` is the best's position among the group's candidates. A
    candidate without a combined reward (a part failed) is never the best; a group none of whose
    candidates was scored has no best (null)."""
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
        scored = [index for index, item in enumerate(items) if combined.rewards[item] is not None]
        best = max(scored, key=lambda index: (combined.rewards[items[index]], -index)) if scored else None
        results.append(
            {
                "prompt": prompts[items[0]],
                "best": None
                if best is None
                else {"response": responses[items[best]], "reward": combined.rewards[items[best]], "index": best},
                "candidates": candidates,
            }
        )
    return results


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
