"""Pure functions from a custom resource to the children it should have. No I/O here.

One entry per kind returns every child, in apply order, with the sets of children it
owns (render/owned.py); the controller and the offline ``reward-operator render`` both
call it, so what is tested is what ships. The controller's entries (``rendered_*``,
:func:`reward_model_candidate`) take the object with its schema defaults applied, as the
runner prepares it once per reconcile; ``render_*`` and :func:`canary_identity` take it as
written and apply them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.canary import CanaryIdentity
from ..api.defaults import apply_defaults
from ..api.names import DEFAULT_GATEWAY_IMAGE
from ..api.schema import RLHF_PIPELINE
from . import rewardmodel
from .canary import Candidate
from .owned import Owned, Rendered
from .rlhfpipeline import pipeline_children
from .scaler import DEFAULT_KEDA_NAMESPACE

__all__ = [
    "CanaryIdentity",
    "Candidate",
    "Owned",
    "Rendered",
    "canary_identity",
    "render_reward_model",
    "render_rlhf_pipeline",
    "rendered_reward_model",
    "rendered_rlhf_pipeline",
    "reward_model_candidate",
]


def reward_model_candidate(reward_model: dict[str, Any]) -> Candidate | None:
    """spec.canary's candidate of a defaulted RewardModel, rendered, or None without spec.canary: computed
    once per reconcile, for the decision (its identity) and for :func:`rendered_reward_model`."""
    return rewardmodel.candidate(reward_model)


def canary_identity(reward_model: dict[str, Any]) -> CanaryIdentity | None:
    """(candidate: its name in the gateways' figures, revision: the rollout's), or None without spec.canary."""
    found = reward_model_candidate(apply_defaults(reward_model))
    return None if found is None else found.identity


def rendered_reward_model(
    reward_model: dict[str, Any],
    candidate: Candidate | None,
    gateway_image: str = DEFAULT_GATEWAY_IMAGE,
    canary_percent: int | None = None,
    operator_namespace: str | None = None,
    keda_namespace: str = DEFAULT_KEDA_NAMESPACE,
    cache_bound: bool = True,
    pull_secrets: Sequence[str] = (),
) -> Rendered:
    """Every child of a defaulted RewardModel, in apply order, and the sets of them it owns.

    ``candidate``: :func:`reward_model_candidate` of it. ``canary_percent``: the candidate's current share
    (the rollout's ConfigMap); None takes the one in the object's status.canary (what the operator last
    rolled out), else 0. ``cache_bound``: with spec.cache, whether the InferenceService reads from the cache
    yet (offline: as it will once the cache is filled). ``pull_secrets``: the Secrets, by name, its pods pull
    their images with (render/pull_secrets.py)."""
    if canary_percent is None:
        canary_percent = ((reward_model.get("status") or {}).get("canary") or {}).get("percent", 0)
    return rewardmodel.reward_model_children(
        reward_model,
        candidate,
        gateway_image,
        canary_percent,
        operator_namespace,
        keda_namespace,
        cache_bound,
        pull_secrets,
    )


def render_reward_model(
    reward_model: dict[str, Any], gateway_image: str = DEFAULT_GATEWAY_IMAGE, **options: Any
) -> list[dict[str, Any]]:
    """Every child of a RewardModel as written, in apply order (defaults applied first, as the API server
    would): :func:`rendered_reward_model`'s children; ``options``: its keyword arguments after
    ``gateway_image`` (``canary_percent``, ``operator_namespace``, ``keda_namespace``, ``cache_bound``,
    ``pull_secrets``)."""
    reward_model = apply_defaults(reward_model)
    return rendered_reward_model(reward_model, reward_model_candidate(reward_model), gateway_image, **options).children


def rendered_rlhf_pipeline(
    pipeline: dict[str, Any],
    gateway_image: str = DEFAULT_GATEWAY_IMAGE,
    with_graph: bool = True,
    pull_secrets: Sequence[str] = (),
) -> Rendered:
    """Every child of a defaulted RLHFPipeline, in apply order, and the sets of them it owns.

    ``with_graph`` False leaves the InferenceGraph out (while a RewardModel it would call is missing);
    ``pull_secrets``: as :func:`rendered_reward_model`'s."""
    return pipeline_children(pipeline, gateway_image, with_graph, pull_secrets)


def render_rlhf_pipeline(
    pipeline: dict[str, Any],
    gateway_image: str = DEFAULT_GATEWAY_IMAGE,
    with_graph: bool = True,
    pull_secrets: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every child of an RLHFPipeline as written, in apply order (defaults applied first, as the API server
    would): :func:`rendered_rlhf_pipeline`'s children."""
    defaulted = apply_defaults(pipeline, RLHF_PIPELINE)
    return rendered_rlhf_pipeline(defaulted, gateway_image, with_graph, pull_secrets).children
