"""How a trainer's rewards are held to transformers', and the summary line `make trainers` prints."""

from __future__ import annotations

from reward_testing.scoring_cases import TOLERANCE

__all__ = ["TOLERANCE", "max_diff", "report"]


def max_diff(got: list[float], want: list[float]) -> float:
    """The largest |got - want|, over lists of one length."""
    assert len(got) == len(want), (got, want)
    return max(abs(g - w) for g, w in zip(got, want, strict=True))


# The summary's lines, printed at the end of the run by conftest.py's pytest_terminal_summary
LINES: list[str] = []


def report(line: str) -> None:
    """One line of `make trainers`' summary: the trainer and version, what it did, the max |diff|."""
    LINES.append(line)
