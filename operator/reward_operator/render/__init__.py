"""Pure functions from a custom resource to the children it should have. No I/O here.

One entry per kind returns every child, in apply order; the controller and the
offline ``reward-operator render`` both call it, so what is tested is what ships.
"""

from __future__ import annotations

from typing import Any

from ..api.defaults import apply_defaults
from ..api.names import DEFAULT_GATEWAY_IMAGE
from ..api.schema import RLHF_PIPELINE
from . import rewardmodel
from .canary import CanaryIdentity
from .rewardmodel import (
    IDENTITY_PRUNE_LABELS,
    PRUNED_KINDS,
    ROLLOUT_PRUNE_LABELS,
    ROLLOUT_PRUNED_KINDS,
    SCALER_PRUNED_KINDS,
    reward_model_children,
)
from .rlhfpipeline import pipeline_children
from .scaler import DEFAULT_KEDA_NAMESPACE

__all__ = [
    "IDENTITY_PRUNE_LABELS",
    "PRUNED_KINDS",
    "ROLLOUT_PRUNED_KINDS",
    "ROLLOUT_PRUNE_LABELS",
    "SCALER_PRUNED_KINDS",
    "CanaryIdentity",
    "canary_identity",
    "render_reward_model",
    "render_rlhf_pipeline",
]


def render_reward_model(
    reward_model: dict[str, Any],
    gateway_image: str = DEFAULT_GATEWAY_IMAGE,
    canary_percent: int | None = None,
    operator_namespace: str | None = None,
    keda_namespace: str = DEFAULT_KEDA_NAMESPACE,
    cache_bound: bool = True,
) -> list[dict[str, Any]]:
    """Every child of a RewardModel, in apply order (defaults applied first, as the API server would).

    ``canary_percent``: the candidate's current share (the rollout's ConfigMap); None takes the one in the object's
    status.canary (what the operator last rolled out), else 0. ``cache_bound``: with spec.cache, whether
    the InferenceService reads from the cache yet (offline: as it will once the cache is filled)."""
    if canary_percent is None:
        canary_percent = ((reward_model.get("status") or {}).get("canary") or {}).get("percent", 0)
    return reward_model_children(
        apply_defaults(reward_model), gateway_image, canary_percent, operator_namespace, keda_namespace, cache_bound
    )


def canary_identity(reward_model: dict[str, Any]) -> CanaryIdentity | None:
    """(candidate: its name in the gateways' figures, revision: the rollout's), or None without spec.canary."""
    return rewardmodel.canary_identity(apply_defaults(reward_model))


def render_rlhf_pipeline(
    pipeline: dict[str, Any], gateway_image: str = DEFAULT_GATEWAY_IMAGE, with_graph: bool = True
) -> list[dict[str, Any]]:
    """Every child of an RLHFPipeline, in apply order (defaults applied first, as the API server would).

    ``with_graph`` False leaves the InferenceGraph out (while a RewardModel it would call is missing)."""
    return pipeline_children(apply_defaults(pipeline, RLHF_PIPELINE), gateway_image, with_graph)
