"""Standard mode scaled on load: KEDA, fed by the reward gateway's external scaler.

KServe v0.20's HPA keeps at least one replica and scales on CPU or memory only,
which say nothing of a GPU model's work; and nothing of the predictor's own exists
at zero to wake it (its ``vllm:*`` metrics go with its last pod). The gateway (the
transformer, never scaled to zero) counts the requests in flight, holds the ones
that arrive while the predictor is away, and serves KEDA's
``externalscaler.ExternalScaler`` on its own port (runtimes/gateway/README.md,
"Scale to zero"). So, with ``serving.minReplicas: 0`` or ``serving.targetConcurrency``
in Standard mode (``api.keda.scales_through_keda``), the operator renders:

- ``serving.kserve.io/autoscalerClass: external`` on the InferenceService: KServe
  makes no HPA and leaves the Deployments' ``replicas`` alone, so KEDA owns the
  predictor's count. Not ``keda``: KServe would then render its own ScaledObject
  from ``autoScaling.metrics``, whose triggers cannot be the gateway's push scaler;
- a headless Service over the gateway's pods on the scaler port: KEDA's gRPC client
  resolves it to every pod in turn, and the replicas find their peers through it
  (each answers for all of them);
- a ScaledObject on the predictor's Deployment with one ``external-push`` trigger:
  KEDA scales 0 -> 1 the moment the gateway pushes (with minReplicas 0),
  minReplicas..maxReplicas on the gateway's in-flight count, and back to 0 after
  ``cooldownPeriod`` (``serving.scaleDownDelay``) idle. A set scaleDownDelay is also
  the HPA's scale-down stabilization window (its default is the same 5 minutes), so
  one setting holds the replicas through a gap in the load at every count.
"""

from __future__ import annotations

from typing import Any

from ..api.duration import interval_seconds
from ..api.keda import SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND
from ..api.kserve import (
    CLUSTER_DOMAIN,
    COMPONENT_LABEL,
    ISVC_LABEL,
    TRANSFORMER_COMPONENT,
    predictor_name,
)
from ..api.naming import scaled_object_name, scaler_service_name
from ..api.schema.rewardmodel import DEFAULT_SCALE_DOWN_DELAY
from ..api.types import ServingSpec
from .metadata import child_metadata
from .owned import Owned

SERVICE_API_VERSION = "v1"
SERVICE_KIND = "Service"
# The gateway's scaler port: after its HTTP port in the container's ports (KServe's
# Service and default readiness probe take ports[0]).
SCALER_PORT = 9090
SCALER_PORT_NAME = "grpc-scaler"
# KEDA's default. The gateway's IsActive covers as long after a request, so a burst
# between two polls still counts and cooldownPeriod starts after it.
POLLING_INTERVAL_SECONDS = 30
SCALER_SERVICE_COMPONENT = "gateway-scaler"
SCALED_OBJECT_COMPONENT = "predictor-autoscaler"
# Where KEDA's operator runs unless the operator is told otherwise (KEDA's chart and manifests).
DEFAULT_KEDA_NAMESPACE = "keda"
# Both come and go with scales_through_keda (once serving.minReplicas is above 0 again, say). Neither can
# exist without KEDA, whose ScaledObject kind a cluster without it does not serve: listed only where it does.
_KEDA = (SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND)
OWNED = (Owned(SERVICE_API_VERSION, SERVICE_KIND, needs=_KEDA), Owned(*_KEDA, needs=_KEDA))


def scaler_host(owner_name: str, namespace: str) -> str:
    return f"{scaler_service_name(owner_name)}.{namespace}.{CLUSTER_DOMAIN}"


def cooldown_seconds(serving: ServingSpec) -> int:
    return max(1, round(interval_seconds(serving.get("scaleDownDelay", DEFAULT_SCALE_DOWN_DELAY))))


# The most the HPA KEDA makes accepts as its scale-down stabilization window (Kubernetes' validation of
# HPAScalingRules.stabilizationWindowSeconds).
HPA_MAX_STABILIZATION_SECONDS = 3600


def gateway_env(owner_name: str, namespace: str, serving: ServingSpec) -> dict[str, str]:
    """The gateway's REWARD_GATEWAY_SCALER_* settings (without the prefix)."""
    env = {
        "SCALER_PORT": str(SCALER_PORT),
        "SCALER_ACTIVE_SECONDS": str(POLLING_INTERVAL_SECONDS),
        "SCALER_PEERS": scaler_host(owner_name, namespace),
    }
    if "targetConcurrency" in serving:
        env["SCALER_METRIC"] = "requests"
        env["SCALER_TARGET"] = str(serving["targetConcurrency"])
    return env


def gateway_port() -> dict[str, Any]:
    return {"name": SCALER_PORT_NAME, "containerPort": SCALER_PORT, "protocol": "TCP"}


def scaler_service(owner: dict[str, Any], isvc: str) -> dict[str, Any]:
    """A headless Service over the gateway's pods: KEDA reaches each replica through it, and so do its peers."""
    return {
        "apiVersion": SERVICE_API_VERSION,
        "kind": SERVICE_KIND,
        "metadata": child_metadata(owner, scaler_service_name(owner["metadata"]["name"]), SCALER_SERVICE_COMPONENT),
        "spec": {
            "clusterIP": "None",
            "selector": {ISVC_LABEL: isvc, COMPONENT_LABEL: TRANSFORMER_COMPONENT},
            "ports": [{"name": SCALER_PORT_NAME, "port": SCALER_PORT, "targetPort": SCALER_PORT, "protocol": "TCP"}],
        },
    }


def scaled_object(owner: dict[str, Any], isvc: str, serving: ServingSpec) -> dict[str, Any]:
    """KEDA's ScaledObject on the predictor's Deployment, woken and fed by the gateway's push scaler."""
    owner_name = owner["metadata"]["name"]
    namespace = owner["metadata"].get("namespace", "default")
    rendered: dict[str, Any] = {
        "apiVersion": SCALED_OBJECT_API_VERSION,
        "kind": SCALED_OBJECT_KIND,
        "metadata": child_metadata(owner, scaled_object_name(isvc), SCALED_OBJECT_COMPONENT),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": predictor_name(isvc)},
            "minReplicaCount": serving["minReplicas"],
            "maxReplicaCount": serving["maxReplicas"],
            "pollingInterval": POLLING_INTERVAL_SECONDS,
            "cooldownPeriod": cooldown_seconds(serving),
            "triggers": [
                {
                    "type": "external-push",
                    "metadata": {"scalerAddress": f"{scaler_host(owner_name, namespace)}:{SCALER_PORT}"},
                }
            ],
        },
    }
    if "scaleDownDelay" in serving:
        # between replicas the HPA decides, on its own window (300 s unless told): the same delay
        window = min(cooldown_seconds(serving), HPA_MAX_STABILIZATION_SECONDS)
        behavior = {"scaleDown": {"stabilizationWindowSeconds": window}}
        rendered["spec"]["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior}}
    return rendered
