"""spec.canary: a candidate reward model rolled out beside the stable one (shadow, then split).

The rules on the canary alone sit in CANARY; SPEC_RULES are the ones that read the rest of the spec
(the gateway it needs, the stable predictor's replicas, the model's kind and GPUs).
"""

from __future__ import annotations

from ..common import Schema, array, integer, obj, quantity, rule, string
from .judge import judge_schema
from .model import model_fields
from .serving import DURATION_PATTERN

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
        "judge": judge_schema(
            "canary.judge",
            "model.kind: judge: the candidate's own prompt and verdict (a new judge template is a new revision, "
            "rolled out and judged on agreement like new weights). Unset: spec.judge.",
        ),
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

# Spec-level rules (self is spec): what the candidate needs of the stable model and its serving.
SPEC_RULES = [
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
        "!has(self.canary) || !has(self.canary.model.rewardTokenId)",
        "canary.model.rewardTokenId may not be set: one gateway scores both models, and the candidate is "
        "scored at the stable model's reward token (model.rewardTokenId), as it is served as the stable "
        "model's kind",
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
