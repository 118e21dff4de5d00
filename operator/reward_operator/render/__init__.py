"""Pure functions from a custom resource to the children it should have. No I/O here.

One entry per kind returns every child, in apply order; the controller and the
offline ``reward-operator render`` both call it, so what is tested is what ships.
"""

from __future__ import annotations

from typing import Any

from ..api.defaults import apply_defaults
from ..api.names import DEFAULT_GATEWAY_IMAGE
from .rewardmodel import PRUNED_KINDS, reward_model_children

__all__ = ["PRUNED_KINDS", "render_reward_model"]


def render_reward_model(
    reward_model: dict[str, Any], gateway_image: str = DEFAULT_GATEWAY_IMAGE
) -> list[dict[str, Any]]:
    """Every child of a RewardModel, in apply order (defaults applied first, as the API server would)."""
    return reward_model_children(apply_defaults(reward_model), gateway_image)
