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
INVALID_SPEC = "InvalidSpec"  # the schema accepted the spec but the cluster cannot honour it
APPLY_FAILED = "ApplyFailed"  # the API server refused a rendered child

# Reasons that mean "the current spec was judged and failed": Argo CD shows
# Degraded for these (InvalidSpec, and any reason ending in Failed), Progressing
# for everything else that is not Ready.
DEGRADED_REASONS = (INVALID_SPEC, APPLY_FAILED)
DEGRADED_SUFFIX = "Failed"

# Reasons worth a Normal event on a transition; every other not-Ready reason
# gets a Warning.
NORMAL_REASONS = (INFERENCE_SERVICE_READY, AWAITING_KSERVE)
