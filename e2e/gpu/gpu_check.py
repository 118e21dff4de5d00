"""`make gpu-check`: the operator's GPU rendering served for real on a lent GPU machine.

One script for a machine with an NVIDIA GPU and no network (nothing can be installed there): it finds
a CUDA build of the pinned vLLM already importable in ``VLLM_PYTHON`` (else the interpreter of
``vllm`` on PATH, else ``python3``), checks it, and then

1. prints the device (name, memory, capability) and the vLLM, torch and transformers versions;
2. makes a random-weight reward model of real size (Qwen3-0.6B's shape as a
   ``Qwen3ForSequenceClassification`` with one label, bfloat16) with the tests' locally trained
   tokenizer (``reward_testing.tiny_model_maker``), in a temporary folder;
3. renders a RewardModel with ``resources.gpus: 1`` (``reward_operator.render``) and runs vLLM with
   the predictor's rendered command line, only ``--model`` pointed at that folder
   (``reward_testing.vllm_server``, ``device="cuda"``: nothing added, as a GPU pod runs it);
4. starts the reward gateway with its rendered environment in front (``reward_testing.gateway_process``),
   coalescing off (``forward``), and scores a batch through ``/v1/rewards`` and ``/get_reward``,
   compared with transformers' forward pass on the same GPU in the same dtype (max |diff| against the
   dtype's tolerance, TOLERANCES);
5. measures scores/s and p50/p99 latency through that forwarding gateway and straight to vLLM: one
   sample per ``/get_reward`` request at concurrency 64, and GRPO groups (8 completions sharing a
   prompt) per ``/v1/rewards`` request;
6. starts three more gateways in front of the same vLLM, the same rendered environment with coalescing
   on (``coalesce``: fair share on, the defaults), the same without the time bound on a merged call
   (``count``) and with fair share off (``fifo``), and runs the
   scheduler's four traffic shapes (``reward_testing.scheduler_bench``, as ``make bench-vllm`` on the
   CPU): OpenRLHF's 64 single-sample clients and verl's 16 prompts x 8 completions interleaved
   (straight, forward, coalesce, with vLLM's prefix-cache hit ratios), TRL's groups of 8, and a light
   client beside a flood through each (its p99 against its p99 alone).

Steps 5 and 6 print figures and ratios, never asserted: SCHEDULER_GOALS says what they are for.

Where something is missing (no CUDA device, no vLLM, another release, the gateway's dependencies) it
stops within seconds with one line naming it, exit status 2. Parity failing: exit status 1.

``--cpu-rehearsal`` runs the same steps here, on the CPU build of vLLM with a small model of the same
architecture (float32, ``resources.gpus: 0``, the CPU runtime's settings): a check of this script,
not a GPU result.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The repository's own packages, whatever PYTHONPATH the caller set: the lent machine has no venv of ours
SOURCE_PATHS = [REPO / "operator", REPO / "runtimes" / "gateway", REPO / "testing"]
for _path in reversed(SOURCE_PATHS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from reward_testing.vllm import VLLM_VERSION  # noqa: E402  (standard library only)

STAGE_ENV = "GPU_CHECK_STAGE"  # set once re-executed under the vLLM interpreter
GATEWAY_PYTHON_ENV = "GATEWAY_PYTHON"
MISSING_EXIT = 2
FAILED_EXIT = 1

# What the check itself imports under the vLLM interpreter (vLLM's own dependencies bring them)
CHECK_MODULES = ("torch", "transformers", "tokenizers", "safetensors", "yaml", "httpx", "aiohttp")
# What `python -m reward_gateway` imports (pyproject.toml: the package's and the gateway extra's)
GATEWAY_MODULES = ("orjson", "httptools", "fastapi", "pydantic", "uvicorn", "jinja2", "prometheus_client", "yaml")

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


# ---------------------------------------------------------------------------------------------------
# Preflight: any Python 3, standard library only
# ---------------------------------------------------------------------------------------------------

PROBE = r"""
import importlib.util, json, sys
facts = {"python": sys.version.split()[0]}
try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = bool(torch.cuda.is_available())
except Exception as error:
    facts["torch_error"] = f"{type(error).__name__}: {error}"
try:
    import vllm
    facts["vllm"] = str(getattr(vllm, "__version__", "unknown"))
    from vllm.platforms import current_platform
    facts["vllm_device"] = str(current_platform.device_type or "none")
except Exception as error:
    facts["vllm_error"] = f"{type(error).__name__}: {error}"
facts["missing"] = [m for m in sys.argv[1].split(",") if importlib.util.find_spec(m) is None]
print("PROBE " + json.dumps(facts))
"""

MODULES_PROBE = (
    "import importlib.util, json, sys; "
    "print('PROBE ' + json.dumps([m for m in sys.argv[1].split(',') if importlib.util.find_spec(m) is None]))"
)


class Missing(Exception):
    """What the machine lacks for the check: one line."""


def vllm_interpreter() -> tuple[str, str]:
    """The interpreter that should hold the CUDA vLLM, and how it was found."""
    given = os.environ.get("VLLM_PYTHON")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise Missing(f"VLLM_PYTHON={given} is not an executable file")
        return given, "VLLM_PYTHON"
    cli = shutil.which("vllm")
    if cli:
        with open(cli, "rb") as script:
            first = script.readline().decode(errors="replace")
        interpreter = first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else ""
        if interpreter and os.access(interpreter, os.X_OK) and not interpreter.endswith("/env"):
            return interpreter, f"the interpreter of {cli}"
    python = shutil.which("python3")
    if python:
        return python, "python3 on PATH"
    raise Missing("no interpreter for vLLM: VLLM_PYTHON is unset and neither `vllm` nor `python3` is on PATH")


def probe(python: str, script: str, modules: tuple[str, ...], timeout: float = 180) -> Any:
    env = {**os.environ, "PYTHONPATH": ""}  # what the interpreter itself holds, not this checkout
    try:
        run = subprocess.run(
            [python, "-c", script, ",".join(modules)], capture_output=True, text=True, timeout=timeout, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Missing(f"{python} did not answer the probe: {error}") from error
    lines = [line for line in run.stdout.splitlines() if line.startswith("PROBE ")]
    if not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise Missing(f"{python} could not run the probe (exit {run.returncode}: {tail})")
    return json.loads(lines[-1].removeprefix("PROBE "))


def release(version: str) -> str:
    """The public release of a version string: 1.2.3+cu129 and 1.2.3 are one release."""
    return version.split("+", 1)[0]


def problems(facts: dict[str, Any], python: str, pin: str, need_cuda: bool) -> list[str]:
    """What the vLLM interpreter lacks, each a clause of the one-line message."""
    found = []
    if "vllm_error" in facts and "vllm" not in facts:
        found.append(f"no vLLM importable in {python} ({facts['vllm_error']}): a CUDA build of vLLM {pin} is needed")
    elif "vllm" in facts and release(facts["vllm"]) != pin:
        found.append(f"vLLM {facts['vllm']} in {python}, but the pin is {pin} (VLLM_VERSION in versions.env)")
    if "torch_error" in facts:
        found.append(f"no torch importable in {python} ({facts['torch_error']})")
    elif need_cuda and not facts.get("cuda_available"):
        built = f"built for CUDA {facts['torch_cuda']}" if facts.get("torch_cuda") else "a build without CUDA"
        found.append(f"no CUDA device: torch {facts.get('torch')} in {python} ({built}) sees none")
    # a CUDA build without a GPU names no device ("none"); the CPU build names "cpu"
    if need_cuda and facts.get("vllm_device") not in (None, "none", "cuda"):
        found.append(f"the vLLM in {python} is its {facts['vllm_device']} build, not a CUDA build")
    missing = [module for module in facts.get("missing", []) if module not in ("torch",)]
    if missing:
        found.append(f"{python} lacks {', '.join(missing)} (the check's own needs)")
    return found


def gateway_interpreter(vllm_python: str) -> str:
    """GATEWAY_PYTHON, else this checkout's venv where there is one, else the vLLM interpreter."""
    given = os.environ.get(GATEWAY_PYTHON_ENV)
    if given:
        return given
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else vllm_python


def preflight(pin: str, need_cuda: bool) -> tuple[str, str, dict[str, Any]]:
    """The vLLM interpreter, the gateway's and the facts probed; raises Missing with every gap in one line."""
    python, how = vllm_interpreter()
    progress(f"vLLM interpreter: {python} ({how}); probing torch, CUDA and vLLM {pin}")
    facts = probe(python, PROBE, CHECK_MODULES)
    found = problems(facts, python, pin, need_cuda)
    gateway_python = gateway_interpreter(python)
    if not os.access(gateway_python, os.X_OK):
        found.append(f"{GATEWAY_PYTHON_ENV}={gateway_python} is not an executable file")
    else:
        lacking = probe(gateway_python, MODULES_PROBE, GATEWAY_MODULES)
        if lacking:
            found.append(
                f"the gateway's interpreter {gateway_python} lacks {', '.join(lacking)}: set {GATEWAY_PYTHON_ENV} "
                "to a Python with pyproject.toml's gateway extra"
            )
    if found:
        raise Missing("; ".join(found))
    return python, gateway_python, facts


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------

# wall-clock: the preflight and the run (re-executed under the vLLM interpreter) count from one start
STARTED = float(os.environ.get("GPU_CHECK_STARTED", time.time()))


def progress(message: str) -> None:
    print(f"[gpu-check {time.time() - STARTED:6.1f}s] {message}", flush=True)


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


# ---------------------------------------------------------------------------------------------------
# The model (under the vLLM interpreter: torch, transformers)
# ---------------------------------------------------------------------------------------------------


def parameter_count(shape: dict[str, Any], num_labels: int = 1) -> int:
    """Parameters of a Qwen3ForSequenceClassification of this shape (no bias anywhere, per-head q/k norms)."""
    hidden, head_dim = shape["hidden_size"], shape["head_dim"]
    attention = hidden * head_dim * (2 * shape["num_attention_heads"] + 2 * shape["num_key_value_heads"])
    layer = attention + 3 * hidden * shape["intermediate_size"] + 2 * hidden + 2 * head_dim
    return shape["vocab_size"] * hidden + shape["num_hidden_layers"] * layer + hidden + hidden * num_labels


def model_config(shape: dict[str, Any], dtype: str, tokenizer):
    from transformers import Qwen3Config

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


def make_model(dest: Path, shape: dict[str, Any], dtype: str, device: str) -> int:
    """A random-weight Qwen3ForSequenceClassification and the tests' tokenizer, saved in ``dest``;
    returns its parameter count."""
    import torch
    from transformers import Qwen3ForSequenceClassification

    from reward_testing import tiny_model_maker as maker

    tokenizer = maker.make_tokenizer(model_max_length=shape["max_position_embeddings"])
    config = model_config(shape, dtype, tokenizer)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForSequenceClassification(config).to(getattr(torch, dtype)).eval()
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    count = sum(parameter.numel() for parameter in model.parameters())
    del model
    return count


def reference_rewards(folder: Path, dtype: str, device: str, items: list[dict]) -> list[float]:
    """transformers' forward pass per item (no padding) on ``device`` in ``dtype``: the last token's logit."""
    import torch
    from transformers import AutoTokenizer, Qwen3ForSequenceClassification

    from reward_testing import tiny_model_maker as maker

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen3ForSequenceClassification.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
    rewards = []
    with torch.no_grad():
        for item in items:
            ids = torch.tensor([maker.item_ids(tokenizer, item)], device=device)
            rewards.append(float(model(input_ids=ids).logits[0, 0].float()))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # vLLM sizes its KV cache from the memory free when it starts
    return rewards


def device_facts(device: str) -> str:
    import torch

    if device != "cuda":
        return f"CPU rehearsal ({os.cpu_count()} CPUs), no GPU"
    properties = torch.cuda.get_device_properties(0)
    facts = (
        f"{properties.name}, {properties.total_memory / 2**30:.1f} GiB, compute capability "
        f"{properties.major}.{properties.minor}, {torch.cuda.device_count()} device(s)"
    )
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        answer = subprocess.run(query, capture_output=True, text=True, timeout=30)
        if answer.returncode == 0 and answer.stdout.strip():
            facts += f", driver {answer.stdout.splitlines()[0].strip()}"
    return facts


def versions() -> str:
    import torch
    import transformers
    import vllm

    cuda = f" (CUDA {torch.version.cuda})" if torch.version.cuda else ""
    return f"vLLM {vllm.__version__}, torch {torch.__version__}{cuda}, transformers {transformers.__version__}"


# ---------------------------------------------------------------------------------------------------
# The RewardModel, rendered
# ---------------------------------------------------------------------------------------------------


def reward_model(gpus: int, dtype: str) -> dict:
    """The RewardModel the check serves: a sequence model with a chat template of its own, rendered by
    the gateway (so a group of completions goes to vLLM as one call)."""
    from reward_testing.scoring_cases import SPEC_TEMPLATE

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


def render(gpus: int, dtype: str, workdir: Path) -> Rendered:
    """The RewardModel's InferenceService, its chat template's ConfigMap written to a local file and the
    mount path replaced by that file's, in the predictor's args and the gateway's environment."""
    from reward_operator.render import chat_template as rendered_template
    from reward_operator.render import render_reward_model

    children = render_reward_model(reward_model(gpus, dtype))
    template_file = workdir / rendered_template.FILE_NAME
    # the chat template's ConfigMap (the identity's, which the gateway follows, is not needed here)
    name = rendered_template.FILE_NAME
    (config_map,) = [c for c in children if c["kind"] == "ConfigMap" and name in c.get("data", {})]
    template_file.write_text(config_map["data"][rendered_template.FILE_NAME])
    (isvc,) = [child for child in children if child["kind"] == "InferenceService"]
    local = json.loads(json.dumps(isvc).replace(rendered_template.PATH, str(template_file)))
    return Rendered(local, template_file)


# ---------------------------------------------------------------------------------------------------
# What is scored
# ---------------------------------------------------------------------------------------------------


def sentence(rng: random.Random, words: int) -> str:
    from reward_testing.tiny_model_maker import WORDS

    return " ".join(rng.choice(WORDS) for _ in range(words))


def query_text(prompt: str, response: str) -> str:
    """OpenRLHF's query for the spec's template: the policy's rendering, its BOS included."""
    from reward_testing.tiny_model_maker import BOS

    return f"{BOS}### user:\n{prompt}\n### assistant:\n{response}\n"


@dataclass
class ParityBatch:
    items: list[dict]  # /v1/rewards items
    queries: list[str]  # /get_reward's query
    references: list[dict]  # what transformers is asked, items' first, then the queries'


def parity_batch(seed: int = 7) -> ParityBatch:
    """Two conversations and the scoring cases' prompt/response, two GRPO groups of 8, and 8 finished
    queries: what the trainers send."""
    from reward_testing.scoring_cases import CONVERSATION, PROMPT, RESPONSE, SPEC_QUERY, SPEC_TEMPLATE, prompt_response

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


# ---------------------------------------------------------------------------------------------------
# Benchmark (under the vLLM interpreter: aiohttp and httpx, through reward_testing.scheduler_bench)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRoute:
    title: str
    summary_name: str
    items: int  # scores a request
    direct: list  # scheduler_bench requests to vLLM's /classify
    through: list  # the same texts' requests to the gateway


def bench_routes(vllm, gateway: str, requests: int, warm_up: int, prompt_words: int, response_words: int, template):
    """Per-sample /get_reward and grouped /v1/rewards, each with vLLM's /classify of the same texts
    (``vllm``: a scheduler_bench.Vllm). The direct run and the gateway's score different texts (a tag at
    their start), so neither meets the other's prefix cache; completions of one group share their
    prompt, as GRPO's do."""
    rng = random.Random(11)
    total = warm_up + requests
    samples: dict[str, list[str]] = {}
    groups: dict[str, list[tuple[str, list[str]]]] = {}
    group_requests = max(1, requests // GROUP)
    group_warm_up = max(1, warm_up // GROUP)
    for run in ("direct", "gateway"):
        samples[run] = [
            query_text(f"{run} sample {i}: {sentence(rng, prompt_words)}", sentence(rng, response_words))
            for i in range(total)
        ]
        groups[run] = [
            (f"{run} group {i}: {sentence(rng, prompt_words)}", [sentence(rng, response_words) for _ in range(GROUP)])
            for i in range(group_warm_up + group_requests)
        ]

    per_sample = BenchRoute(
        f"per sample: /get_reward (1 query a request) vs vLLM /classify, concurrency {CONCURRENCY}",
        "bench per sample",
        1,
        [vllm.classify([text]) for text in samples["direct"]],
        [(f"{gateway}/get_reward", {"query": [text]}, {}) for text in samples["gateway"]],
    )
    grouped = BenchRoute(
        f"GRPO groups: /v1/rewards ({GROUP} completions sharing a prompt) vs vLLM /classify of the {GROUP} "
        f"rendered texts, concurrency {CONCURRENCY}",
        f"bench groups of {GROUP}",
        GROUP,
        [vllm.classify([template(prompt, r) for r in responses]) for prompt, responses in groups["direct"]],
        [
            (
                f"{gateway}/v1/rewards",
                {"items": [{"prompt": prompt, "response": r, "group": f"g{i}"} for r in responses]},
                {},
            )
            for i, (prompt, responses) in enumerate(groups["gateway"])
        ],
    )
    return [(per_sample, warm_up), (grouped, group_warm_up)]


def measure(requests: list, warm_up: int):
    """CONCURRENCY clients over one queue; the first ``warm_up`` requests open the connections and are not
    timed. Any request failing fails the step (it would measure an error path, not scoring)."""
    from reward_testing import scheduler_bench

    measured = scheduler_bench.run(scheduler_bench.closed_loop(requests, CONCURRENCY, warm_up))
    if measured.failures:
        raise RuntimeError(
            f"{measured.failures} of {len(requests)} requests failed; the first: {measured.first_failure}"
        )
    return measured


def forwarding_bench(vllm, gateway: str, chosen: Settings, template, summary: Summary) -> None:
    """Step 5: the forwarding gateway against vLLM straight, per sample and in GRPO groups."""
    warm_up = min(4 * CONCURRENCY, chosen.requests)
    for route, route_warm_up in bench_routes(
        vllm, gateway, chosen.requests, warm_up, chosen.prompt_words, chosen.response_words, template
    ):
        progress(f"bench {route.title}: {len(route.direct) - route_warm_up} requests each way")
        direct = measure(route.direct, route_warm_up)
        through = measure(route.through, route_warm_up)
        direct_rate, through_rate = direct.rate * route.items, through.rate * route.items
        for name, run, rate in (("vLLM direct", direct, direct_rate), ("via gateway", through, through_rate)):
            progress(f"  {name:12} {rate:9.0f} scores/s   p50 {run.p(50):7.1f} ms   p99 {run.p(99):7.1f} ms")
        ratio = through_rate / direct_rate
        added = f"{through.p(50) - direct.p(50):+.1f} ms at p50, {through.p(99) - direct.p(99):+.1f} ms at p99"
        progress(f"  gateway/direct: {ratio:.2f} of the throughput, {added}")
        summary.add(
            route.summary_name,
            f"{through_rate:.0f} vs {direct_rate:.0f} scores/s ({ratio:.2f}x); p99 "
            f"{through.p(99):.1f} vs {direct.p(99):.1f} ms ({added})",
            "figures",
        )


def scheduler_summary(figures, summary: Summary) -> None:
    """Step 6's ratios, one summary line a shape (``figures``: scheduler_bench.Figures)."""
    shapes = {"per sample": figures.single, "verl interleaved": figures.shared, "groups of 8": figures.groups}
    for name, shape in shapes.items():
        straight = shape.sides[0].run
        parts = [
            f"throughput vs straight ({straight.rate:.0f} {shape.unit}/s): {_versus(shape, 0)} "
            f"(goal: coalesce >= {SCHEDULER_THROUGHPUT_GOALS[name]:g}x)",
            f"p99 vs straight ({straight.p(99):.0f} ms): {_versus(shape, 1)}",
        ]
        if name == "verl interleaved":
            hits = [f"{_side_name(side.name)} {_percent(side.hit_ratio)}" for side in shape.sides]
            parts.append(f"prefix hits: {', '.join(hits)}")
        failed = sum(side.run.failures for side in shape.sides)
        parts += [f"{failed} requests failed"] if failed else []
        summary.add(f"scheduler {name}", "; ".join(parts), "figures")
    fairness = figures.fairness
    failed = sum(light.failures + heavy.failures for light, heavy in fairness.beside.values())
    parts = [
        f"light client's p99 vs alone ({fairness.alone.p(99):.0f} ms): fair share on "
        f"{fairness.p99_over_alone('coalesce'):.2f}x (without the time bound on a call "
        f"{fairness.p99_over_alone('count'):.2f}x), off {fairness.p99_over_alone('fifo'):.2f}x; its mean wait in "
        f"the gateway's queue with fair share on {fairness.queue_wait['coalesce'] * 1000:.0f} ms "
        f"(goal: on <= {FAIR_SHARE_GOAL:g}x)"
    ]
    parts += [f"{failed} requests failed"] if failed else []
    summary.add("scheduler fair share", "; ".join(parts), "figures")


def _versus(shape, figure: int) -> str:
    """The coalescing and forwarding gateways' throughput (``figure`` 0) or p99 (1) as multiples of the
    straight side's."""
    ratios = (f"{name} {shape.versus_straight(shape.side(name))[figure]:.2f}x" for name in ("coalesce", "forward"))
    return ", ".join(ratios)


def _side_name(side: str) -> str:
    """``straight /classify`` -> straight, ``gateway coalesce`` -> coalesce."""
    return side.removeprefix("gateway ").removesuffix(" /classify")


def _percent(ratio: float | None) -> str:
    return f"{ratio:.0%}" if ratio is not None else "-"


# ---------------------------------------------------------------------------------------------------
# The run (under the vLLM interpreter)
# ---------------------------------------------------------------------------------------------------


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


def healthy_vllm(stack: ExitStack, rendered: Rendered, model_dir: Path, workdir: Path, chosen: Settings, summary):
    """vLLM with the predictor's rendered command line, once /health answers; its log's tail where not."""
    from reward_testing.vllm_server import started_vllm, wait_healthy

    started = time.monotonic()
    vllm = stack.enter_context(started_vllm(rendered.isvc, model_dir, workdir / "vllm", device=chosen.device))
    progress(f"vLLM starting (log: {vllm.log}): {' '.join(vllm.args[1:])}")
    try:
        wait_healthy(vllm, timeout=chosen.start_timeout_s)
    except AssertionError as error:
        tail = "\n".join(vllm.log_text().splitlines()[-40:])
        progress(f"vLLM's log, its last lines:\n{tail}")
        last = (tail.splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"vLLM did not become healthy ({last}); its log: {vllm.log}") from error
    summary.add("vLLM start", f"{time.monotonic() - started:.0f} s to /health 200 ({vllm.url})")
    progress(f"vLLM healthy after {time.monotonic() - started:.0f} s")
    return vllm


@dataclass(frozen=True)
class Gateways:
    """How each gateway of the check starts: the rendered environment and args, in front of vLLM, on the
    CPUs of its rendered limits.cpu (the last ones, where the machine has more), in the gateway's Python."""

    env: dict[str, str]
    args: list[str]
    upstream: str
    workdir: Path
    cpus: set[int] | None

    def start(self, stack: ExitStack, name: str) -> str:
        """The gateway with scheduler_bench.GATEWAYS[name] over the rendered environment; its URL."""
        from reward_testing.gateway_process import local_gateway
        from reward_testing.scheduler_bench import GATEWAYS

        log = self.workdir / f"gateway-{name}.log"
        env = {**self.env, **GATEWAYS[name]}
        python = os.environ[GATEWAY_PYTHON_ENV]
        url = stack.enter_context(local_gateway(env, self.args, self.upstream, log, python=python, cpus=self.cpus))
        pinned = f"CPUs {sorted(self.cpus)}" if self.cpus else "all CPUs"
        progress(f"gateway {name} ready at {url} ({pinned}, as its rendered limits.cpu)")
        return url


def gateways_for(rendered: Rendered, upstream: str, workdir: Path) -> Gateways:
    from reward_testing.gateway_process import rendered_gateway

    env, args = rendered_gateway(rendered.isvc)
    env["PYTHONPATH"] = os.pathsep.join(str(path) for path in SOURCE_PATHS)
    cpus = sorted(os.sched_getaffinity(0))
    pinned = set(cpus[-rendered.gateway_cpus :]) if len(cpus) > rendered.gateway_cpus else None
    return Gateways(env, args, upstream, workdir, pinned)


def parity(gateway: str, batch: ParityBatch, references: list[float], dtype: str, device: str, summary) -> bool:
    """Step 4: both routes' scores against transformers'; whether all are within the tolerance."""
    import httpx

    def post(path: str, body: dict) -> dict:
        answer = httpx.post(gateway + path, json=body, timeout=300)
        if answer.status_code != 200:
            raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:500]}")
        return answer.json()

    rewards = post("/v1/rewards", {"items": batch.items})["rewards"]
    openrlhf = post("/get_reward", {"query": batch.queries})["rewards"]
    absolute, relative = TOLERANCES[dtype]
    tolerance = f"|diff| <= {absolute:g} + {relative:g}*|ref| ({dtype})"
    passed_all = True
    for route, got, want in (
        ("/v1/rewards", rewards, references[: len(batch.items)]),
        ("/get_reward", openrlhf, references[len(batch.items) :]),
    ):
        worst, passed = compare(got, want, dtype)
        passed_all &= passed
        verdict = "pass" if passed else "FAIL"
        line = (
            f"{len(want)} scores ({min(want):.3g} to {max(want):.3g}) vs transformers on {device}: "
            f"max |diff| {worst:.3g}, {tolerance}"
        )
        progress(f"parity {route}: {line}: {verdict}")
        summary.add(f"parity {route}", line, verdict)
    return passed_all


def scheduler_step(stack: ExitStack, gateways: Gateways, forward: str, model_name: str, chosen: Settings, summary):
    """Step 6: the coalescing and the first-come-first-served gateways beside the forwarding one, and the
    scheduler's four shapes through them."""
    from reward_testing.scheduler_bench import Scale, Vllm, scheduler_figures

    urls = {"forward": forward, **{name: gateways.start(stack, name) for name in ("coalesce", "count", "fifo")}}
    requests_scale, fair_seconds = chosen.scheduler
    progress(f"scheduler: four traffic shapes, requests x{requests_scale:g}, fair share {fair_seconds:g} s a run")
    progress(SCHEDULER_GOALS)
    started = time.monotonic()
    figures = scheduler_figures(Vllm(gateways.upstream, model_name), urls, Scale(requests_scale, fair_seconds))
    progress(f"scheduler: the four shapes took {time.monotonic() - started:.0f} s")
    scheduler_summary(figures, summary)


def run_check(arguments: argparse.Namespace) -> int:
    from reward_testing.scheduler_bench import Vllm
    from reward_testing.scoring_cases import prompt_response

    chosen = settings(arguments)
    summary = Summary()
    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-", dir=os.environ.get("GPU_CHECK_DIR")))
    failed = False
    try:
        facts = device_facts(chosen.device)
        progress(f"device: {facts}")
        summary.add("device", facts)
        found = versions()
        progress(f"versions: {found}")
        summary.add("versions", found)

        model_dir = workdir / "model"
        progress(f"making a random-weight {ARCHITECTURE} ({chosen.dtype}) in {model_dir}")
        count = make_model(model_dir, chosen.shape, chosen.dtype, chosen.device)
        size = sum(path.stat().st_size for path in model_dir.iterdir()) / 2**30
        described = f"{ARCHITECTURE}, {count / 1e6:.0f}M parameters, {chosen.dtype}, {size:.2f} GiB on disk"
        progress(f"model: {described}")
        summary.add("model", described)

        batch = parity_batch()
        progress(f"transformers' reference: {len(batch.references)} forward passes on {chosen.device}")
        references = reference_rewards(model_dir, chosen.dtype, chosen.device, batch.references)

        rendered = render(chosen.gpus, chosen.dtype, workdir)
        resources = rendered.predictor.get("resources", {}).get("limits", {})
        summary.add("rendering", f"runtime {rendered.predictor['runtime']}, limits {resources}")

        with ExitStack() as stack:
            vllm = healthy_vllm(stack, rendered, model_dir, workdir, chosen, summary)
            gateways = gateways_for(rendered, vllm.url, workdir)
            forward = gateways.start(stack, "forward")
            failed |= not parity(forward, batch, references, chosen.dtype, chosen.device, summary)

            model_name = gateways.env["REWARD_GATEWAY_MODEL_NAME"]  # vLLM's --served-model-name, as rendered
            template = _template_renderer(model_dir, prompt_response)
            forwarding_bench(Vllm(vllm.url, model_name), forward, chosen, template, summary)
            scheduler_step(stack, gateways, forward, model_name, chosen, summary)
    except Exception as error:  # a step that broke: say which, keep the folder with the logs
        failed = True
        arguments.keep = True
        progress(f"FAILED: {type(error).__name__}: {error}")
        summary.add("error", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}", "FAIL")
    finally:
        summary.print()
        print(SCHEDULER_GOALS, flush=True)
        if arguments.cpu_rehearsal:
            print("CPU rehearsal: a check of this script on vLLM's CPU build, not a GPU result.", flush=True)
        if arguments.keep:
            print(f"kept: {workdir} (model, vLLM's and the gateways' logs)", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return FAILED_EXIT if failed else 0


def _template_renderer(model_dir: Path, prompt_response):
    """The spec's template rendered as the gateway renders it, for the direct run's texts."""
    from transformers import AutoTokenizer

    from reward_testing.scoring_cases import SPEC_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def render_one(prompt: str, response: str) -> str:
        return tokenizer.apply_chat_template(
            prompt_response(prompt, response), chat_template=SPEC_TEMPLATE, tokenize=False
        )

    return render_one


# ---------------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pin", default=VLLM_VERSION, help="the vLLM release required (VLLM_VERSION in versions.env)")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(TOLERANCES))
    parser.add_argument("--requests", type=int, default=0, help="measured requests per benchmark run")
    parser.add_argument(
        "--scheduler-scale",
        type=float,
        default=0,
        help=f"multiplies the scheduler's request counts (default: {SCHEDULER_SCALE['cuda'][0]:g} on a GPU)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (model, logs)")
    parser.add_argument(
        "--cpu-rehearsal", action="store_true", help="run every step on vLLM's CPU build with a small model"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse(sys.argv[1:] if argv is None else argv)
    if os.environ.get(STAGE_ENV) == "run":
        return run_check(arguments)
    try:
        python, gateway_python, facts = preflight(arguments.pin, need_cuda=not arguments.cpu_rehearsal)
    except Missing as missing:
        print(f"gpu-check: cannot run: {missing}", file=sys.stderr, flush=True)
        return MISSING_EXIT
    progress(f"found vLLM {facts['vllm']} and torch {facts['torch']} in {python}; the gateway runs on {gateway_python}")
    paths = [str(path) for path in SOURCE_PATHS]
    env = {
        **os.environ,
        STAGE_ENV: "run",
        "GPU_CHECK_STARTED": str(STARTED),
        "VLLM_PYTHON": python,
        GATEWAY_PYTHON_ENV: gateway_python,
        "PYTHONPATH": os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    sys.stdout.flush()
    os.execve(python, [python, str(Path(__file__).resolve()), *(sys.argv[1:] if argv is None else argv)], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
