"""Sums read from a Prometheus text exposition (vLLM's or the gateway's /metrics), by sample name."""

from __future__ import annotations

import re


def sample_sum(text: str, sample: str) -> float:
    """The sum of the samples named ``sample`` over all their label sets; ``sample`` may carry one label
    set in full (``name{a="x",b="y"}``, as the exposition writes it) to read that series alone."""
    pattern = re.compile(rf"{re.escape(sample)}(\{{[^}}]*\}})? ([0-9.e+-]+)$")
    return sum(float(match.group(2)) for line in text.splitlines() if (match := pattern.match(line)))
