"""Judges (model.kind: judge) the tests share: the sample's spec, and what the RewardModel schema refuses of a
judge with the words a user reads, checked offline (operator/tests/test_schema_judge.py) and by the real API
server (e2e/tests/test_rewardmodel_schema.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml
from jinja2 import Environment

from reward_testing.paths import REPO
from reward_testing.tiny_models import TinyModel, reference_scores

SAMPLE = REPO / "manifests" / "samples" / "rewardmodel-judge.yaml"
SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}


def judge_sample() -> dict[str, Any]:
    return yaml.safe_load(SAMPLE.read_text())


def _judge(**fields: Any) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        judge = {key: value for key, value in obj["spec"]["judge"].items() if key not in ("labels", "structured")}
        obj["spec"]["judge"] = {**judge, **fields}

    return change


def _spec(**fields: Any) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        obj["spec"].update(copy.deepcopy(fields))

    return change


def _without_judge(obj: dict) -> None:
    del obj["spec"]["judge"]


def _score_head_with_judge(obj: dict) -> None:
    obj["spec"]["model"]["kind"] = "sequence"


YES_NO = [{"token": "Yes", "value": 1}, {"token": "No", "value": 0}]
STRUCTURED = {"jsonSchema": SCHEMA, "field": "score"}

# Judges the schema admits (changes to the sample).
ADMITTED: dict[str, Callable[[dict], None]] = {
    "labels": _judge(labels=YES_NO),
    "scale-labels": _judge(labels=[{"token": str(i), "value": i} for i in range(1, 10)]),
    "json-schema": _judge(structured={**STRUCTURED, "minimum": 0, "maximum": 10, "maxTokens": 16}),
    "choices": _judge(structured={"choices": [{"text": "correct", "value": 1}, {"text": "wrong", "value": 0}]}),
    "canary-judge": _spec(
        canary={"model": {"uri": "hf://Qwen/Qwen3-8B"}, "judge": {"prompt": "{{ response }}", "labels": YES_NO}}
    ),
}

# name -> (change to the sample, words the refusal carries)
REFUSED: dict[str, tuple[Callable[[dict], None], str]] = {
    "judge-kind-without-judge": (_without_judge, "model.kind: judge needs spec.judge"),
    "judge-on-a-score-head": (_score_head_with_judge, "spec.judge applies only to model.kind: judge"),
    "no-verdict": (_judge(), "judge needs one verdict: labels (label probabilities) or structured"),
    "two-verdicts": (_judge(labels=YES_NO, structured=STRUCTURED), "judge needs one verdict"),
    "one-label": (_judge(labels=YES_NO[:1]), "spec.judge.labels: Invalid value"),
    "a-label-twice": (_judge(labels=[YES_NO[0], {"token": "Yes", "value": 0}]), "spec.judge.labels[1]: Duplicate"),
    "schema-without-field": (_judge(structured={"jsonSchema": SCHEMA}), "judge.structured.field names the number"),
    "schema-and-choices": (
        _judge(structured={**STRUCTURED, "choices": [{"text": "a", "value": 1}, {"text": "b", "value": 0}]}),
        "judge.structured needs jsonSchema (with field) or choices, not both",
    ),
    "minimum-above-maximum": (
        _judge(structured={**STRUCTURED, "minimum": 5, "maximum": 1}),
        "judge.structured.minimum may not be above its maximum",
    ),
    "gateway-off": (_spec(gateway={"enabled": False}), "model.kind: judge needs gateway.enabled: true"),
    "gateway-template": (
        _spec(gateway={"chatTemplateMode": "gateway"}),
        "model.kind: judge needs gateway.chatTemplateMode: upstream",
    ),
    "scheduling": (_spec(gateway={"scheduling": {"coalesce": True}}), "remove it for model.kind: judge"),
    "canary-judge-without-verdict": (
        _spec(canary={"model": {"uri": "hf://Qwen/Qwen3-8B"}, "judge": {"prompt": "{{ response }}"}}),
        "canary.judge needs one verdict",
    ),
}


def changed(change: Callable[[dict], None]) -> dict[str, Any]:
    document = judge_sample()
    change(document)
    return document


# Judges the real-vLLM tests serve (tiny_model_maker's judge: Yes, No and 1..9 are one token each, 10 is two).
JUDGE_PROMPT = (
    "Question: {{ prompt }}\nAnswer: {{ response }}\n{% if reference %}Reference: {{ reference }}\n{% endif %}"
    "Is the answer correct?"
)
SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["score"],
    "additionalProperties": False,
}
JUDGES: dict[str, dict[str, Any]] = {
    "yes_no": {"prompt": JUDGE_PROMPT, "labels": YES_NO},
    "scale": {
        "system": "You grade answers from 1 to 5.",
        "prompt": JUDGE_PROMPT,
        "labels": [{"token": str(i), "value": i} for i in range(1, 6)],
    },
    "json": {
        "prompt": JUDGE_PROMPT,
        "structured": {"jsonSchema": SCORE_SCHEMA, "field": "score", "minimum": 1, "maximum": 5, "maxTokens": 32},
    },
    "choice": {
        "prompt": JUDGE_PROMPT,
        "structured": {
            "choices": [
                {"text": "correct", "value": 1},
                {"text": "partly", "value": 0.5},
                {"text": "wrong", "value": 0},
            ]
        },
    },
    "cut": {"prompt": JUDGE_PROMPT, "structured": {"jsonSchema": SCORE_SCHEMA, "field": "score", "maxTokens": 2}},
    "split_label": {"prompt": JUDGE_PROMPT, "labels": [{"token": "10", "value": 1}, {"token": "No", "value": 0}]},
}
# Items of each shape a judge reads: prompt and response with a reference, without one, and a conversation.
JUDGED_ITEMS: list[dict[str, Any]] = [
    {"prompt": "what is two plus two", "response": " four", "reference": "four"},
    {"prompt": "name a green tree", "response": " the old stone river"},
    {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "is the cat quick"},
            {"role": "assistant", "content": "maybe it is slow"},
        ]
    },
]


def judge_reward_model(judge: str, name: str = "tiny-judge", **spec: Any) -> dict[str, Any]:
    """A RewardModel of kind judge serving a tiny judge on the CPU with JUDGES[judge]; ``spec``: more of it."""
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": name, "namespace": "test", "uid": "00000000-0000-4000-8000-000000000041"},
        "spec": {
            # float32 as the weights are; the request log shows the tokens vLLM was given
            "model": {
                "uri": "hf://tiny/judge",
                "kind": "judge",
                "dtype": "float32",
                "extraArgs": ["--enable-log-requests"],
            },
            "judge": copy.deepcopy(JUDGES[judge]),
            "resources": {"gpus": 0},
            "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
            **spec,
        },
    }


def judge_messages(judge: dict[str, Any], item: dict[str, Any]) -> list[dict[str, str]]:
    """The judge's messages for an item, by hand (jinja2 over the item's parts, as the gateway's contract says)."""
    if "messages" in item:
        *before, last = item["messages"]
        users = [m for m in before if m["role"] == "user"]
        parts = {"prompt": users[-1]["content"], "messages": before, "response": last["content"]}
    else:
        parts = {"prompt": item["prompt"], "messages": [{"role": "user", "content": item["prompt"]}]}
        parts["response"] = item["response"]
    parts["reference"] = item.get("reference")
    content = Environment(keep_trailing_newline=True).from_string(judge["prompt"]).render(parts)
    user = {"role": "user", "content": content}
    return [{"role": "system", "content": judge["system"]}, user] if "system" in judge else [user]


def judge_references(model: TinyModel, judge: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' label-probability verdict of ``judge`` (labels) on each item: ``reward``, ``label_share``, and
    ``ids`` (the judge's template applied once, with its generation prompt)."""
    labels = {label["token"]: label["value"] for label in judge["labels"]}
    asked = [
        {"messages": judge_messages(judge, item), "add_generation_prompt": True, "labels": labels} for item in items
    ]
    return reference_scores(model, asked)
