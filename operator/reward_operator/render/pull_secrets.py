"""The Secrets the pods the operator makes pull their images with: the chart's imagePullSecrets, which the
operator is given by name (REWARD_OPERATOR_IMAGE_PULL_SECRETS). A gateway and a batch worker run the
operator's image, a CPU predictor our vLLM build, all from the registry the chart's own pods pull from.

Kubernetes reads a pod's pull secrets from the pod's own namespace: each must exist where the RewardModels,
RLHFPipelines and RewardBatches live (else the namespace's ServiceAccount may name it instead)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def image_pull_secrets(names: Sequence[str]) -> dict[str, Any]:
    """The pod spec's ``imagePullSecrets`` naming ``names``; nothing without any, so a render without them
    leaves the pod to its ServiceAccount's."""
    return {"imagePullSecrets": [{"name": name} for name in names]} if names else {}
