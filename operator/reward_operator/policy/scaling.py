"""Whether the predictor sleeps: the ScaledToZero condition, from the replicas its autoscaler asked for.

Only a RewardModel that may go to zero (serving.minReplicas 0: KEDA in Standard mode,
Knative's autoscaler in Knative mode) has the condition. At zero it is still Ready:
KServe reports a Deployment scaled to zero available (Standard) and a revision at zero
Ready (Knative), and the gateway (Standard) or Knative's activator holds the next
request and wakes the predictor. ScaledToZero=True says the next request pays a cold
start; Ready=False would send Argo CD and alerts after a model that is only asleep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api import conditions
from ..api.types import ServingSpec
from .status import Condition


@dataclass(frozen=True)
class PredictorReplicas:
    """The predictor's replicas over its Deployments (one in Standard mode, one per revision in Knative)."""

    ready: int  # pods ready to serve (status.readyReplicas)
    wanted: int  # what its autoscaler (KEDA's HPA, Knative's, KServe's) set (spec.replicas)


def scaled_to_zero(serving: ServingSpec, replicas: PredictorReplicas | None) -> Condition | None:
    """ScaledToZero for a spec that may go to zero, else None (the condition is removed)."""
    if serving["minReplicas"] != 0:
        return None
    if replicas is None:
        return Condition(
            conditions.SCALED_TO_ZERO, "Unknown", conditions.AWAITING_KSERVE, "KServe has not made the predictor yet"
        )
    if replicas.wanted == 0 and replicas.ready == 0:
        return Condition(
            conditions.SCALED_TO_ZERO,
            "True",
            conditions.IDLE,
            "the predictor is at zero replicas; the next request wakes it and waits for vLLM to load the model",
        )
    if replicas.ready == 0:
        return Condition(
            conditions.SCALED_TO_ZERO,
            "False",
            conditions.SCALING_UP,
            f"waking: 0 of {replicas.wanted} predictor replicas ready",
        )
    return Condition(
        conditions.SCALED_TO_ZERO,
        "False",
        conditions.ACTIVE,
        f"{replicas.ready} of {replicas.wanted} predictor replicas ready",
    )
