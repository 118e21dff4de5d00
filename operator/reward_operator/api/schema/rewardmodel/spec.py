"""RewardModel's spec, assembled from one module per sub-object, with the rules that span them.

Each sub-object's module carries its own rules; the spec-level ones (whose ``self`` is the spec, because
they read more than one sub-object) are listed here in the CRD's order.
"""

from __future__ import annotations

from ..common import DNS_SUBDOMAIN_PATTERN, array, obj, string
from . import cache, canary, gateway, judge, pod, serving
from .cache import CACHE
from .canary import CANARY
from .gateway import GATEWAY
from .judge import JUDGE
from .model import MODEL
from .pod import (
    CREDENTIALS,
    DEFAULT_CPU_RUNTIME,
    DEFAULT_GENERATE_CPU_RUNTIME,
    DEFAULT_GENERATE_RUNTIME,
    DEFAULT_RUNTIME,
    ENV_VAR,
    RESOURCES,
    TOLERATION,
)
from .serving import SERVING

SPEC = obj(
    "Desired state of a reward-model service.",
    {
        "model": MODEL,
        "judge": JUDGE,
        "runtime": string(
            f"ClusterServingRuntime that runs vLLM in pooling mode (generate mode for model.kind: judge). Unset: "
            f"{DEFAULT_RUNTIME} with GPUs, {DEFAULT_CPU_RUNTIME} with resources.gpus: 0 (for a judge, "
            f"{DEFAULT_GENERATE_RUNTIME} and {DEFAULT_GENERATE_CPU_RUNTIME}; the candidate of spec.canary by its own "
            "GPUs).",
            maxLength=253,
            pattern=DNS_SUBDOMAIN_PATTERN,
        ),
        "resources": RESOURCES,
        "nodeSelector": {
            "type": "object",
            "description": "Node labels the predictor pods must match. In Knative mode, Knative must allow "
            "it (config-features: kubernetes.podspec-nodeselector: enabled); otherwise Ready is False with "
            "Knative's message.",
            "additionalProperties": {"type": "string"},
            "maxProperties": 32,
        },
        "tolerations": array(
            "Tolerations for the predictor pods. In Knative mode, Knative must allow them (config-features: "
            "kubernetes.podspec-tolerations: enabled); otherwise Ready is False with Knative's message.",
            TOLERATION,
            maxItems=32,
        ),
        "env": array(
            "Extra environment for the vLLM container.",
            ENV_VAR,
            maxItems=64,
            **{
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        ),
        "credentials": CREDENTIALS,
        "serving": SERVING,
        "gateway": GATEWAY,
        "canary": CANARY,
        "cache": CACHE,
    },
    required=["model"],
    **{
        "x-kubernetes-validations": [
            *gateway.CHAT_TEMPLATE_RULES,
            *serving.SPEC_RULES,
            pod.HF_TOKEN_KEY_RULE,
            gateway.KNATIVE_TIMEOUT_RULE,
            *cache.SPEC_RULES,
            pod.GPUS_PER_RANK_RULE,
            *canary.SPEC_RULES,
            *judge.SPEC_RULES,
        ]
    },
)
