"""Go durations (90s, 10m, 1h30m), the form the schema's DURATION_PATTERN admits, in seconds.

Render (Knative's annotations, KEDA's cooldown), policy and the controller (a rollout's
interval) all read spec durations through this one parser.
"""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def interval_seconds(duration: str) -> float:
    """A Go duration as the schema admits it (90s, 10m, 1h30m) in seconds."""
    parts = _DURATION_PART.findall(duration)
    if not parts or "".join(number + unit for number, unit in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
