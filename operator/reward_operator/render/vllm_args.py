"""vLLM server arguments for each kind of reward model.

KServe appends these after the ServingRuntime's own arguments (which set the
model path and port), so only what depends on the RewardModel is here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .runtime import GENERATE
from .runtime import POOLING as POOLING_RUNNER

# kind -> (--convert, pooler config), for vLLM 0.32 (the runtimes' pin).
# sequence: a *ForSequenceClassification checkpoint served by /classify; the raw
#   logit is what trainers train on, and vLLM applies a sigmoid to one-label
#   heads unless use_activation is false.
# token / process: native pooling architectures (*ForRewardModel,
#   *ForProcessRewardModel) served by /pooling with the token_classify task; no
#   conversion, or the "RewardModel" suffix would make vLLM adapt it to embed.
POOLING = {
    "sequence": ("classify", {"task": "classify", "pooling_type": "LAST", "use_activation": False}),
    "token": ("none", {"task": "token_classify", "pooling_type": "ALL", "use_activation": False}),
    "process": ("none", {"task": "token_classify", "pooling_type": "STEP"}),
}


# A judge generates (its verdict's token, or a structured verdict), on the generate runtime, which already
# runs vLLM with --runner=generate. --generation-config=vllm: the checkpoint's generation_config.json
# (repetition penalty, top_k, ...) would otherwise be every request's default, and a structured verdict
# would hang on settings the spec never names; the gateway's requests say all (temperature 0).
# --structured-outputs-config: compact JSON verdicts. vLLM 0.32 reads disable_any_whitespace from its server
# config alone (a request's own is ignored), and only with a named backend (xgrammar, which "auto" picks for
# the JSON schemas it supports); without it a judge may pad its JSON with whitespace until maxTokens cuts the
# verdict short (the tiny test judge did on 6 of 16 items).
JUDGE_KIND = "judge"
JUDGE_ARGS = (
    "--generation-config=vllm",
    '--structured-outputs-config={"backend": "xgrammar", "disable_any_whitespace": true}',
)


def runner(kind: str) -> str:
    """vLLM's runner for a model kind: generate for a judge, pooling for the score heads (render/runtime.py)."""
    return GENERATE if kind == JUDGE_KIND else POOLING_RUNNER


def pooler_config(model: dict[str, Any]) -> dict[str, Any]:
    config = dict(POOLING[model["kind"]][1])
    if model["kind"] == "process":
        if "stepTagId" in model:
            config["step_tag_id"] = model["stepTagId"]
        if "returnedTokenIds" in model:
            config["returned_token_ids"] = list(model["returnedTokenIds"])
    return config


_OPTIONAL = (
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("quantization", "--quantization"),
    ("maxNumBatchedTokens", "--max-num-batched-tokens"),
)


def _optional(model: dict[str, Any]) -> list[str]:
    return [f"{flag}={model[field]}" for field, flag in _OPTIONAL if field in model]


def generate_args(model: dict[str, Any], served_name: str, engine: Sequence[str] = ()) -> list[str]:
    """The args for a generating model (an RLHFPipeline's actor or reference): the runtime
    (runtimes/vllm-generate.yaml, vllm-generate-cpu.yaml) already runs vLLM with --runner=generate.
    ``engine``: what the CPU needs (render/runtime.py), ahead of extraArgs, which may override it."""
    return [f"--served-model-name={served_name}", *_optional(model), *engine, *model.get("extraArgs", [])]


def vllm_args(
    model: dict[str, Any], served_name: str, chat_template_path: str | None = None, engine: Sequence[str] = ()
) -> list[str]:
    """The args for ``model``; its chat template, if any, is read from ``chat_template_path``;
    ``engine``: what the CPU needs (render/runtime.py), ahead of extraArgs, which may override it."""
    if model["kind"] == JUDGE_KIND:
        args = [f"--served-model-name={served_name}", *JUDGE_ARGS]
    else:
        convert, _ = POOLING[model["kind"]]
        args = [f"--served-model-name={served_name}", "--runner=pooling", f"--convert={convert}"]
        args.append("--pooler-config=" + json.dumps(pooler_config(model), separators=(",", ":"), sort_keys=True))
    args += _optional(model)
    if "chatTemplate" in model:
        if chat_template_path is None:
            raise ValueError("model.chatTemplate is set: its file's path is needed")
        args.append(f"--chat-template={chat_template_path}")
    args += engine
    args += model.get("extraArgs", [])
    return args
