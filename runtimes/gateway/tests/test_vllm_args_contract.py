"""The operator's rendered vLLM args, parsed by the pinned vLLM's own `vllm serve` parser."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from testenv.helpers import vllm_python

ROOT = Path(__file__).resolve().parents[3]


def rendered_args() -> dict[str, list[str]]:
    runtime = yaml.safe_load((ROOT / "runtimes/vllm-reward.yaml").read_text())
    runtime_args = [arg.replace("/mnt/models", "/tmp/model") for arg in runtime["spec"]["containers"][0]["args"]]
    cases = {}
    for golden in sorted((ROOT / "operator/tests/golden").glob("*.yaml")):
        isvc = yaml.safe_load(golden.read_text())
        cases[golden.stem] = runtime_args + isvc["spec"]["predictor"]["model"]["args"]
    return cases


@pytest.mark.skipif(vllm_python() is None, reason="no vLLM 0.33.0 interpreter: run `make vllm-venv` or set VLLM_PYTHON")
def test_every_rendered_arg_is_accepted_by_vllms_parser():
    cases = rendered_args()
    assert cases, "no golden InferenceServices found"
    run = subprocess.run(
        [str(vllm_python()), str(Path(__file__).with_name("vllm_parse_args.py"))],
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
