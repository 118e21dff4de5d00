"""How long the gateway waits for vLLM to answer one call, a wake from zero included.

In Knative mode this one number sets three timeouts. Knative's activator accepts the gateway's call to a
predictor at zero and holds it while the autoscaler starts a pod, so the wait for the pod happens inside
the call: the gateway's own call timeout, the predictor's revision timeout (past it the activator answers
504, "activator request timeout", however far vLLM has come) and the gateway's revision timeout (the
trainer's request around it) all allow the wait for a scale from zero and then one call. Standard mode's
gateway holds the request itself while nothing takes its connections, then makes the call.
"""

from __future__ import annotations

from ..api.schema.rewardmodel import GATEWAY_REQUEST_TIMEOUT_SECONDS, GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS
from ..api.types import GatewaySpec, RewardModelSpec


def worst_case_seconds(gateway: GatewaySpec) -> int:
    """The wait for vLLM to come up (gateway.scaleFromZeroTimeoutSeconds), then one call (requestTimeoutSeconds)."""
    return gateway.get("scaleFromZeroTimeoutSeconds", GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS) + gateway.get(
        "requestTimeoutSeconds", GATEWAY_REQUEST_TIMEOUT_SECONDS
    )


def gateway_wait(spec: RewardModelSpec) -> int | None:
    """``worst_case_seconds`` of the RewardModel's gateway; None without one."""
    return worst_case_seconds(spec["gateway"]) if spec["gateway"]["enabled"] else None
