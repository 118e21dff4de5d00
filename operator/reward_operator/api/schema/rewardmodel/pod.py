"""What the predictor's pods get beside the model: compute, tolerations, environment and credentials.

The spec-level rules here tie compute to the model (one GPU per tensor-parallel rank) and the Hugging Face
token to the key KServe's storage initializer reads.
"""

from __future__ import annotations

from ... import kserve
from ..common import DNS_SUBDOMAIN_PATTERN, defaulted_obj, integer, key_ref, obj, quantity, rule, string
from .model import NO_GO_TEMPLATE

# The ClusterServingRuntimes (runtimes/) a RewardModel runs on unless spec.runtime names one:
# vLLM's CUDA image with GPUs, its CPU build with resources.gpus: 0 (render/runtime.py picks).
DEFAULT_RUNTIME = "vllm-reward"
DEFAULT_CPU_RUNTIME = "vllm-reward-cpu"
# A generating model's: a judge's (model.kind: judge), and an RLHFPipeline's actor and reference.
DEFAULT_GENERATE_RUNTIME = "vllm-generate"
DEFAULT_GENERATE_CPU_RUNTIME = "vllm-generate-cpu"

RESOURCES = defaulted_obj(
    "Compute for each replica.",
    {
        "gpus": integer(
            "NVIDIA GPUs per replica (nvidia.com/gpu). Must equal model.tensorParallelSize. 0 serves on CPU: "
            f"vLLM's CPU build (runtime {DEFAULT_CPU_RUNTIME}, or {DEFAULT_GENERATE_CPU_RUNTIME} for a judge and a "
            "pipeline's actor and reference, unless a runtime is named), model.dtype float32 unless set, and a KV "
            "cache sized from resources.memory (half of what is left beyond 4Gi for the engine, at least 1Gi); for "
            "development, CI and small (0.6B-class) models.",
            minimum=0,
            maximum=64,
            default=1,
        ),
        "cpu": quantity("CPU request and limit per replica, e.g. 8 or 7500m."),
        "memory": quantity("Memory request and limit per replica, e.g. 64Gi."),
    },
)

TOLERATION = obj(
    "A pod toleration (core/v1 Toleration).",
    {
        "key": string("Taint key the toleration applies to; empty with operator Exists matches all.", maxLength=317),
        "operator": string("Exists or Equal.", enum=["Exists", "Equal"]),
        "value": string("Taint value the toleration matches.", maxLength=63),
        "effect": string(
            "Taint effect to match; empty matches all.", enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]
        ),
        "tolerationSeconds": {
            "type": "integer",
            "format": "int64",
            "description": "How long a NoExecute taint is tolerated.",
        },
    },
)

ENV_VAR = obj(
    "An environment variable for the vLLM container: a literal value or a reference.",
    {
        "name": string(
            "Variable name.",
            maxLength=256,
            pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
            **{
                "x-kubernetes-validations": [
                    rule(
                        "!(self in " + repr(list(kserve.BLOCKED_ENV)) + ")",
                        "env[].name: KServe refuses " + ", ".join(kserve.BLOCKED_ENV) + " in its containers "
                        "(a security policy of its webhook)",
                    )
                ]
            },
        ),
        "value": string("Literal value. Never put secrets here: use valueFrom.", maxLength=32768),
        "valueFrom": obj(
            "Read the value from a Secret or ConfigMap key in the RewardModel's namespace.",
            {
                "secretKeyRef": key_ref("A key of a Secret."),
                "configMapKeyRef": key_ref("A key of a ConfigMap."),
            },
            **{
                "x-kubernetes-validations": [
                    rule(
                        "has(self.secretKeyRef) != has(self.configMapKeyRef)",
                        "env[].valueFrom needs exactly one of secretKeyRef or configMapKeyRef",
                    )
                ]
            },
        ),
    },
    required=["name"],
    **{
        "x-kubernetes-validations": [
            rule("!(has(self.value) && has(self.valueFrom))", "env[] takes value or valueFrom, not both"),
            rule("!has(self.value) || !self.value.contains('{{')", NO_GO_TEMPLATE.format(field="env[].value")),
        ]
    },
)

CREDENTIALS = obj(
    "Credentials, only ever by reference.",
    {
        "serviceAccountName": string(
            "ServiceAccount of the predictor pods. KServe's storage initializer reads s3://, gs:// "
            "and hf:// credentials from the Secrets attached to it.",
            maxLength=253,
            pattern=DNS_SUBDOMAIN_PATTERN,
        ),
        "huggingFaceToken": obj(
            "Secret key holding a Hugging Face token, exposed to vLLM as HF_TOKEN (gated models, "
            "tokenizers and chat templates fetched at start-up).",
            {
                "name": string("Secret name.", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN),
                "key": string("Key within the Secret.", maxLength=253, default="HF_TOKEN"),
            },
            required=["name"],
        ),
    },
)

# Spec-level rules (self is spec).
HF_TOKEN_KEY_RULE = rule(
    "!has(self.credentials) || !has(self.credentials.huggingFaceToken) "
    "|| !self.model.uri.startsWith('hf://') || self.credentials.huggingFaceToken.key == 'HF_TOKEN'",
    "credentials.huggingFaceToken.key must be HF_TOKEN for hf:// models: KServe's storage "
    "initializer, which downloads them, reads only that key",
)
GPUS_PER_RANK_RULE = rule(
    "self.resources.gpus == 0 ? self.model.tensorParallelSize == 1 "
    ": self.resources.gpus == self.model.tensorParallelSize",
    "resources.gpus must equal model.tensorParallelSize (one GPU per tensor-parallel rank), "
    "or be 0 with tensorParallelSize 1 for CPU serving",
)
