"""spec.judge (and the candidate's canary.judge): a generative judge's prompt and how its verdict becomes a reward.

Only with model.kind: judge. The operator hands the object to the reward gateway unchanged (its
REWARD_GATEWAY_JUDGE, reward_gateway.config.judge), so these descriptions are the gateway's contract too.
What only the judge's tokenizer can tell (each label one token) the gateway checks against vLLM as it
starts, and refuses naming the label.
"""

from __future__ import annotations

from ..common import Schema, array, integer, obj, rule, string

# vLLM returns the log-probabilities of at most this many chosen tokens (MAX_LOGPROB_TOKEN_IDS, 0.32)
MAX_LABELS = 128
# The whole spec.judge goes to the gateway as one environment variable, which Linux bounds at 128 KiB.
MAX_PROMPT_CHARS = 32768
MAX_SYSTEM_CHARS = 8192
MAX_LABEL_CHARS = 256
DEFAULT_MAX_TOKENS = 64


def _value(description: str) -> Schema:
    return {"type": "number", "format": "double", "description": description}


def _labelled(text_field: str, text_description: str, value_description: str) -> Schema:
    return obj(
        f"{text_description}, and the reward it stands for.",
        {
            text_field: string(text_description, minLength=1, maxLength=MAX_LABEL_CHARS),
            "value": _value(value_description),
        },
        required=[text_field, "value"],
    )


def judge_fields(prefix: str) -> dict[str, Schema]:
    """spec.judge's fields; ``prefix`` names the field in the rules' messages (judge, canary.judge)."""
    return {
        "prompt": string(
            "The judge's user message, a Jinja2 template over the item: prompt (the item's prompt as text; for "
            "messages, the last user message), messages (the conversation before the response, as "
            "{role, content}), response, and reference (the item's reference answer: /v1/rewards' reference, "
            "OpenRLHF's labels, verl's ground_truth, a TRL dataset column; null where none). vLLM applies the "
            "judge model's own chat template to it once, with the generation prompt, so the verdict is the "
            "judge's first answer token. A variable other than these is refused when the gateway starts.",
            minLength=1,
            maxLength=MAX_PROMPT_CHARS,
        ),
        "system": string(
            "A system message sent before the prompt (plain text, not a template).",
            minLength=1,
            maxLength=MAX_SYSTEM_CHARS,
        ),
        "labels": array(
            "Label probabilities: the judge's next-token probabilities of these labels after the prompt, "
            "renormalised over them; the reward is the value they expect, sum(value * p) / sum(p), from one "
            "forward pass. Each label must be one token of the judge's tokenizer, which the gateway checks at "
            "start (docs/judges.md, 'The label rule'). E.g. [{token: 'Yes', value: 1}, {token: 'No', value: 0}], "
            "or '1'..'9'.",
            _labelled("token", "A label, one token of the judge's tokenizer", "The reward this label stands for."),
            minItems=2,
            maxItems=MAX_LABELS,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["token"]},
        ),
        "structured": obj(
            "A structured verdict: the judge generates at temperature 0 under vLLM's structured output, and the "
            "score is read from it. A verdict cut short by maxTokens, or outside minimum..maximum, is that "
            "item's failure, never a number.",
            {
                "jsonSchema": {
                    "type": "object",
                    "description": "A JSON schema the verdict follows; field names the number read as the score.",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "field": string(
                    "With jsonSchema: the field of the verdict read as the score (a dotted path into nested "
                    "objects, e.g. verdict.score).",
                    minLength=1,
                    maxLength=256,
                    pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$",
                ),
                "choices": array(
                    "Instead of jsonSchema: the verdicts the judge may write (any length), each with its reward.",
                    _labelled("text", "A verdict the judge may write", "The reward this verdict stands for."),
                    minItems=2,
                    maxItems=MAX_LABELS,
                    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["text"]},
                ),
                "minimum": _value("The least score a verdict may give; below it, the item fails."),
                "maximum": _value("The greatest score a verdict may give; above it, the item fails."),
                "maxTokens": integer(
                    "The most tokens the verdict may take; one cut short is the item's failure.",
                    minimum=1,
                    maximum=8192,
                    default=DEFAULT_MAX_TOKENS,
                ),
            },
            **{
                "x-kubernetes-validations": [
                    rule(
                        "has(self.jsonSchema) != has(self.choices)",
                        f"{prefix}.structured needs jsonSchema (with field) or choices, not both",
                    ),
                    rule(
                        "has(self.jsonSchema) == has(self.field)",
                        f"{prefix}.structured.field names the number read from a jsonSchema verdict: set both, or "
                        "use choices (whose values are given)",
                    ),
                    rule(
                        "!has(self.minimum) || !has(self.maximum) || self.minimum <= self.maximum",
                        f"{prefix}.structured.minimum may not be above its maximum",
                    ),
                ]
            },
        ),
    }


def judge_schema(prefix: str, description: str) -> Schema:
    return obj(
        description,
        judge_fields(prefix),
        required=["prompt"],
        **{
            "x-kubernetes-validations": [
                rule(
                    "has(self.labels) != has(self.structured)",
                    f"{prefix} needs one verdict: labels (label probabilities) or structured (a structured verdict)",
                ),
            ]
        },
    )


JUDGE = judge_schema(
    "judge",
    "For model.kind: judge, required: the judge's prompt and how its verdict becomes the reward (label "
    "probabilities, or a structured verdict). A new prompt or verdict is a new judge: its digest is in every "
    "answer's identity, and a candidate's own (canary.judge) is rolled out as any new revision.",
)

# Spec-level rules (self is spec): a judge's kind, and what the gateway does for it.
SPEC_RULES = [
    rule(
        "self.model.kind != 'judge' || has(self.judge)",
        "model.kind: judge needs spec.judge: the judge's prompt and verdict",
    ),
    rule("self.model.kind == 'judge' || !has(self.judge)", "spec.judge applies only to model.kind: judge"),
    rule(
        "self.model.kind != 'judge' || self.gateway.enabled",
        "model.kind: judge needs gateway.enabled: true: the reward gateway renders the judge's prompt and reads "
        "its verdict",
    ),
    rule(
        "self.model.kind != 'judge' || self.gateway.chatTemplateMode == 'upstream'",
        "model.kind: judge needs gateway.chatTemplateMode: upstream: vLLM applies the judge model's own chat "
        "template to the judge's prompt",
    ),
    rule(
        "self.model.kind != 'judge' || !has(self.gateway.scheduling)",
        "gateway.scheduling merges pooled scoring calls; a judge's verdicts are one chat completion each: "
        "remove it for model.kind: judge",
    ),
    rule(
        "!has(self.canary) || !has(self.canary.judge) || self.model.kind == 'judge'",
        "canary.judge applies only to model.kind: judge",
    ),
]
