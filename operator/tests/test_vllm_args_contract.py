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


# The runner each runtime's vLLM must end up with: reward models and critics pool, actors and references generate.
RUNNERS = {"vllm-reward": "pooling", "vllm-generate": "generate"}


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


def rendered_args() -> dict[str, list[str]]:
    runtime_args_ = runtime_args("vllm-reward")
    cases = {}
    for case in golden_cases():
        # every vLLM the case runs: each InferenceService's predictor, and a rollout's candidate
        for isvc in [child for child in golden_children(case) if child["kind"] == "InferenceService"]:
            name = isvc["metadata"]["name"]
            cases[f"{case}/{name}"] = runtime_args_ + isvc["spec"]["predictor"]["model"]["args"]
            for entry in isvc["spec"].get("canary", []):
                cases[f"{case}/{name}/canary"] = runtime_args_ + entry["predictor"]["model"]["args"]
    return cases


def test_every_rendered_arg_is_accepted_by_vllms_parser():
    require_vllm()
    pipelines = pipeline_args()
    assert pipelines, "no pipeline golden InferenceServices found"
    cases = {**rendered_args(), **{name: args for name, (_, args) in pipelines.items()}}
    assert cases, "no golden InferenceServices found"
    results, stderr = run_in_vllm(Path(__file__).with_name("vllm_parse_args.py"), cases)
    rejected = {name: cases[name] for name, result in results.items() if not result["ok"]}
    assert not rejected, f"vLLM rejects: {rejected}\n{stderr}"
    runners = {name: RUNNERS[pipelines[name][0]] if name in pipelines else "pooling" for name in results}
    assert {name: result["runner"] for name, result in results.items()} == runners
