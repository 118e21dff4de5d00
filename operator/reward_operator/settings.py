"""Operator settings, read once from the environment (the chart sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .render import DEFAULT_GATEWAY_IMAGE


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as error:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from error


@dataclass(frozen=True)
class Settings:
    # Seconds between level-based reconciles of every object: a backstop for
    # missed watch events, and how soon an InvalidSpec clears once fixed.
    drift_interval: int = _int("REWARD_OPERATOR_DRIFT_INTERVAL", 60)
    # Prometheus metrics port; 0 turns the endpoint off.
    metrics_port: int = _int("REWARD_OPERATOR_METRICS_PORT", 8080)
    # Image of the reward gateway (the operator's own image carries it).
    gateway_image: str = os.environ.get("REWARD_OPERATOR_GATEWAY_IMAGE") or DEFAULT_GATEWAY_IMAGE


SETTINGS = Settings()
