"""The gateway as a scheduler, against a real vLLM (the pinned CPU build): figures and ratios.

Makes a random-weight sequence reward model bigger than the tests' (BENCH_SHAPE: 4 layers, hidden
512), serves it with vLLM started as KServe starts the predictor (the operator's rendered args), and
puts four gateways in front of it, each started with the operator's rendered environment and its
settings in ``reward_testing.scheduler_bench.GATEWAYS``:

- ``forward``: coalescing off (the gateway's behaviour before it could merge);
- ``coalesce``: coalescing on, with the gateway's default settings (fair share on);
- ``count``: as ``coalesce``, merged calls bounded by count alone (no time bound: COALESCE_MAX_CALL_MS=0);
- ``fifo``: coalescing on, fair share off (first come, first served).

The traffic shapes and the load generator are ``reward_testing.scheduler_bench``'s (``make gpu-check``
runs the same on a lent GPU): OpenRLHF's 64 single-sample clients, verl's 16 prompts x 8 completions
interleaved, TRL's groups of 8, and fair share on and off beside a flood.

Then a judge (model.kind: judge, the same shape as a causal LM, on the vllm-generate-cpu runtime as rendered)
behind its gateway: requests of 8 items, a group of 8 completions of one prompt against 8 unrelated items,
with vLLM's prefix-cache hit ratio (``reward_testing.judge_bench``).

Printed, never asserted. BENCH_SCALE (default 1) multiplies the request counts and the fair share's
12 seconds; BENCH_GATEWAY_<SETTING>=value sets REWARD_GATEWAY_<SETTING> on every gateway;
BENCH_JUDGE_ONLY=1 runs the judge's table alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from reward_operator.render import render_reward_model
from reward_testing.gateway_process import local_gateway, rendered_gateway
from reward_testing.judge_bench import judge_figures
from reward_testing.judge_cases import judge_reward_model
from reward_testing.scheduler_bench import GATEWAYS, Scale, Vllm, scheduler_figures
from reward_testing.tiny_models import make_tiny_models
from reward_testing.vllm_server import started_vllm, wait_healthy

# BENCH_MODEL picks the model: "bench" (default) spends most of a call in compute on a CPU; "tiny"
# (the tests' model, hidden 128 over 2 layers) spends most of it in vLLM's per-request work, as a
# GPU does with a real reward model, which is the regime coalescing is for.
SHAPES = {
    "bench": {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,  # head_dim 32, which vLLM's CPU attention supports
        "num_key_value_heads": 4,
    },
    "tiny": {},
}
BENCH_MODEL = os.environ.get("BENCH_MODEL", "bench")
BENCH_SHAPE = SHAPES[BENCH_MODEL]
SCALE = float(os.environ.get("BENCH_SCALE", "1"))


def say(message: str) -> None:
    print(f"[bench-vllm {time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextmanager
def served_model(
    workdir: Path, settings: dict[str, dict[str, str]] = GATEWAYS
) -> Iterator[tuple[Vllm, dict[str, str]]]:
    """BENCH_SHAPE's sequence model on vLLM as rendered, and a gateway per entry of ``settings`` (its settings
    over the rendered environment); yields vLLM and the gateways' URLs by name."""
    started = time.perf_counter()
    model = make_tiny_models(workdir / "model", ("sequence",), shape=BENCH_SHAPE)["sequence"]
    shape = BENCH_SHAPE or "the tests' shape"
    say(f"model {BENCH_MODEL!r} made in {time.perf_counter() - started:.0f} s: {shape}")
    reward_model = {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "bench", "namespace": "bench", "uid": "00000000-0000-4000-8000-00000000b0b0"},
        "spec": {
            "model": {"uri": "hf://bench/reward-model", "kind": "sequence", "dtype": "float32"},
            "resources": {"gpus": 0},
        },
    }
    isvc = next(o for o in render_reward_model(reward_model) if o["kind"] == "InferenceService")
    with ExitStack() as stack:
        started = time.perf_counter()
        server = stack.enter_context(started_vllm(isvc, model.path, workdir / "vllm"))
        wait_healthy(server)
        say(f"vLLM {server.url} healthy after {time.perf_counter() - started:.0f} s")
        env, args = rendered_gateway(isvc)
        gateways = {
            name: stack.enter_context(
                local_gateway(
                    {**env, **overrides, **_overrides_from_environment()},
                    args,
                    server.url,
                    workdir / f"gateway-{name}.log",
                )
            )
            for name, overrides in settings.items()
        }
        say(f"gateways {', '.join(gateways)} ready")
        yield Vllm(server.url, env["REWARD_GATEWAY_MODEL_NAME"]), gateways


@contextmanager
def served_judge(workdir: Path) -> Iterator[tuple[Vllm, str]]:
    """A judge of BENCH_SHAPE (Yes/No label probabilities) behind its gateway, as rendered."""
    started = time.perf_counter()
    model = make_tiny_models(workdir / "judge-model", ("judge",), shape=BENCH_SHAPE)["judge"]
    say(f"judge {BENCH_MODEL!r} made in {time.perf_counter() - started:.0f} s")
    judge = judge_reward_model("yes_no", "bench-judge")
    judge["spec"]["model"].pop("extraArgs")  # no request log: it costs the engine a line per request
    judge["spec"].pop("env")
    isvc = next(o for o in render_reward_model(judge) if o["kind"] == "InferenceService")
    with ExitStack() as stack:
        started = time.perf_counter()
        server = stack.enter_context(
            started_vllm(isvc, model.path, workdir / "judge-vllm", runtime="vllm-generate-cpu")
        )
        wait_healthy(server)
        say(f"judge's vLLM {server.url} healthy after {time.perf_counter() - started:.0f} s")
        env, args = rendered_gateway(isvc)
        gateway = stack.enter_context(local_gateway(env, args, server.url, workdir / "gateway-judge.log"))
        yield Vllm(server.url, env["REWARD_GATEWAY_MODEL_NAME"]), gateway


def _overrides_from_environment() -> dict[str, str]:
    """BENCH_GATEWAY_<SETTING>=value sets REWARD_GATEWAY_<SETTING> on every gateway (a settings sweep)."""
    prefix = "BENCH_GATEWAY_"
    return {f"REWARD_GATEWAY_{k[len(prefix) :]}": v for k, v in os.environ.items() if k.startswith(prefix)}


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    say(f"commit {commit}, {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    overrides = _overrides_from_environment()
    if overrides:
        say(f"gateway settings changed for this run: {overrides}")
    scale = Scale(requests=SCALE, fair_seconds=12.0 * SCALE)
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        if not os.environ.get("BENCH_JUDGE_ONLY"):
            with served_model(Path(tmp)) as (vllm, gateways):
                scheduler_figures(vllm, gateways, scale)
        with served_judge(Path(tmp)) as (vllm, gateway):  # one vLLM at a time: each takes about 3 GB
            judge_figures(vllm, gateway, scale)
    say(f"done; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
