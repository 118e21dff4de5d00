"""Every condition type and reason the operator writes, each with what it means.

`kubectl describe` readers, alert authors and the Argo CD health check
(manifests/argocd/health/rewardmodel.lua) read these; a unit test keeps the
health check's Degraded rule in line with :data:`DEGRADED_REASONS`.
"""

from __future__ import annotations

# ---- condition types --------------------------------------------------------

READY = "Ready"  # the reward model answers requests at status.url

# ---- reasons for Ready --------------------------------------------------------

INFERENCE_SERVICE_READY = "InferenceServiceReady"  # KServe reports the InferenceService Ready
INFERENCE_SERVICE_NOT_READY = "InferenceServiceNotReady"  # KServe reports it not Ready, without a reason
AWAITING_KSERVE = "AwaitingKServe"  # applied; KServe has not reported on it yet
GATEWAY_NOT_READY = "GatewayNotReady"  # KServe reports Ready, the reward gateway (transformer) is not yet
INVALID_SPEC = "InvalidSpec"  # the schema accepted the spec but the cluster cannot honour it
APPLY_FAILED = "ApplyFailed"  # the API server refused a rendered child

# KServe's failure reasons (lastFailureInfo.reason) that Ready passes on: the
# spec will not serve until someone changes it or the model.
KSERVE_FAILURE_REASONS = (
    "NoSupportingRuntime",  # the runtime does not support the model format or protocol
    "RuntimeNotRecognized",  # no runtime of that name
    "RuntimeDisabled",  # the runtime is disabled
    "InvalidPredictorSpec",  # KServe refused the predictor (e.g. a template placeholder it cannot parse)
    "ModelLoadFailed",  # the storage initializer or the runtime failed to load the model
    "RuntimeUnhealthy",  # the runtime container does not start or stay up
)

# Reasons that mean "the current spec was judged and failed": Argo CD shows
# Degraded for these (and any reason ending in Failed), Progressing for
# everything else that is not Ready.
DEGRADED_REASONS = (INVALID_SPEC, APPLY_FAILED, *KSERVE_FAILURE_REASONS)
DEGRADED_SUFFIX = "Failed"

# Reasons worth only a Normal event on a transition (so is any Ready=True or
# Ready=Unknown: still converging); any other Ready=False gets a Warning.
NORMAL_REASONS = (INFERENCE_SERVICE_READY, AWAITING_KSERVE, GATEWAY_NOT_READY)
