"""Which rows a batch keeps: the best of each group (best-of-N) or every row at or over a threshold
(rejection sampling). A row without a reward is never selected; ties go to the first row in the input."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """``best_of_group``: the highest reward of each group selected; ``threshold``: a reward at or over it.
    Both may be set: the best of a group, if it reaches the threshold."""

    best_of_group: bool = False
    threshold: float | None = None

    @property
    def active(self) -> bool:
        return self.best_of_group or self.threshold is not None

    def of_group(self, rewards: list[float | None]) -> list[bool]:
        """One group's rows, in input order: whether each is selected."""
        chosen = [reward is not None and (self.threshold is None or reward >= self.threshold) for reward in rewards]
        if not self.best_of_group:
            return chosen
        best = max((i for i, ok in enumerate(chosen) if ok), key=lambda i: rewards[i], default=None)  # type: ignore[arg-type,return-value]
        return [i == best for i in range(len(rewards))]
