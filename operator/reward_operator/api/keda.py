"""KEDA's vocabulary as the operator uses it, and when a RewardModel needs KEDA.

Spelled once here; render, policy and cluster read them from this module.
"""

from __future__ import annotations

from .types import ServingSpec

SCALED_OBJECT_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND = "ScaledObject"


def scales_through_keda(serving: ServingSpec) -> bool:
    """Standard mode with minReplicas 0 (to zero and back) or a concurrency target (minReplicas..maxReplicas on
    load): KEDA scales the predictor, fed by the gateway's external scaler. Otherwise KServe's HPA on CPU."""
    return serving["mode"] == "Standard" and (serving["minReplicas"] == 0 or "targetConcurrency" in serving)
