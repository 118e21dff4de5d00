"""The RewardModel schema: the one source of its CRD, defaults, validation and typed view.

Everything a user can get wrong without the operator's help is caught here, at
the API server: structural types, enums, bounds, and CEL rules for the
cross-field checks, each with a message that says what to fix.
"""

from __future__ import annotations

from .common import (
    CONDITION,
    DNS_SUBDOMAIN_PATTERN,
    Schema,
    array,
    defaulted_obj,
    integer,
    key_ref,
    kind_schema,
    label_selector,
    obj,
    quantity,
    rule,
    string,
)

MODEL_KINDS = ("sequence", "token", "process")
CACHE_SCOPES = ("Namespace", "Cluster")
# What KServe's LocalModel download Job (its storage initializer) can fetch into a node's volume:
# pvc:// is already on a volume and oci:// is mounted as a modelcar, so neither is cached.
CACHEABLE_SCHEMES = ("hf", "s3", "gs")
# KServe's job namespace (localModel.jobNamespace in inferenceservice-config): cache downloads run there.
LOCAL_MODEL_JOB_NAMESPACE = "kserve-localmodel-jobs"
DEPLOYMENT_MODES = ("Standard", "Knative")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# KServe's storage initializer reads each of these; https:// (and http:// inside a cluster's own
# network) fetches one file, which it unpacks when it is a .tar.gz, .tar or .zip of the model folder.
STORAGE_SCHEMES = ("hf", "s3", "gs", "pvc", "oci", "https", "http")
# The ClusterServingRuntimes (runtimes/) a RewardModel runs on unless spec.runtime names one:
# vLLM's CUDA image with GPUs, its CPU build with resources.gpus: 0 (render/runtime.py picks).
DEFAULT_RUNTIME = "vllm-reward"
DEFAULT_CPU_RUNTIME = "vllm-reward-cpu"

# KServe v0.20 parses the merged model container (runtime plus ISVC args and
# env) as a Go text/template to fill its placeholders: a literal "{{" there
# fails it, and the InferenceService never becomes Ready.
NO_GO_TEMPLATE = (
    "{field} may not contain '{{{{': KServe reads it as a Go template placeholder and refuses the "
    "InferenceService (a chat template belongs in model.chatTemplate)"
)
# Environment variables KServe's validating webhook refuses (pkg/validation/env_policy.go).
KSERVE_BLOCKED_ENV = ("PYTHONPATH",)
# Knative Serving's default max-revision-timeout-seconds.
KNATIVE_MAX_TIMEOUT_SECONDS = 600
# The gateway's own defaults (runtimes/gateway/README.md), for the Knative timeout rule.
# 150 s of waiting for vLLM, then 503 + Retry-After: under OpenRLHF's 180 s client
# timeout, so its retry sees the reason instead of a timeout of its own.
GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS = 150
GATEWAY_REQUEST_TIMEOUT_SECONDS = 180

# vLLM flags the operator derives from the spec; extraArgs may not set them, or
# the rendered server would silently differ from what the spec says.
OWNED_VLLM_FLAGS = (
    "model",
    "port",
    "host",
    "runner",
    "convert",
    "served-model-name",
    "pooler-config",
    "tensor-parallel-size",
    "max-model-len",
    "dtype",
    "quantization",
    "max-num-batched-tokens",
    "chat-template",
)


def model_fields(prefix: str) -> dict[str, Schema]:
    """spec.model's fields; ``prefix`` names the field in the rules' messages (model, canary.model)."""
    return {
        "uri": string(
            "Where KServe's storage initializer fetches the weights: hf://org/model, "
            "s3://bucket/path, gs://bucket/path, pvc://claim/path, oci://registry/image:tag, or "
            "https://host/model.tar.gz (an archive of the model folder, unpacked by KServe; http:// too).",
            maxLength=2048,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self.matches('^(" + "|".join(STORAGE_SCHEMES) + r")://[^\\s]+$')",
                        f"{prefix}.uri must be a storage URI starting with "
                        + ", ".join(f"{s}://" for s in STORAGE_SCHEMES),
                    )
                ]
            },
        ),
        "kind": string(
            "What the model scores. sequence: one scalar per sequence (classification head, "
            "LAST-token pooling, raw logit). token: a token reward model (ALL pooling; the "
            "reward is the last value). process: a process reward model (STEP pooling; one "
            "score per step tag).",
            enum=list(MODEL_KINDS),
            default="sequence",
        ),
        "servedName": string(
            "Model name vLLM answers to (--served-model-name). Defaults to the RewardModel's name.",
            maxLength=253,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        ),
        "chatTemplate": string(
            "A Jinja chat template replacing the tokenizer's; mounted from a ConfigMap the RewardModel owns. "
            "Omit it (rather than leave it empty) to keep the tokenizer's.",
            minLength=1,
            maxLength=65536,
        ),
        "stepTagId": integer(
            "For kind: process, required: the token id of the step tag that ends each step (vLLM's step_tag_id), "
            "the id gateway.stepTag (default <extra_0>) has in the model's vocabulary, e.g. 151651 for "
            "Qwen2.5-Math-PRM. vLLM scores the steps at the tokens with this id.",
            minimum=0,
        ),
        "returnedTokenIds": array(
            "For kind: process: the score head's labels vLLM returns per step (vLLM's returned_token_ids), "
            "[negative, positive]. These index the head's labels, not the vocabulary. The only value is [0, 1], "
            "which is also what unset means: vLLM's process model (Qwen2ForProcessRewardModel, as "
            "Qwen2.5-Math-PRM) has two labels, 1 the positive, and the gateway reads the softmax probability "
            "of the second as the step's score.",
            {"type": "integer", "format": "int64", "minimum": 0},
            minItems=2,
            maxItems=2,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self == [0, 1]",
                        f"{prefix}.returnedTokenIds may only be [0, 1] (or unset, the same): they index the score "
                        "head's [negative, positive] labels, not the vocabulary; [1, 0] inverts every score, one "
                        "label gives sigmoid(logit) instead of the step's probability, and an index past the two "
                        "labels stops vLLM's engine",
                    )
                ]
            },
        ),
        "maxModelLen": integer("Context length in tokens (--max-model-len).", minimum=16, maximum=4194304),
        "dtype": string("Weight and activation dtype (--dtype).", enum=list(DTYPES)),
        "quantization": string(
            "Quantization method vLLM applies (--quantization), e.g. fp8, awq, gptq.",
            maxLength=64,
            pattern=r"^[a-z0-9_-]+$",
        ),
        "tensorParallelSize": integer(
            "GPUs one replica shards the model across (--tensor-parallel-size).",
            minimum=1,
            maximum=64,
            default=1,
        ),
        "maxNumBatchedTokens": integer(
            "Tokens per scheduler step (--max-num-batched-tokens); raise it for reward models, which only prefill.",
            minimum=256,
        ),
        "extraArgs": array(
            "Further vLLM arguments, appended last. Flags the operator sets from this spec "
            "are refused here; set the matching field instead.",
            string("One argument, e.g. --gpu-memory-utilization=0.9.", maxLength=1024),
            maxItems=64,
            **{
                "x-kubernetes-validations": [
                    rule(
                        "self.all(a, !a.matches('^--(" + "|".join(OWNED_VLLM_FLAGS) + ")(=.*)?$'))",
                        f"{prefix}.extraArgs may not set --"
                        + ", --".join(OWNED_VLLM_FLAGS)
                        + f": the operator sets them from {prefix}'s other fields",
                    ),
                    rule("self.all(a, !a.contains('{{'))", NO_GO_TEMPLATE.format(field=f"{prefix}.extraArgs")),
                ]
            },
        ),
    }


MODEL = obj(
    "The reward model to serve and how vLLM runs it.",
    model_fields("model"),
    required=["uri"],
    **{
        "x-kubernetes-validations": [
            rule(
                "self.kind == 'process' || (!has(self.stepTagId) && !has(self.returnedTokenIds))",
                "model.stepTagId and model.returnedTokenIds apply only to kind: process",
            ),
            rule(
                "self.kind != 'process' || has(self.stepTagId)",
                "model.stepTagId is required for kind: process: the token id of the step tag (gateway.stepTag, "
                "default <extra_0>) in the model's vocabulary; without it vLLM answers no step scores and every "
                "call fails",
            ),
        ]
    },
)

RESOURCES = defaulted_obj(
    "Compute for each replica.",
    {
        "gpus": integer(
            "NVIDIA GPUs per replica (nvidia.com/gpu). Must equal model.tensorParallelSize. 0 serves on CPU: "
            f"vLLM's CPU build (runtime {DEFAULT_CPU_RUNTIME}, or vllm-generate-cpu for a pipeline's actor and "
            "reference, unless a runtime is named), model.dtype float32 unless set, and a KV cache sized from "
            "resources.memory (half of what is left beyond 4Gi for the engine, at least 1Gi); for development, "
            "CI and small (0.6B-class) models.",
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
                        "!(self in " + repr(list(KSERVE_BLOCKED_ENV)) + ")",
                        "env[].name: KServe refuses " + ", ".join(KSERVE_BLOCKED_ENV) + " in its containers "
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

# Go's duration syntax, as CEL's duration() reads it: 90s, 10m, 1h30m.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
# KEDA's ScaledObject cooldownPeriod default (and the HPA's own scale-down stabilization window): idle this
# long before the predictor goes to zero, or down a replica.
DEFAULT_SCALE_DOWN_DELAY = "5m"
# Knative Serving's bounds on its autoscaling annotations (knative.dev/serving v0.48.1, the version KServe
# v0.20.0 builds against: pkg/apis/autoscaling/register.go WindowMin/WindowMax, annotation_validation.go):
# the stable window 6s..1h, scale-down-delay 0..1h, both in whole seconds.
KNATIVE_WINDOW_MIN = "6s"
KNATIVE_WINDOW_MAX = "1h"
KNATIVE_SCALE_DOWN_DELAY_MAX = "1h"
WHOLE_SECONDS = "duration(self.{field}).getMilliseconds() % 1000 == 0"
# serving.* is scaled by KEDA on the gateway's load (render/scaler.py, api/keda.py): Standard mode at zero, or
# with a concurrency target. Spelled once for the rules below.
_KEDA = "(self.mode == 'Standard' && (self.minReplicas == 0 || has(self.targetConcurrency)))"

SERVING = defaulted_obj(
    "How KServe deploys and scales the reward model.",
    {
        "mode": string(
            "KServe deployment mode. Standard: a Deployment scaled by KServe's HPA on CPU, or by KEDA on the "
            "gateway's load (with minReplicas 0 or targetConcurrency), down to zero between training bursts "
            "with minReplicas 0 (the gateway holds the first requests and wakes it). Knative: revisions scaled "
            "by Knative on concurrency, down to zero between training bursts. Immutable once set.",
            enum=list(DEPLOYMENT_MODES),
            default="Standard",
        ),
        "minReplicas": integer(
            "Fewest replicas. 0 scales the predictor to zero when idle: in Knative mode through Knative's "
            "activator; in Standard mode through KEDA (it must be installed), fed by the reward gateway, which "
            "stays up, holds requests while the predictor is away and wakes it.",
            minimum=0,
            maximum=1000,
            default=1,
        ),
        "maxReplicas": integer("Most replicas.", minimum=1, maximum=1000, default=1),
        "targetConcurrency": integer(
            "In-flight requests per replica the autoscaler aims for. Knative mode: Knative's concurrency target. "
            "Standard mode: KEDA scales the predictor minReplicas..maxReplicas on the gateway's count of "
            "requests in flight and held (KEDA must be installed; no CPU request needed). Unset in Standard "
            "mode: KServe's HPA on CPU with minReplicas 1 or more, KEDA on 256 scored items in flight per "
            "replica with minReplicas 0.",
            minimum=1,
            maximum=100000,
        ),
        "scaleDownDelay": string(
            "How long the load must stay lower before the predictor scales down, to zero or by a replica. "
            "Standard mode with KEDA (minReplicas 0 or targetConcurrency): KEDA's cooldownPeriod before zero, "
            "and the HPA's scale-down stabilization window (at most 1h) between replicas; default "
            f"{DEFAULT_SCALE_DOWN_DELAY}. Knative mode: Knative's scale-down-delay (at most "
            f"{KNATIVE_SCALE_DOWN_DELAY_MAX}, whole seconds); default Knative's (none). A Go duration: 90s, 10m, 1h.",
            maxLength=32,
            pattern=DURATION_PATTERN,
        ),
        "initialScale": integer(
            "Replicas a new revision starts with before Knative scales it on load (Knative's initial-scale; "
            "Knative mode only), between minReplicas and maxReplicas. 0 starts the revision at zero, which "
            "Knative allows only where its config-autoscaler sets allow-zero-initial-scale: true (elsewhere "
            "KServe drops the setting and the revision starts at Knative's default, 1).",
            minimum=0,
            maximum=1000,
        ),
        "scalingWindow": string(
            "How far back Knative's autoscaler averages the load it scales on (Knative's stable window; "
            f"Knative mode only): {KNATIVE_WINDOW_MIN} to {KNATIVE_WINDOW_MAX} in whole seconds, Knative's "
            "default 60s. Longer rides out gaps between training steps; shorter follows bursts. A Go duration.",
            maxLength=32,
            pattern=DURATION_PATTERN,
        ),
        "timeoutSeconds": integer(
            "Request timeout at the predictor, in seconds (at most 600 in Knative mode, Knative's "
            "max-revision-timeout-seconds default).",
            minimum=1,
            maximum=3600,
        ),
    },
    **{
        "x-kubernetes-validations": [
            rule(
                "self.minReplicas <= self.maxReplicas",
                "serving.maxReplicas must be at least serving.minReplicas",
            ),
            rule(
                "!has(self.targetConcurrency) || self.mode == 'Knative' || self.minReplicas == 0 "
                "|| self.minReplicas < self.maxReplicas",
                "serving.targetConcurrency in Standard mode scales the predictor between serving.minReplicas and "
                "serving.maxReplicas through KEDA: set serving.maxReplicas above serving.minReplicas (or remove "
                "targetConcurrency for a fixed number of replicas)",
            ),
            rule(
                "!has(self.scaleDownDelay) || self.mode == 'Knative' || " + _KEDA,
                "serving.scaleDownDelay needs an autoscaler that honours it: Knative mode, or in Standard mode "
                "KEDA (serving.minReplicas: 0 or serving.targetConcurrency); KServe's HPA on CPU keeps its own "
                "5m scale-down window",
            ),
            rule(
                "!has(self.scaleDownDelay) || self.mode == 'Knative' "
                "|| duration(self.scaleDownDelay) >= duration('1s')",
                "serving.scaleDownDelay must be at least 1s (KEDA's cooldownPeriod is in whole seconds)",
            ),
            rule(
                "self.mode != 'Knative' || !has(self.scaleDownDelay) "
                f"|| (duration(self.scaleDownDelay) <= duration('{KNATIVE_SCALE_DOWN_DELAY_MAX}') && "
                + WHOLE_SECONDS.format(field="scaleDownDelay")
                + ")",
                f"serving.scaleDownDelay in Knative mode must be at most {KNATIVE_SCALE_DOWN_DELAY_MAX} in whole "
                "seconds (Knative refuses its scale-down-delay otherwise)",
            ),
            rule(
                "!has(self.initialScale) || self.mode == 'Knative'",
                "serving.initialScale is Knative's initial-scale and needs serving.mode: Knative; in Standard "
                "mode the predictor starts at serving.minReplicas (set minReplicas: 0 to start at zero through KEDA)",
            ),
            rule(
                "!has(self.initialScale) || (self.initialScale >= self.minReplicas "
                "&& self.initialScale <= self.maxReplicas)",
                "serving.initialScale must be between serving.minReplicas and serving.maxReplicas: Knative never "
                "runs a revision outside them (for a revision that starts at zero, set minReplicas: 0 too)",
            ),
            rule(
                "!has(self.scalingWindow) || self.mode == 'Knative'",
                "serving.scalingWindow is Knative's stable window and needs serving.mode: Knative; in Standard "
                "mode use serving.scaleDownDelay (KEDA) to hold replicas through gaps in the load",
            ),
            rule(
                "!has(self.scalingWindow) || (duration(self.scalingWindow) >= duration('"
                + KNATIVE_WINDOW_MIN
                + "') && duration(self.scalingWindow) <= duration('"
                + KNATIVE_WINDOW_MAX
                + "') && "
                + WHOLE_SECONDS.format(field="scalingWindow")
                + ")",
                f"serving.scalingWindow must be {KNATIVE_WINDOW_MIN} to {KNATIVE_WINDOW_MAX} in whole seconds "
                "(Knative's bounds on its stable window)",
            ),
            rule(
                "self.mode != 'Knative' || !has(self.timeoutSeconds) || self.timeoutSeconds <= "
                + str(KNATIVE_MAX_TIMEOUT_SECONDS),
                f"serving.timeoutSeconds: Knative refuses revision timeouts above {KNATIVE_MAX_TIMEOUT_SECONDS}s "
                "(max-revision-timeout-seconds)",
            ),
            rule(
                "self.mode == oldSelf.mode",
                "serving.mode is immutable: create a new RewardModel to switch deployment modes",
            ),
        ]
    },
)

GATEWAY = defaulted_obj(
    "The reward gateway, deployed as the InferenceService's transformer: trainers' wire formats "
    "(OpenRLHF /get_reward, verl /classify, /v1/rewards, KServe v1 predict), the model's chat template "
    "applied exactly once, and the right scalar per model kind.",
    {
        "enabled": {"type": "boolean", "description": "Deploy the gateway in front of vLLM.", "default": True},
        "chatTemplateMode": string(
            "Where the chat template is applied. upstream: vLLM applies the model's own template "
            "(one conversation per call). gateway: the gateway renders model.chatTemplate, so items "
            "of one group go to vLLM in one call and share its prefix cache.",
            enum=["upstream", "gateway"],
            default="upstream",
        ),
        "bosToken": string(
            "The BOS text model.chatTemplate writes as bos_token (e.g. <|begin_of_text|>) with "
            "chatTemplateMode: gateway. Unset: learnt from the served tokenizer through vLLM.",
            maxLength=64,
        ),
        "eosToken": string(
            "The EOS text model.chatTemplate writes as eos_token (e.g. </s>) with chatTemplateMode: "
            "gateway; needed when the template uses it.",
            maxLength=64,
        ),
        "stepTag": string("Step separator text for process reward models.", maxLength=64),
        "stepAggregate": string(
            "How a process reward model's step scores become one reward.",
            enum=["min", "last", "mean", "product"],
        ),
        "maxConcurrency": integer("vLLM calls in flight per gateway replica.", minimum=1, maximum=4096),
        "requestTimeoutSeconds": integer("Timeout of one vLLM call.", minimum=1, maximum=3600),
        "scaleFromZeroTimeoutSeconds": integer(
            "How long a request waits for vLLM to come up (scale from zero) before a 503.", minimum=0, maximum=3600
        ),
        "maxHeldRequests": integer(
            "Requests each gateway replica holds at once while vLLM is away (scaled to zero, starting); one "
            "more is answered 503 with Retry-After at once (default 1024).",
            minimum=1,
            maximum=1000000,
        ),
        "maxItems": integer("Items allowed in one request.", minimum=1, maximum=1000000),
        "truncatePromptTokens": integer(
            "Truncate inputs to this many tokens instead of answering 400 for over-long input.", minimum=1
        ),
        "authSecretRef": obj(
            "Secret key holding the bearer tokens trainers must send (one per line). Unset: no authentication.",
            {
                "name": string("Secret name.", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN),
                "key": string("Key within the Secret.", maxLength=253, default="token"),
            },
            required=["name"],
        ),
        "resources": obj(
            "Compute for each gateway replica.",
            {
                "cpu": quantity(
                    "CPU request and limit (default 1). The gateway is one process: past 1 CPU, more replicas"
                    " raise its throughput, more CPU does not."
                ),
                "memory": quantity("Memory request and limit, e.g. 1Gi."),
            },
        ),
        "allowedClients": array(
            "Who may reach the gateway, for trainers that cannot send a bearer token (OpenRLHF, verl). "
            "Set: the operator applies NetworkPolicies admitting only these peers to the gateway pods (and "
            "only the gateway to vLLM). Each entry is a NetworkPolicy peer: namespaceSelector alone admits "
            "every pod of the matching namespaces, podSelector alone the matching pods of this namespace, "
            "both the matching pods of the matching namespaces. Enforced only by a CNI that implements "
            "NetworkPolicy. In Knative mode Knative's activator and ingress (namespaces knative-serving and "
            "istio-system) are admitted too, and they forward any caller that reaches them. Unset: no policies.",
            obj(
                "A peer allowed to reach the gateway (a NetworkPolicyPeer without ipBlock).",
                {
                    "namespaceSelector": label_selector(
                        "Namespaces whose pods are admitted; {} selects every namespace."
                    ),
                    "podSelector": label_selector(
                        "Pods admitted (in the namespaces namespaceSelector selects, or else in this namespace)."
                    ),
                },
                **{
                    "x-kubernetes-validations": [
                        rule(
                            "has(self.namespaceSelector) || has(self.podSelector)",
                            "gateway.allowedClients[] needs namespaceSelector, podSelector or both: an entry "
                            "without either would name no clients",
                        )
                    ]
                },
            ),
            minItems=1,
            maxItems=32,
        ),
        "monitoringNamespaceSelector": label_selector(
            "Namespaces whose pods may scrape /metrics of the gateway and of vLLM (e.g. Prometheus's) when "
            "allowedClients is set; they reach the metrics ports only. Unset: scrapers must be listed in "
            "allowedClients."
        ),
    },
    **{
        "x-kubernetes-validations": [
            rule(
                "!has(self.allowedClients) || self.enabled",
                "gateway.allowedClients restricts who reaches the gateway, so it needs gateway.enabled: true",
            ),
            rule(
                "!has(self.monitoringNamespaceSelector) || has(self.allowedClients)",
                "gateway.monitoringNamespaceSelector admits scrapers past the policies gateway.allowedClients "
                "makes: set allowedClients too",
            ),
        ]
    },
)


CANARY_MODES = ("shadow", "split")
CANARY_STICKY = ("group", "client")
# The shortest step: the gateways must see enough of a share to judge it.
CANARY_MIN_INTERVAL = "30s"


def _candidate_model() -> Schema:
    fields = {name: dict(field) for name, field in model_fields("canary.model").items() if name != "kind"}
    for field in fields.values():
        field.pop("default", None)  # an unset field is the stable model's, not a default of its own
    fields["servedName"] = string(
        "Model name the candidate's vLLM answers to. Defaults to the stable model's served name, so the "
        "gateway asks both by the same name.",
        maxLength=253,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
    )
    fields["chatTemplate"] = string(
        "The candidate's own Jinja chat template (its own ConfigMap). Unset: the stable model's "
        "model.chatTemplate, if any, else the candidate tokenizer's.",
        minLength=1,
        maxLength=65536,
    )
    return obj(
        "The candidate model: spec.model's fields, each unset one taken from spec.model (kind always is: "
        "the gateway scores both models one way). Changing it starts the rollout over.",
        fields,
        required=["uri"],
    )


CANARY = obj(
    "A candidate reward model rolled out beside the stable one (spec.model). The reward gateway routes and "
    "compares; KServe runs the candidate as the InferenceService's canary predictor (<name>-canary-predictor) "
    "in Standard mode, as a second InferenceService <name>-canary (no transformer) in Knative mode. "
    "The operator never edits the spec: promote the candidate in Git by moving canary.model into spec.model and "
    "removing spec.canary.",
    {
        "model": _candidate_model(),
        "resources": obj(
            "Compute for each candidate replica; an unset field is spec.resources'.",
            {
                "gpus": integer("NVIDIA GPUs per candidate replica.", minimum=0, maximum=64),
                "cpu": quantity("CPU request and limit per candidate replica."),
                "memory": quantity("Memory request and limit per candidate replica."),
            },
        ),
        "replicas": integer(
            "Candidate replicas. Standard mode: fixed (KServe does not autoscale a canary), taken by KServe v0.20 "
            "out of the stable predictor's minimum replicas (never below 1); at most serving.minReplicas. "
            "Knative mode: the candidate's minimum (it scales up to serving.maxReplicas).",
            minimum=1,
            maximum=1000,
            default=1,
        ),
        "mode": string(
            "shadow: both models score every request and the trainer gets the stable model's scores (the "
            "candidate's are only compared). split: a share of the requests, sticky per group (or client), is "
            "answered by the candidate, whole; the stable model scores them too, for the comparison.",
            enum=list(CANARY_MODES),
            default="shadow",
        ),
        "percent": integer(
            "split: a fixed share of requests (0..100) for the candidate, held while the gates hold.",
            minimum=0,
            maximum=100,
        ),
        "steps": array(
            "split: the candidate's shares, increasing, e.g. [10, 25, 50, 100]; the operator moves to the next "
            "one after canary.interval while the gates hold, and back to 0 when one fails.",
            {"type": "integer", "format": "int32", "minimum": 1, "maximum": 100},
            minItems=1,
            maxItems=20,
            **{
                "x-kubernetes-list-type": "set",
                "x-kubernetes-validations": [
                    rule("self.isSorted()", "canary.steps must increase, e.g. [10, 25, 50, 100]")
                ],
            },
        ),
        "interval": string(
            "How long each step runs (and the gateways' comparison window's half-life), as a duration: 90s, 10m, "
            f"1h. At least {CANARY_MIN_INTERVAL}.",
            maxLength=32,
            pattern=DURATION_PATTERN,
            default="10m",
            **{
                "x-kubernetes-validations": [
                    rule(
                        f"duration(self) >= duration('{CANARY_MIN_INTERVAL}')",
                        f"canary.interval must be at least {CANARY_MIN_INTERVAL}: a step needs time to be judged",
                    )
                ]
            },
        ),
        "sticky": string(
            "What keeps requests on one model in a split: group (every item of a GRPO group, and of one request) "
            "or client (every request of one training job, named by canary.clientHeader).",
            enum=list(CANARY_STICKY),
            default="group",
        ),
        "clientHeader": string(
            "sticky: client: the request header naming the client (default X-Reward-Client).",
            maxLength=128,
            pattern=r"^[A-Za-z0-9-]+$",
        ),
        "minAgreement": {
            "type": "number",
            "format": "double",
            "minimum": 0,
            "maximum": 1,
            "default": 0.8,
            "description": "Gate: the least share of the within-group pairs the stable model orders that the "
            "candidate orders the same way (a candidate tie counts half; 0.5 is chance).",
        },
        "maxErrorRatio": {
            "type": "number",
            "format": "double",
            "minimum": 0,
            "maximum": 1,
            "default": 0.05,
            "description": "Gate: the most share of the candidate's calls that may fail (errors, timeouts, refusals).",
        },
        "attempt": integer(
            "Raise it to start a rolled-back rollout over with the same candidate and steps (any change to the "
            "candidate, mode, steps, percent or stickiness starts it over too).",
            minimum=1,
            maximum=1000000,
            default=1,
        ),
        "minPairs": integer(
            "Pairs the stable model orders that the gateways must have compared before agreement is judged.",
            minimum=1,
            maximum=100000000,
            default=200,
        ),
        "minRequests": integer(
            "Candidate calls the gateways must have made before the error ratio is judged.",
            minimum=1,
            maximum=100000000,
            default=50,
        ),
    },
    required=["model"],
    **{
        "x-kubernetes-validations": [
            rule(
                "self.mode == 'split' || (!has(self.percent) && !has(self.steps))",
                "canary.percent and canary.steps need canary.mode: split (shadow never answers with the candidate)",
            ),
            rule(
                "self.mode != 'split' || has(self.percent) != has(self.steps)",
                "canary.mode: split needs canary.percent (a fixed share) or canary.steps (a progressive rollout), "
                "not both",
            ),
            rule(
                "!has(self.clientHeader) || self.sticky == 'client'",
                "canary.clientHeader applies to canary.sticky: client",
            ),
        ]
    },
)

CACHE = obj(
    "A node-local copy of spec.model.uri (KServe's LocalModel cache), so a cold start reads the weights "
    "from the node instead of downloading them. One cache per model URI, shared by every RewardModel "
    "that names it (per namespace, or cluster-wide with scope: Cluster); it goes with its last user. "
    "The InferenceService is created once every node of the groups holds a copy (condition ModelCached).",
    {
        "scope": string(
            "Namespace: a LocalModelNamespaceCache shared by the RewardModels of this namespace. Cluster: a "
            "LocalModelCache shared across namespaces (its download credentials come from a ServiceAccount "
            f"in KServe's job namespace, {LOCAL_MODEL_JOB_NAMESPACE}).",
            enum=list(CACHE_SCOPES),
            default="Namespace",
        ),
        "modelSize": quantity("Space the model takes on each node's volume, e.g. 16Gi (KServe's modelSize)."),
        "nodeGroups": array(
            "LocalModelNodeGroups (cluster-scoped, made by the cluster admin) whose nodes hold a copy; the "
            "predictor runs on the first group's nodes, so spec.nodeSelector must agree with its volume's "
            "node affinity.",
            string("A LocalModelNodeGroup's name.", maxLength=63, pattern=DNS_SUBDOMAIN_PATTERN),
            minItems=1,
            maxItems=8,
            **{"x-kubernetes-list-type": "set"},
        ),
        "serviceAccountName": string(
            f"A ServiceAccount in KServe's job namespace ({LOCAL_MODEL_JOB_NAMESPACE}) whose Secrets hold the "
            "download credentials (e.g. HF_TOKEN for a gated model): the download Jobs run there, where "
            "spec.credentials' Secrets cannot be read.",
            maxLength=253,
            pattern=DNS_SUBDOMAIN_PATTERN,
        ),
    },
    required=["modelSize", "nodeGroups"],
)

SPEC = obj(
    "Desired state of a reward-model service.",
    {
        "model": MODEL,
        "runtime": string(
            f"ClusterServingRuntime that runs vLLM in pooling mode. Unset: {DEFAULT_RUNTIME} with GPUs, "
            f"{DEFAULT_CPU_RUNTIME} with resources.gpus: 0 (the candidate of spec.canary by its own GPUs).",
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
            rule(
                "self.gateway.chatTemplateMode != 'gateway' || has(self.model.chatTemplate)",
                "gateway.chatTemplateMode: gateway renders model.chatTemplate, so set model.chatTemplate "
                "(or use chatTemplateMode: upstream)",
            ),
            rule(
                "self.gateway.chatTemplateMode != 'gateway' || !has(self.model.chatTemplate) "
                "|| !self.model.chatTemplate.contains('eos_token') || has(self.gateway.eosToken)",
                "model.chatTemplate writes eos_token, which the gateway cannot learn from vLLM: set "
                "gateway.eosToken to the tokenizer's EOS text (e.g. </s>), or use chatTemplateMode: upstream",
            ),
            rule(
                "self.serving.mode != 'Standard' || self.serving.minReplicas == 0 "
                "|| has(self.serving.targetConcurrency) "
                "|| self.serving.minReplicas == self.serving.maxReplicas || has(self.resources.cpu)",
                "resources.cpu is needed when serving.maxReplicas is above serving.minReplicas in Standard "
                "mode: KServe's HPA scales on CPU use, which it cannot measure without a CPU request "
                "(or set serving.targetConcurrency, or serving.minReplicas: 0, to scale on the gateway's load "
                "through KEDA)",
            ),
            rule(
                "self.serving.mode != 'Standard' || self.serving.minReplicas > 0 || self.gateway.enabled",
                "serving.minReplicas: 0 in Standard mode needs gateway.enabled: true: the gateway holds the "
                "requests that arrive while the predictor is at zero and wakes it through KEDA (or use "
                "serving.mode: Knative, whose activator does both)",
            ),
            rule(
                "self.serving.mode != 'Standard' || !has(self.serving.targetConcurrency) || self.gateway.enabled",
                "serving.targetConcurrency in Standard mode needs gateway.enabled: true: KEDA scales the predictor "
                "on the gateway's count of requests in flight (without the gateway, leave targetConcurrency unset "
                "and set resources.cpu for KServe's HPA, or use serving.mode: Knative)",
            ),
            rule(
                "!has(self.credentials) || !has(self.credentials.huggingFaceToken) "
                "|| !self.model.uri.startsWith('hf://') || self.credentials.huggingFaceToken.key == 'HF_TOKEN'",
                "credentials.huggingFaceToken.key must be HF_TOKEN for hf:// models: KServe's storage "
                "initializer, which downloads them, reads only that key",
            ),
            rule(
                "self.serving.mode != 'Knative' || !self.gateway.enabled || "
                f"(has(self.gateway.scaleFromZeroTimeoutSeconds) ? self.gateway.scaleFromZeroTimeoutSeconds "
                f": {GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS}) + (has(self.gateway.requestTimeoutSeconds) "
                f"? self.gateway.requestTimeoutSeconds : {GATEWAY_REQUEST_TIMEOUT_SECONDS}) "
                f"<= {KNATIVE_MAX_TIMEOUT_SECONDS}",
                "gateway.scaleFromZeroTimeoutSeconds + gateway.requestTimeoutSeconds (defaults "
                f"{GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS} and {GATEWAY_REQUEST_TIMEOUT_SECONDS}) must be at most "
                f"{KNATIVE_MAX_TIMEOUT_SECONDS} in Knative mode: the gateway's request timeout is at most "
                "Knative's revision timeout",
            ),
            rule(
                "!has(self.cache) || self.model.uri.matches('^(" + "|".join(CACHEABLE_SCHEMES) + ")://')",
                "cache needs a model.uri KServe can download into a node's volume ("
                + ", ".join(f"{s}://" for s in CACHEABLE_SCHEMES)
                + "): a pvc:// model is already on a volume and an oci:// model is mounted as a modelcar",
            ),
            rule(
                "!has(self.cache) || !has(self.credentials) || !has(self.credentials.huggingFaceToken) "
                "|| has(self.cache.serviceAccountName)",
                "cache with credentials.huggingFaceToken needs cache.serviceAccountName: KServe downloads the "
                f"cache in its job namespace ({LOCAL_MODEL_JOB_NAMESPACE}), which cannot read this namespace's "
                "Secret; name a ServiceAccount there whose Secret holds HF_TOKEN",
            ),
            rule(
                "!has(self.cache) || !has(self.nodeSelector) || !('serving.kserve.io/nodegroup' in self.nodeSelector) "
                "|| self.nodeSelector['serving.kserve.io/nodegroup'] == self.cache.nodeGroups[0]",
                "nodeSelector['serving.kserve.io/nodegroup'] must name cache.nodeGroups[0]: the predictor reads the "
                "cache of the first node group, on that group's nodes",
            ),
            rule(
                "self.resources.gpus == 0 ? self.model.tensorParallelSize == 1 "
                ": self.resources.gpus == self.model.tensorParallelSize",
                "resources.gpus must equal model.tensorParallelSize (one GPU per tensor-parallel rank), "
                "or be 0 with tensorParallelSize 1 for CPU serving",
            ),
            rule(
                "!has(self.canary) || self.gateway.enabled",
                "spec.canary needs gateway.enabled: true: the reward gateway routes and compares the two models",
            ),
            rule(
                "!has(self.canary) || self.serving.mode != 'Standard' || self.serving.minReplicas > 0",
                "spec.canary in Standard mode needs serving.minReplicas of at least 1 while the rollout lasts: "
                "KServe's canary predictor is not scaled by KEDA (set minReplicas: 1, or use serving.mode: "
                "Knative)",
            ),
            rule(
                "!has(self.canary) || self.serving.mode != 'Standard' || self.serving.minReplicas == 0 "
                "|| self.canary.replicas <= self.serving.minReplicas",
                "canary.replicas may not exceed serving.minReplicas in Standard mode: KServe refuses a canary with "
                "more replicas than the stable predictor's minimum",
            ),
            rule(
                "!has(self.canary) || self.serving.mode != 'Standard' || !has(self.serving.targetConcurrency) "
                "|| self.canary.replicas == 1",
                "canary.replicas must be 1 with serving.targetConcurrency in Standard mode: KEDA scales the stable "
                "predictor alone, and KServe makes the candidate's Deployment with one replica and no autoscaler "
                "(remove targetConcurrency for a larger candidate on KServe's HPA, or use serving.mode: Knative)",
            ),
            rule(
                "!has(self.canary) || self.canary.replicas <= self.serving.maxReplicas",
                "canary.replicas may not exceed serving.maxReplicas: the candidate scales up to serving.maxReplicas",
            ),
            rule(
                "!has(self.canary) || self.model.kind == 'process' "
                "|| (!has(self.canary.model.stepTagId) && !has(self.canary.model.returnedTokenIds))",
                "canary.model.stepTagId and canary.model.returnedTokenIds apply only to model.kind: process",
            ),
            rule(
                "!has(self.canary) || (((has(self.canary.resources) && has(self.canary.resources.gpus)) "
                "? self.canary.resources.gpus : self.resources.gpus) == 0 "
                "? (has(self.canary.model.tensorParallelSize) ? self.canary.model.tensorParallelSize "
                ": self.model.tensorParallelSize) == 1 "
                ": ((has(self.canary.resources) && has(self.canary.resources.gpus)) "
                "? self.canary.resources.gpus : self.resources.gpus) == (has(self.canary.model.tensorParallelSize) "
                "? self.canary.model.tensorParallelSize : self.model.tensorParallelSize))",
                "the candidate's GPUs (canary.resources.gpus, else resources.gpus) must equal its "
                "tensorParallelSize (canary.model.tensorParallelSize, else model.tensorParallelSize), or be 0 "
                "with tensorParallelSize 1",
            ),
            rule(
                "!has(self.canary) || !has(self.canary.model.chatTemplate) "
                "|| self.gateway.chatTemplateMode != 'gateway' "
                "|| !self.canary.model.chatTemplate.contains('eos_token') "
                "|| has(self.gateway.eosToken)",
                "canary.model.chatTemplate writes eos_token, which the gateway cannot learn from vLLM: set "
                "gateway.eosToken, or use chatTemplateMode: upstream",
            ),
        ]
    },
)


def _number(description: str) -> Schema:
    return {"type": "number", "format": "double", "description": description}


CANARY_STATUS = obj(
    "The rollout of spec.canary, as the operator drives it (absent without spec.canary).",
    {
        "candidate": string("The candidate's name in the gateway's metrics and GET /canary (label candidate)."),
        "revision": string(
            "A digest of what makes the rollout (the candidate, its compute, mode and shares): when it "
            "changes, the rollout starts over."
        ),
        "mode": string("shadow or split, as spec.canary.mode."),
        "phase": string(
            "AwaitingCandidate (its predictor is not Ready yet), Shadowing, Progressing (a step is running), "
            "Complete (the last step holds: promote in Git) or RolledBack (a gate failed: share 0 until the "
            "rollout changes or spec.canary.attempt is raised)."
        ),
        "step": integer("Index into spec.canary.steps of the share the gateway runs now (0 for a fixed percent)."),
        "percent": integer("The candidate's share of the requests the gateway runs now (0 in shadow)."),
        "stepStartedAt": string("When the current step (or shadowing) began.", format="date-time"),
        "agreement": _number(
            "Pooled over the gateway replicas running the current step: the share of the pairs the stable model "
            "orders that the candidate orders alike."
        ),
        "kendallTauB": _number("Kendall's tau-b of the two models' scores over the same pairs."),
        "pairs": _number("Decayed count of the pairs the stable model orders, behind agreement."),
        "errorRatio": _number("The candidate's share of failed calls, pooled over the same replicas."),
        "requests": _number("Decayed count of the candidate's calls, behind errorRatio."),
        "scoreShift": _number("Mean of (candidate score - stable score) over the compared items."),
        "gateways": integer("Gateway replicas whose figures are pooled here (those running the current step)."),
        "message": string("Why the rollout is where it is."),
    },
)


STATUS = obj(
    "Observed state, written by the operator.",
    {
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "description": "Generation of the spec the operator last acted on.",
        },
        "conditions": array(
            "Ready summarises the service; its reason and message say what is wrong.",
            CONDITION,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
        "url": string(
            "Where clients in the cluster reach the reward model: the InferenceService's in-cluster address "
            "(the gateway's Service when it is enabled)."
        ),
        "externalURL": string(
            "The InferenceService's external URL, from KServe's ingress settings (reachable only where an "
            "ingress serves that host)."
        ),
        "inferenceService": string("Name of the InferenceService serving this model."),
        "replicas": integer("Ready predictor replicas, in either mode."),
        "canary": CANARY_STATUS,
        "modelCache": obj(
            "The LocalModel cache spec.cache uses (absent without it): once it changes or goes, the "
            "operator releases the previous one.",
            {
                "kind": string("LocalModelNamespaceCache or LocalModelCache."),
                "name": string("The cache's name (one per model URI)."),
                "namespace": string("Its namespace; absent for a cluster-wide LocalModelCache."),
            },
        ),
    },
)

REWARD_MODEL = kind_schema(
    "A reward model served on KServe with vLLM for RLHF trainers.",
    SPEC,
    STATUS,
    45,
    "KServe derives Service and Deployment names from it",
)
