"""Pure functions from a (defaulted) spec to the child manifests. No I/O here."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..api.defaults import apply_defaults
from .inferenceservice import render_inference_service

# The operator's own image carries the gateway; it moves with the version.
DEFAULT_GATEWAY_IMAGE = f"reward-operator:{__version__}"


def render_reward_model(
    reward_model: dict[str, Any], gateway_image: str = DEFAULT_GATEWAY_IMAGE
) -> list[dict[str, Any]]:
    """Every child of a RewardModel, in apply order."""
    return [render_inference_service(apply_defaults(reward_model), gateway_image)]
