"""The operator's rendered vLLM args, parsed by the pinned vLLM's own `vllm serve` parser."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from reward_testing.paths import REPO, golden_cases, golden_children
from reward_testing.vllm import require_vllm


def rendered_args() -> dict[str, list[str]]:
    runtime = yaml.safe_load((REPO / "runtimes/vllm-reward.yaml").read_text())
    runtime_args = [arg.replace("/mnt/models", "/tmp/model") for arg in runtime["spec"]["containers"][0]["args"]]
    cases = {}
    for case in golden_cases():
        # every vLLM the case runs: each InferenceService's predictor, and a rollout's candidate
        for isvc in [child for child in golden_children(case) if child["kind"] == "InferenceService"]:
            name = isvc["metadata"]["name"]
            cases[f"{case}/{name}"] = runtime_args + isvc["spec"]["predictor"]["model"]["args"]
            for entry in isvc["spec"].get("canary", []):
                cases[f"{case}/{name}/canary"] = runtime_args + entry["predictor"]["model"]["args"]
    return cases


def test_every_rendered_arg_is_accepted_by_vllms_parser():
    python = require_vllm()
    cases = rendered_args()
    assert cases, "no golden InferenceServices found"
    run = subprocess.run(
        [str(python), str(Path(__file__).with_name("vllm_parse_args.py"))],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, run.stderr[-3000:]
    results = json.loads(lines[-1].removeprefix("RESULTS "))
    rejected = {name: cases[name] for name, result in results.items() if not result["ok"]}
    assert not rejected, f"vLLM rejects: {rejected}\n{run.stderr[-3000:]}"
    assert all(result["runner"] == "pooling" for result in results.values())
