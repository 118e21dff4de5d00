"""What `make gpu-check` runs, decided without a GPU: the model's shape, the RewardModel rendered for it, the
batch compared with transformers and the tolerances, the benchmark's settings and the summary's form.

Imported by the run (check.py, under the vLLM interpreter) and by the unit tests (the repository's venv), so
it needs nothing a GPU machine's vLLM interpreter or the venv lacks: no torch.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import Qwen3Config

from reward_operator.render import chat_template as rendered_template
from reward_operator.render import render_reward_model
from reward_testing.scoring_cases import CONVERSATION, PROMPT, RESPONSE, SPEC_QUERY, SPEC_TEMPLATE, prompt_response
from reward_testing.tiny_model_maker import BOS, WORDS

# Qwen3-0.6B's shape (its config.json), random weights: a real model's memory, kernels and batch sizes.
# Its vocabulary (151,936) holds the tokenizer's 512 ids; the embedding is a quarter of the parameters.
REAL_SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "initializer_range": 0.02,
}
# The same architecture at the size the CPU build serves in seconds (--cpu-rehearsal); head_dim 128
# is one vLLM's CPU attention supports.
REHEARSAL_SHAPE = {
    **REAL_SHAPE,
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 4096,
}
ARCHITECTURE = "Qwen3ForSequenceClassification"

# dtype -> (absolute, relative) tolerance of |vLLM - transformers| <= abs + rel * |transformers|.
# Two implementations (vLLM's fused CUDA kernels and flash attention against transformers' SDPA)
# round differently, and bfloat16 keeps 8 significant bits (0.4% per rounding) through 28 layers.
# Measured on this model (CPU, transformers alone): bfloat16 against float32 moves the 26 parity
# scores (0.27 to 1.16) by up to 0.016; two bfloat16 implementations may be twice that apart, and
# the bound leaves about that much again. float32: what TF32 matmuls may cost where vLLM enables them.
TOLERANCES = {"bfloat16": (3e-2, 2e-2), "float16": (5e-3, 5e-3), "float32": (1e-3, 1e-3)}

CONCURRENCY = 64
GROUP = 8
PROMPT_WORDS, RESPONSE_WORDS = 384, 128  # about 512 tokens a sample with the tests' tokenizer
VLLM_START_TIMEOUT_S = 420  # torch.compile and CUDA graph capture of a 0.6B model: 1-3 minutes

# How much the scheduler's shapes send (reward_testing.scheduler_bench.Scale; 1 is sized for the CPU
# build). On a GPU: 4,096 requests a side with one sample each, runs of a few seconds at thousands of
# scores/s, and 8 s a fair-share run; expected (not yet timed on a GPU) about two minutes for the four
# shapes, so the whole check stays well inside ten minutes with vLLM's start. The rehearsal: 64
# requests a side and 2 s a fair-share run, which the CPU build answers in about a minute.
SCHEDULER_SCALE = {"cuda": (8.0, 8.0), "cpu": (0.125, 2.0)}  # device -> (requests, fair-share seconds)

# The issue "The gateway as a scheduler": the coalescing gateway's throughput against straight vLLM
# (shape -> at least this multiple), and a light client's p99 beside a flood against its p99 alone
SCHEDULER_THROUGHPUT_GOALS = {"per sample": 1.5, "verl interleaved": 1.5, "groups of 8": 1.0}
FAIR_SHARE_GOAL = 2.0
SCHEDULER_GOALS = (
    "The scheduler's figures are for the issue 'The gateway as a scheduler', whose goals on a GPU are: the "
    "coalescing gateway at >= 1.5x straight vLLM's throughput with one sample per request and with verl's "
    "interleaved completions, >= 1.0x with groups of 8, and a light client's p99 beside a flood within 2x "
    "of its p99 alone with fair share on. Figures, never asserted."
)


# Step 7, on a GPU only: vLLM's sleep mode at level 1 on the served reward model (the weights offloaded to
# host memory, the KV cache dropped), the figure a sleep tier between training bursts would stand on.
# The same rendered command line plus the flag; /sleep and /wake_up are endpoints of vLLM's dev mode.
SLEEP_ARGS = ["--enable-sleep-mode"]
SLEEP_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
SLEEP_LEVEL = 1


@dataclass
class Summary:
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, check: str, result: str, verdict: str = "") -> None:
        self.rows.append((check, result, verdict))

    def print(self) -> None:
        width = max((len(check) for check, _, _ in self.rows), default=10)
        print("\nSummary", flush=True)
        print(f"  {'check':{width}}  {'verdict':7}  result")
        for check, result, verdict in self.rows:
            print(f"  {check:{width}}  {verdict:7}  {result}")
        print(flush=True)


def parameter_count(shape: dict[str, Any], num_labels: int = 1) -> int:
    """Parameters of a Qwen3ForSequenceClassification of this shape (no bias anywhere, per-head q/k norms)."""
    hidden, head_dim = shape["hidden_size"], shape["head_dim"]
    attention = hidden * head_dim * (2 * shape["num_attention_heads"] + 2 * shape["num_key_value_heads"])
    layer = attention + 3 * hidden * shape["intermediate_size"] + 2 * hidden + 2 * head_dim
    return shape["vocab_size"] * hidden + shape["num_hidden_layers"] * layer + hidden + hidden * num_labels


def model_config(shape: dict[str, Any], dtype: str, tokenizer):
    if len(tokenizer) > shape["vocab_size"]:
        raise ValueError(f"the tokenizer's {len(tokenizer)} ids do not fit a vocabulary of {shape['vocab_size']}")
    config = Qwen3Config(
        **shape,
        num_labels=1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    config.architectures = [ARCHITECTURE]
    # transformers 5 names it dtype (torch_dtype before, and a deprecation warning now)
    setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", dtype)
    return config


def reward_model(gpus: int, dtype: str) -> dict:
    """The RewardModel the check serves: a sequence model with a chat template of its own, rendered by
    the gateway (so a group of completions goes to vLLM as one call)."""
    model = {"uri": "hf://gpu-check/qwen3-0.6b-random", "kind": "sequence", "dtype": dtype}
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "gpu-check", "namespace": "gpu-check", "uid": "00000000-0000-4000-8000-00000000c0de"},
        "spec": {
            "model": {**model, "chatTemplate": SPEC_TEMPLATE},
            "resources": {"gpus": gpus},
            "gateway": {"chatTemplateMode": "gateway"},
        },
    }


@dataclass
class Rendered:
    isvc: dict
    template_file: Path

    @property
    def predictor(self) -> dict:
        return self.isvc["spec"]["predictor"]["model"]

    @property
    def gateway_cpus(self) -> int:
        """The transformer's CPU limit (the gateway's CPUs in a pod), whole CPUs, at least one."""
        limits = self.isvc["spec"]["transformer"]["containers"][0].get("resources", {}).get("limits", {})
        cpu = str(limits.get("cpu", "1"))
        return max(1, int(float(cpu[:-1]) / 1000) if cpu.endswith("m") else int(float(cpu)))


def with_sleep_mode(rendered: Rendered) -> Rendered:
    """The same InferenceService with vLLM's sleep mode enabled (step 7), the rendered one left as it is."""
    isvc = json.loads(json.dumps(rendered.isvc))
    isvc["spec"]["predictor"]["model"]["args"] = [*rendered.predictor["args"], *SLEEP_ARGS]
    return Rendered(isvc, rendered.template_file)


def render(gpus: int, dtype: str, workdir: Path) -> Rendered:
    """The RewardModel's InferenceService, its chat template's ConfigMap written to a local file and the
    mount path replaced by that file's, in the predictor's args and the gateway's environment."""
    children = render_reward_model(reward_model(gpus, dtype))
    template_file = workdir / rendered_template.FILE_NAME
    # the chat template's ConfigMap (the identity's, which the gateway follows, is not needed here)
    name = rendered_template.FILE_NAME
    (config_map,) = [c for c in children if c["kind"] == "ConfigMap" and name in c.get("data", {})]
    template_file.write_text(config_map["data"][rendered_template.FILE_NAME])
    (isvc,) = [child for child in children if child["kind"] == "InferenceService"]
    local = json.loads(json.dumps(isvc).replace(rendered_template.PATH, str(template_file)))
    return Rendered(local, template_file)


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def query_text(prompt: str, response: str) -> str:
    """OpenRLHF's query for the spec's template: the policy's rendering, its BOS included."""
    return f"{BOS}### user:\n{prompt}\n### assistant:\n{response}\n"


@dataclass
class ParityBatch:
    items: list[dict]  # /v1/rewards items
    queries: list[str]  # /get_reward's query
    references: list[dict]  # what transformers is asked, items' first, then the queries'


def parity_batch(seed: int = 7) -> ParityBatch:
    """Two conversations and the scoring cases' prompt/response, two GRPO groups of 8, and 8 finished
    queries: what the trainers send."""
    rng = random.Random(seed)
    items: list[dict] = [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]
    conversations = [CONVERSATION, prompt_response(PROMPT, RESPONSE)]
    for group in range(2):
        prompt = sentence(rng, 40)
        for _ in range(GROUP):
            response = sentence(rng, rng.randint(5, 30))
            items.append({"prompt": prompt, "response": response, "group": f"g{group}"})
            conversations.append(prompt_response(prompt, response))
    queries = [SPEC_QUERY, *(query_text(sentence(rng, 30), sentence(rng, 20)) for _ in range(7))]
    references = [{"messages": c, "chat_template": SPEC_TEMPLATE} for c in conversations]
    references += [{"text": query} for query in queries]
    return ParityBatch(items, queries, references)


def within(got: float, want: float, dtype: str) -> bool:
    absolute, relative = TOLERANCES[dtype]
    return abs(got - want) <= absolute + relative * abs(want)


def compare(got: list[float], want: list[float], dtype: str) -> tuple[float, bool]:
    if len(got) != len(want):
        return float("inf"), False
    diffs = [abs(g - w) for g, w in zip(got, want, strict=True)]
    return max(diffs), all(within(g, w, dtype) for g, w in zip(got, want, strict=True))


@dataclass(frozen=True)
class Settings:
    device: str  # cuda, or cpu for the rehearsal
    gpus: int
    dtype: str
    shape: dict[str, Any]
    requests: int
    prompt_words: int
    response_words: int
    start_timeout_s: float
    scheduler: tuple[float, float]  # the scheduler's shapes: (requests scale, fair-share seconds)


def settings(arguments: argparse.Namespace) -> Settings:
    device = "cpu" if arguments.cpu_rehearsal else "cuda"
    requests_scale, fair_seconds = SCHEDULER_SCALE[device]
    scheduler = (arguments.scheduler_scale or requests_scale, fair_seconds)
    if arguments.cpu_rehearsal:
        return Settings("cpu", 0, "float32", REHEARSAL_SHAPE, arguments.requests or 64, 24, 8, 360, scheduler)
    return Settings(
        "cuda",
        1,
        arguments.dtype,
        REAL_SHAPE,
        arguments.requests or 2048,
        PROMPT_WORDS,
        RESPONSE_WORDS,
        VLLM_START_TIMEOUT_S,
        scheduler,
    )
