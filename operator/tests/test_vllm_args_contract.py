"""The operator's rendered vLLM args, parsed by the pinned vLLM's own `vllm serve` parser."""

from __future__ import annotations

from pathlib import Path

import yaml

from reward_testing.paths import GOLDEN, REPO, golden_cases, golden_children
from reward_testing.vllm import require_vllm, run_in_vllm


def runtime_args(runtime: str) -> list[str]:
    """The ClusterServingRuntime's own args (runtimes/<runtime>.yaml), ahead of the rendered ones."""
    manifest = yaml.safe_load((REPO / "runtimes" / f"{runtime}.yaml").read_text())
    return [arg.replace("/mnt/models", "/tmp/model") for arg in manifest["spec"]["containers"][0]["args"]]


# The runner each runtime's vLLM must end up with: reward models and critics pool, actors and references
# generate, on GPUs and on the CPU alike.
RUNNERS = {
    "vllm-reward": "pooling",
    "vllm-reward-cpu": "pooling",
    "vllm-generate": "generate",
    "vllm-generate-cpu": "generate",
}


def pipeline_args() -> dict[str, tuple[str, list[str]]]:
    """Every vLLM an RLHFPipeline golden runs: case/isvc -> (its runtime, the full args)."""
    cases = {}
    for golden in sorted((GOLDEN / "pipeline").glob("*.yaml")):
        for child in yaml.safe_load_all(golden.read_text()):
            if child and child["kind"] == "InferenceService":
                model = child["spec"]["predictor"]["model"]
                cases[f"pipeline/{golden.stem}/{child['metadata']['name']}"] = (
                    model["runtime"],
                    runtime_args(model["runtime"]) + model["args"],
                )
    return cases


def rendered_args() -> dict[str, tuple[str, list[str]]]:
    """Every vLLM a RewardModel golden runs: case/isvc -> (its runtime, the full args)."""
    cases = {}
    for case in golden_cases():
        # every vLLM the case runs: each InferenceService's predictor, and a rollout's candidate
        for isvc in [child for child in golden_children(case) if child["kind"] == "InferenceService"]:
            name = isvc["metadata"]["name"]
            model = isvc["spec"]["predictor"]["model"]
            cases[f"{case}/{name}"] = (model["runtime"], runtime_args(model["runtime"]) + model["args"])
            for entry in isvc["spec"].get("canary", []):
                model = entry["predictor"]["model"]
                cases[f"{case}/{name}/canary"] = (model["runtime"], runtime_args(model["runtime"]) + model["args"])
    return cases


def test_the_goldens_run_every_shipped_runtime():
    used = {runtime for runtime, _ in {**rendered_args(), **pipeline_args()}.values()}
    assert used == set(RUNNERS) == {path.stem for path in (REPO / "runtimes").glob("*.yaml")}


def test_every_rendered_arg_is_accepted_by_vllms_parser():
    require_vllm()
    pipelines = pipeline_args()
    assert pipelines, "no pipeline golden InferenceServices found"
    runs = {**rendered_args(), **pipelines}
    assert runs, "no golden InferenceServices found"
    cases = {name: args for name, (_, args) in runs.items()}
    results, stderr = run_in_vllm(Path(__file__).with_name("vllm_parse_args.py"), cases)
    rejected = {name: cases[name] for name, result in results.items() if not result["ok"]}
    assert not rejected, f"vLLM rejects: {rejected}\n{stderr}"
    runners = {name: RUNNERS[runs[name][0]] for name in results}
    assert {name: result["runner"] for name, result in results.items()} == runners
    # the CPU runtimes' engine settings as vLLM reads them: eager, a dtype, a KV cache of the rendered size
    on_cpu = {name: results[name] for name, (runtime, _) in runs.items() if runtime.endswith("-cpu")}
    assert on_cpu, "no golden runs on a CPU runtime"
    for name, result in on_cpu.items():
        (size,) = [arg.split("=", 1)[1] for arg in cases[name] if arg.startswith("--kv-cache-memory-bytes=")]
        assert result["enforce_eager"] is True, name
        assert result["dtype"] in ("float32", "bfloat16"), name
        assert result["kv_cache_memory_bytes"] == int(size), name
    assert not any(result["enforce_eager"] for name, result in results.items() if name not in on_cpu)
