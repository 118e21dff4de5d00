"""Which ClusterServingRuntime runs a model, and the engine settings that follow from it.

A replica with GPUs runs on the CUDA runtimes (runtimes/vllm-reward.yaml, vllm-generate.yaml);
``resources.gpus: 0`` runs on the CPU runtimes (runtimes/vllm-reward-cpu.yaml,
vllm-generate-cpu.yaml: vLLM's CPU build), unless the spec names a runtime, which always wins.

On the CPU the operator renders what depends on the spec: the dtype (float32 unless the spec
sets one; bfloat16 only pays where the CPU has AVX512-BF16 or AMX, so that is the user's choice)
and the KV cache, sized from the container's memory limit. vLLM's CPU build otherwise takes most
of the node's memory for its KV cache, which a pod's limit turns into an OOM kill.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from ..api.schema.rewardmodel import DEFAULT_CPU_RUNTIME, DEFAULT_RUNTIME
from ..api.schema.rlhfpipeline import (
    DEFAULT_GENERATE_CPU_RUNTIME,
    DEFAULT_GENERATE_RUNTIME,
    DEFAULT_POOLING_CPU_RUNTIME,
    DEFAULT_POOLING_RUNTIME,
)

POOLING = "pooling"
GENERATE = "generate"
# runner -> (its GPU runtime, its CPU runtime)
DEFAULT_RUNTIMES = {
    POOLING: (DEFAULT_POOLING_RUNTIME, DEFAULT_POOLING_CPU_RUNTIME),
    GENERATE: (DEFAULT_GENERATE_RUNTIME, DEFAULT_GENERATE_CPU_RUNTIME),
}
assert DEFAULT_RUNTIMES[POOLING] == (DEFAULT_RUNTIME, DEFAULT_CPU_RUNTIME)

# The dtype a CPU replica runs when the spec sets none: every x86 CPU computes float32 natively,
# while "auto" would take a checkpoint's bfloat16, which CPUs without AVX512-BF16 or AMX emulate slowly.
CPU_DTYPE = "float32"
# What the engine's processes take besides the KV cache: the API server, engine core, worker and
# helper processes of vLLM's CPU build hold 3.0-3.5 GB resident (eager, a small model's KV cache),
# flat under load; 4 GiB leaves headroom.
ENGINE_RESERVE_BYTES = 4 << 30
# Of the memory left beyond that reserve, the KV cache takes this share; the rest holds the weights
# and the activations of a batch (a 0.6B-parameter model is 2.4 GB in float32).
KV_CACHE_SHARE = Decimal("0.5")
# Never less: a 0.6B-class model holds one 4096-token sequence in float32 in about 0.9 GiB, and vLLM
# refuses to start when one sequence of --max-model-len does not fit. Also the size without a memory
# limit, where there is nothing to derive it from (vLLM would take most of the node's memory).
KV_CACHE_FLOOR_BYTES = 1 << 30
KV_CACHE_FLAG = "--kv-cache-memory-bytes"
# vLLM's CPU build's own setting (GiB); a spec that sets it in env sizes the cache itself.
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3)}
_DECIMAL.update({"M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15)})
_DECIMAL["E"] = Decimal(10**18)
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9.]+)?$"
)


def on_cpu(gpus: int) -> bool:
    return gpus == 0


def runtime(explicit: str | None, gpus: int, runner: str = POOLING) -> str:
    """The runtime a model runs on: the one the spec names, else the default for its runner (pooling for
    reward models and critics, generate for actors and references) on GPUs or on the CPU."""
    if explicit:
        return explicit
    gpu_runtime, cpu_runtime = DEFAULT_RUNTIMES[runner]
    return cpu_runtime if on_cpu(gpus) else gpu_runtime


def quantity_bytes(quantity: int | str) -> int:
    """A Kubernetes quantity (8Gi, 8G, 8e9, 1.5Gi, 8589934592) in whole bytes, rounded down."""
    match = _QUANTITY.match(str(quantity).strip())
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    number, suffix = match["number"], match["suffix"] or ""
    if suffix[:1] in ("e", "E") and suffix not in _DECIMAL:
        return int(Decimal(number + suffix))
    return int(Decimal(number) * _BINARY.get(suffix, _DECIMAL.get(suffix, 1)))


def kv_cache_bytes(memory: int | str | None) -> int:
    """The KV cache of a CPU replica with this memory limit: half of what the engine's processes leave,
    at least the floor, in whole MiB."""
    if memory is None:
        return KV_CACHE_FLOOR_BYTES
    spare = quantity_bytes(memory) - ENGINE_RESERVE_BYTES
    share = int(Decimal(max(spare, 0)) * KV_CACHE_SHARE) >> 20 << 20
    return max(share, KV_CACHE_FLOOR_BYTES)


def _sets_flag(args: list[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in args)


def engine_args(model: dict[str, Any], resources: dict[str, Any], env: list[dict[str, Any]]) -> list[str]:
    """vLLM args that depend on where the model runs: on GPUs none; on the CPU the dtype (the spec's,
    else float32) and the KV cache from the memory limit (unless extraArgs or env size it)."""
    if not on_cpu(resources.get("gpus", 1)):
        return []
    args = [] if "dtype" in model else [f"--dtype={CPU_DTYPE}"]
    sized = _sets_flag(model.get("extraArgs", []), KV_CACHE_FLAG) or any(item["name"] == KV_CACHE_ENV for item in env)
    if not sized:
        args.append(f"{KV_CACHE_FLAG}={kv_cache_bytes(resources.get('memory'))}")
    return args
