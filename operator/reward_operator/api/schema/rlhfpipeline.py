"""The RLHFPipeline schema: the one source of its CRD, defaults, validation and typed view.

A pipeline serves the models of PPO-style training as one unit: the actor (the policy,
generating), the reference (log-probabilities for the KL term), the critic (values) and
the RewardModels it names, behind one KServe InferenceGraph. Each role's serving
settings are RewardModel's own types (api/schema/rewardmodel/), so a field means the
same thing on both kinds; only what a role cannot use is left out, and each rule's
message says what to use instead.
"""

from __future__ import annotations

from .common import (
    DNS_SUBDOMAIN_PATTERN,
    Schema,
    array,
    defaulted_obj,
    integer,
    kind_schema,
    obj,
    rule,
    status_schema,
    string,
)
from .rewardmodel.model import model_fields
from .rewardmodel.pod import (
    CREDENTIALS,
    DEFAULT_CPU_RUNTIME,
    DEFAULT_GENERATE_CPU_RUNTIME,
    DEFAULT_GENERATE_RUNTIME,
    DEFAULT_RUNTIME,
    ENV_VAR,
    RESOURCES,
    TOLERATION,
)
from .rewardmodel.serving import SERVING

# Each role's runtime unless it names one: on GPUs, or with resources.gpus: 0 on vLLM's CPU build.
DEFAULT_POOLING_RUNTIME = DEFAULT_RUNTIME
DEFAULT_POOLING_CPU_RUNTIME = DEFAULT_CPU_RUNTIME
FLOWS = ("score", "generateAndScore", "bestOfN")
NORMALISATIONS = ("none", "running")
# The router's own defaults are 60 s for reading and writing (KServe v0.20 constants): a batch of
# generations or a large group of reward calls takes longer, and the router would cut it.
DEFAULT_GRAPH_TIMEOUT_SECONDS = 600
MAX_BEST_OF_N = 64
# <name>-reference-transformer is the longest Service KServe derives (22 characters more), and in
# Standard mode its host label <service>-<namespace> must stay within 63 characters.
MAX_NAME_LENGTH = 40

# What a generating model takes from spec.model's fields: the pooling settings (kind, step tags,
# batched tokens for prefill-only models) and a chat template file do not apply.
_GENERATE_MODEL_FIELDS = (
    "uri",
    "servedName",
    "maxModelLen",
    "dtype",
    "quantization",
    "tensorParallelSize",
    "extraArgs",
)


def _model(prefix: str, description: str, required: bool) -> Schema:
    fields = model_fields(prefix)
    picked = {name: dict(fields[name]) for name in _GENERATE_MODEL_FIELDS}
    if not required:
        for field in picked.values():
            field.pop("default", None)  # unset: the actor's
    return obj(description, picked, **({"required": ["uri"]} if required else {}))


def _serving(prefix: str) -> Schema:
    """RewardModel's serving fields a role can use: the graph runs in Standard mode, so the roles do too,
    scaled by KServe's HPA between minReplicas and maxReplicas."""
    fields = {name: SERVING["properties"][name] for name in ("minReplicas", "maxReplicas", "timeoutSeconds")}
    fields["minReplicas"] = {**fields["minReplicas"], "minimum": 1}
    fields["minReplicas"]["description"] = (
        "Fewest replicas (at least 1: a role at zero would leave the graph's step failing until it wakes, "
        "and no gateway holds the pipeline's requests meanwhile)."
    )
    return defaulted_obj(
        "How KServe deploys and scales this role (Standard mode, always).",
        fields,
        **{
            "x-kubernetes-validations": [
                rule(
                    "self.minReplicas <= self.maxReplicas", f"{prefix}.serving.maxReplicas must be at least minReplicas"
                )
            ]
        },
    )


def _gateway() -> Schema:
    return obj(
        "The role's gateway (the InferenceService's transformer), which turns the graph's requests into vLLM "
        "calls and vLLM's answers into the graph's parts.",
        {
            "maxConcurrency": integer("vLLM calls in flight per gateway replica.", minimum=1, maximum=4096),
            "requestTimeoutSeconds": integer("Timeout of one vLLM call.", minimum=1, maximum=3600),
            "resources": obj(
                "Compute for each gateway replica.",
                {
                    "cpu": RESOURCES["properties"]["cpu"],
                    "memory": RESOURCES["properties"]["memory"],
                },
            ),
        },
    )


def _role(
    prefix: str, description: str, runtimes: tuple[str, str], model_required: bool, model_description: str
) -> Schema:
    fields: dict[str, Schema] = {
        "model": _model(f"{prefix}.model", model_description, model_required),
        "runtime": string(
            f"ClusterServingRuntime that runs vLLM for this role (default {runtimes[0]}; "
            f"{runtimes[1]}, vLLM's CPU build, with resources.gpus: 0).",
            maxLength=253,
            pattern=DNS_SUBDOMAIN_PATTERN,
        ),
        "resources": obj(
            "Compute for each replica (RewardModel's resources); an unset field takes the default "
            "(one GPU, no CPU or memory request)."
            + (" For the reference, an unset field is the actor's." if not model_required else ""),
            {
                name: {k: v for k, v in field.items() if k != "default"}
                for name, field in RESOURCES["properties"].items()
            },
        ),
        "serving": _serving(prefix),
        "nodeSelector": {
            "type": "object",
            "description": "Node labels this role's predictor pods must match.",
            "additionalProperties": {"type": "string"},
            "maxProperties": 32,
        },
        "tolerations": array("Tolerations for this role's predictor pods.", TOLERATION, maxItems=32),
        "env": array(
            "Extra environment for this role's vLLM container.",
            ENV_VAR,
            maxItems=64,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
        "credentials": CREDENTIALS,
        "gateway": _gateway(),
    }
    rules = []
    if model_required:  # the reference's are checked with the actor's values filled in (SPEC)
        rules.append(
            rule(
                "self.serving.minReplicas == self.serving.maxReplicas "
                "|| (has(self.resources) && has(self.resources.cpu))",
                f"{prefix}.resources.cpu is needed when {prefix}.serving.maxReplicas is above minReplicas: "
                "KServe's HPA scales on CPU use, which it cannot measure without a CPU request (or set "
                "minReplicas equal to maxReplicas)",
            )
        )
        gpus = "(has(self.resources) && has(self.resources.gpus) ? self.resources.gpus : 1)"
        rules.append(
            rule(
                f"{gpus} == 0 ? self.model.tensorParallelSize == 1 : {gpus} == self.model.tensorParallelSize",
                f"{prefix}.resources.gpus (default 1) must equal {prefix}.model.tensorParallelSize (one GPU per "
                "tensor-parallel rank), or be 0 with tensorParallelSize 1 for CPU serving",
            )
        )
    return obj(
        description,
        fields,
        **({"required": ["model"]} if model_required else {}),
        **{"x-kubernetes-validations": rules},
    )


ACTOR = _role(
    "actor",
    "The policy being trained: it generates (vLLM's completions API on the generate runtime).",
    (DEFAULT_GENERATE_RUNTIME, DEFAULT_GENERATE_CPU_RUNTIME),
    True,
    "The actor's model (RewardModel's model fields that apply to a generating model).",
)
REFERENCE = _role(
    "reference",
    "The frozen reference policy: log-probabilities of the response tokens for the KL term (vLLM's "
    "completions API, prompt log-probabilities). Its unset model fields, runtime, resources, nodeSelector, "
    "tolerations, env and credentials are the actor's (serving and gateway are its own): with no reference at all, the "
    "actor's base model is served a second time, frozen.",
    (DEFAULT_GENERATE_RUNTIME, DEFAULT_GENERATE_CPU_RUNTIME),
    False,
    "The reference's model; unset fields (uri included) are the actor's.",
)
CRITIC = _role(
    "critic",
    "The value model: one value per response token (vLLM's /pooling on the pooling runtime, token "
    "classification over every token, raw). Omit it for critic-free training (GRPO, RLOO).",
    (DEFAULT_POOLING_RUNTIME, DEFAULT_POOLING_CPU_RUNTIME),
    True,
    "The critic's checkpoint: a value head over every token that vLLM pools natively (a *ForRewardModel "
    "architecture such as Qwen2ForRewardModel, one label). vLLM has no Llama token classifier of its own: "
    "a LlamaForTokenClassification checkpoint fails to load.",
)

REWARD = obj(
    "A RewardModel of this namespace that scores every response, and its share of the combined reward.",
    {
        "name": string(
            "The RewardModel's name (in the pipeline's namespace; its gateway must be enabled).",
            maxLength=45,
            pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        ),
        "weight": {
            "type": "number",
            "format": "double",
            "minimum": -1000,
            "maximum": 1000,
            "default": 1,
            "description": "Its weight in the combined reward (sum of weight x score, after normalisation).",
        },
        "normalise": string(
            "none: its raw score. running: its score standardised by a running mean and standard deviation "
            "the pipeline's gateway keeps (per gateway replica), so models on different scales combine.",
            enum=list(NORMALISATIONS),
            default="none",
        ),
    },
    required=["name"],
)

FLOWS_SCHEMA = obj(
    "Which flows the graph serves; a request picks one by its fields (see the README). Each is present to serve it.",
    {
        "score": obj(
            "Given prompts and responses: every reward model, the critic's values and the reference's "
            "log-probabilities in parallel, answered as one object with the weighted combined reward and each "
            "part (PPO's experience making).",
            {},
        ),
        "generateAndScore": obj("The actor generates a response to each prompt, then score.", {}),
        "bestOfN": obj(
            "The actor generates n candidates per prompt, the reward models score them as one group, and the "
            "best comes back with every candidate's scores (rejection sampling as a service).",
            # not "n": YAML 1.1 (kubectl's and Helm's parser) reads the key n as false
            {"candidates": integer("Candidates per prompt.", minimum=2, maximum=MAX_BEST_OF_N, default=4)},
        ),
    },
    default={"score": {}, "generateAndScore": {}},
    **{
        "x-kubernetes-validations": [
            rule(
                "has(self.score) || has(self.generateAndScore) || has(self.bestOfN)",
                "flows needs at least one of score, generateAndScore or bestOfN",
            )
        ]
    },
)

GRAPH = defaulted_obj(
    "The InferenceGraph's router (KServe's), in Standard mode.",
    {
        "timeoutSeconds": integer(
            "How long the router reads a request and waits on each step (routerTimeouts.serverRead and "
            "serviceClient; KServe's 60 s would cut a batch of generations). Its answer is written within the "
            "longest flow's steps one after another (serverWrite: 3 x this + 30 s with generateAndScore or "
            "bestOfN, 2 x with score alone), so a trainer's own timeout should be longer than that.",
            minimum=1,
            maximum=86400,
            default=DEFAULT_GRAPH_TIMEOUT_SECONDS,
        ),
        "minReplicas": integer("Fewest router replicas.", minimum=1, maximum=1000, default=1),
        "maxReplicas": integer("Most router replicas.", minimum=1, maximum=1000, default=1),
    },
    **{
        "x-kubernetes-validations": [
            rule("self.minReplicas <= self.maxReplicas", "graph.maxReplicas must be at least graph.minReplicas")
        ]
    },
)

# The reference's settings as served: its own where set, else the actor's (render/rlhfpipeline.py merges
# them the same way).
_ACTOR_GPUS = "(has(self.actor.resources) && has(self.actor.resources.gpus) ? self.actor.resources.gpus : 1)"
_REFERENCE_GPUS = (
    "(has(self.reference) && has(self.reference.resources) && has(self.reference.resources.gpus) "
    f"? self.reference.resources.gpus : {_ACTOR_GPUS})"
)
_REFERENCE_TP = (
    "(has(self.reference) && has(self.reference.model) && has(self.reference.model.tensorParallelSize) "
    "? self.reference.model.tensorParallelSize : self.actor.model.tensorParallelSize)"
)

SPEC = obj(
    "Desired state of an RLHF serving pipeline.",
    {
        "actor": ACTOR,
        "reference": REFERENCE,
        "critic": CRITIC,
        "rewards": array(
            "The RewardModels that score responses, each with a weight.",
            REWARD,
            minItems=1,
            maxItems=16,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
        "flows": FLOWS_SCHEMA,
        "graph": GRAPH,
    },
    required=["actor", "rewards"],
    **{
        "x-kubernetes-validations": [
            rule(
                f"{_REFERENCE_GPUS} == 0 ? {_REFERENCE_TP} == 1 : {_REFERENCE_GPUS} == {_REFERENCE_TP}",
                "the reference's GPUs (reference.resources.gpus, else the actor's) must equal its "
                "tensorParallelSize (reference.model.tensorParallelSize, else the actor's), or be 0 with "
                "tensorParallelSize 1",
            ),
            rule(
                "!has(self.reference) || self.reference.serving.minReplicas == self.reference.serving.maxReplicas "
                "|| (has(self.reference.resources) && has(self.reference.resources.cpu)) "
                "|| (has(self.actor.resources) && has(self.actor.resources.cpu))",
                "reference.resources.cpu (or the actor's, which it takes) is needed when "
                "reference.serving.maxReplicas is above minReplicas: KServe's HPA scales on CPU use, which it "
                "cannot measure without a CPU request (or set minReplicas equal to maxReplicas)",
            ),
        ]
    },
)

STATUS = status_schema(
    "Ready, and one condition per role (ActorReady, ReferenceReady, CriticReady, RewardsReady, GraphReady).",
    {
        "url": string("Where clients in the cluster reach the pipeline: the InferenceGraph's in-cluster address."),
        "inferenceGraph": string("Name of the InferenceGraph serving the flows."),
        "inferenceServices": obj(
            "The InferenceServices serving each role.",
            {
                "actor": string("The actor's InferenceService."),
                "reference": string("The reference's InferenceService."),
                "critic": string("The critic's InferenceService (absent without spec.critic)."),
            },
        ),
    },
)

RLHF_PIPELINE = kind_schema(
    "The actor, reference, critic and reward models of RLHF training, served as one InferenceGraph.",
    SPEC,
    STATUS,
    MAX_NAME_LENGTH,
    "KServe derives <name>-reference-transformer and other Service names from it",
)
