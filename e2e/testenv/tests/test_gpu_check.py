"""`make gpu-check` (e2e/suites/gpu: preflight.py, plan.py, check.py) without a GPU: its preflight needs the
standard library alone and stops at once, in one line, naming what is missing; its model is of real size; it
serves the GPU predictor's rendered command line unchanged; and its whole run, the scheduler's traffic shapes
included, works end to end on vLLM's CPU build (--cpu-rehearsal, a small model)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from suites.gpu import plan, preflight

from reward_testing import versions
from reward_testing.paths import REPO
from reward_testing.scoring_cases import SPEC_TEMPLATE
from reward_testing.tiny_model_maker import VOCAB_SIZE
from reward_testing.vllm import VLLM_VERSION, require_vllm
from reward_testing.vllm_server import DEVICE_SETTINGS, predictor_command

SCRIPT = REPO / "e2e" / "suites" / "gpu" / "preflight.py"  # what `make gpu-check` runs


def check(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The script as `make gpu-check` runs it (its temporary folder under the test's, where given)."""
    clean = {key: value for key, value in os.environ.items() if key not in ("VLLM_PYTHON", "GATEWAY_PYTHON")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == preflight.MISSING_EXIT, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("gpu-check: cannot run: ")
    return lines[0]


def test_without_cuda_it_stops_within_seconds_naming_it():
    """Under the CPU build of the pinned vLLM (its torch, PyPI's CUDA build, sees no CUDA device: none
    is made visible, should the machine have one)."""
    python = str(require_vllm())
    started = time.monotonic()
    line = one_line(check({"VLLM_PYTHON": python, "CUDA_VISIBLE_DEVICES": ""}))
    assert time.monotonic() - started < 90  # an import of torch and vLLM, nothing started
    assert f"no CUDA device: torch {versions.TORCH}" in line and python in line
    assert "is its cpu build, not a CUDA build" in line
    assert "pin" not in line  # the interpreter's vLLM is the pin


def test_without_vllm_or_torch_it_names_both():
    line = one_line(check({"VLLM_PYTHON": sys.executable}))
    assert f"no vLLM importable in {sys.executable}" in line and f"vLLM {VLLM_VERSION} is needed" in line
    assert "no torch importable" in line


def test_a_path_that_is_no_interpreter_is_named():
    assert one_line(check({"VLLM_PYTHON": "/nonexistent/python"})) == (
        "gpu-check: cannot run: VLLM_PYTHON=/nonexistent/python is not an executable file"
    )


def bare_venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


def fake_interpreter(tmp_path: Path, vllm_version: str) -> str:
    """A bare Python with a vllm and a torch of the given shape in front: a CUDA build, a device, and
    nothing else."""
    python = bare_venv(tmp_path / "bare")
    site = tmp_path / "site"
    (site / "vllm" / "platforms").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(f"__version__ = {vllm_version!r}\n")
    (site / "vllm" / "platforms" / "__init__.py").write_text(
        "class _Cuda:\n    device_type = 'cuda'\ncurrent_platform = _Cuda()\n"
    )
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = {versions.TORCH!r}\n"
        "class version:\n    cuda = '12.9'\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return True\n"
    )
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {python} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_another_release_is_named(tmp_path):
    line = one_line(check({"VLLM_PYTHON": fake_interpreter(tmp_path, "0.31.1")}))
    assert f"vLLM 0.31.1 in {tmp_path}/python, but the pin is {VLLM_VERSION}" in line
    assert "CUDA device" not in line


def test_a_local_version_label_is_the_same_release(tmp_path):
    """<the pin>+cu129 is the pin; what is still missing (the fake has no transformers) is named instead."""
    line = one_line(check({"VLLM_PYTHON": fake_interpreter(tmp_path, f"{VLLM_VERSION}+cu129")}))
    assert "pin" not in line and "CUDA" not in line
    assert "lacks transformers, tokenizers, safetensors, yaml, httpx, aiohttp (the check's own needs)" in line


def test_the_gateway_interpreter_lacking_its_dependencies_is_named(tmp_path):
    """The lent machine has no venv of ours: the gateway runs on GATEWAY_PYTHON or the vLLM interpreter."""
    bare = bare_venv(tmp_path / "bare")
    line = one_line(check({"VLLM_PYTHON": sys.executable, "GATEWAY_PYTHON": str(bare)}))
    assert f"the gateway's interpreter {bare} lacks orjson, httptools, fastapi" in line


def test_the_model_is_real_size():
    """Qwen3-0.6B's shape: 0.6B parameters, its vocabulary holding the tests' tokenizer."""
    shape = plan.REAL_SHAPE
    assert plan.parameter_count(shape) == 596_050_944
    assert shape["vocab_size"] >= VOCAB_SIZE + 8  # the tokenizer's ids (its specials are among the 512)
    assert shape["num_attention_heads"] * shape["head_dim"] == 2048
    assert 100_000 < plan.parameter_count(plan.REHEARSAL_SHAPE) < 5_000_000


def test_transformers_counts_the_same_parameters():
    """The configs as transformers builds them (on the meta device: no memory, no time)."""
    script = (
        "import json, sys, torch\n"
        # as the preflight runs the check: the repository's packages on the path, and the check's folder
        f"sys.path[:0] = {[str(SCRIPT.parent), *map(str, preflight.SOURCE_PATHS)]!r}\n"
        "import plan\n"
        "from transformers import Qwen3ForSequenceClassification\n"
        "from reward_testing import tiny_model_maker as maker\n"
        "counts = {}\n"
        "for name in ('REAL_SHAPE', 'REHEARSAL_SHAPE'):\n"
        "    shape = getattr(plan, name)\n"
        "    tokenizer = maker.make_tokenizer(model_max_length=shape['max_position_embeddings'])\n"
        "    config = plan.model_config(shape, 'bfloat16', tokenizer)\n"
        "    with torch.device('meta'):\n"
        "        model = Qwen3ForSequenceClassification(config)\n"
        "    counts[name] = [sum(p.numel() for p in model.parameters()), plan.parameter_count(shape),\n"
        "                    config.architectures, config.num_labels, len(tokenizer)]\n"
        "print('RESULTS ' + json.dumps(counts))\n"
    )
    run = subprocess.run([str(require_vllm()), "-c", script], capture_output=True, text=True, timeout=300)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, run.stderr[-3000:]
    for counted, computed, architectures, labels, vocabulary in json.loads(lines[-1][8:]).values():
        assert counted == computed
        assert architectures == [plan.ARCHITECTURE] and labels == 1 and vocabulary == VOCAB_SIZE


def test_vllm_runs_the_gpu_predictors_rendered_command_line_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_PYTHON", sys.executable)
    rendered = plan.render(1, "bfloat16", tmp_path)
    predictor = rendered.predictor
    assert predictor["runtime"] == "vllm-reward"  # the CUDA runtime
    assert predictor["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    command = predictor_command(rendered.isvc, Path("/models/m"), 8080)
    assert command == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--port=8080",
        "--model=/models/m",
        "--served-model-name=gpu-check",
        "--runner=pooling",
        "--convert=classify",
        '--pooler-config={"pooling_type":"LAST","task":"classify","use_activation":false}',
        "--tensor-parallel-size=1",
        "--dtype=bfloat16",
        f"--chat-template={rendered.template_file}",
    ]
    assert DEVICE_SETTINGS["cuda"] == ([], {})  # nothing added on a GPU: no --enforce-eager, no KV cache size
    assert rendered.template_file.read_text() == SPEC_TEMPLATE
    container = rendered.isvc["spec"]["transformer"]["containers"][0]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["REWARD_GATEWAY_CHAT_TEMPLATE_FILE"] == str(rendered.template_file)
    assert env["REWARD_GATEWAY_CHAT_TEMPLATE_MODE"] == "gateway"
    assert rendered.gateway_cpus == 1


def test_the_sleep_mode_step_serves_the_same_command_line_plus_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_PYTHON", sys.executable)
    rendered = plan.render(1, "bfloat16", tmp_path)
    plain = predictor_command(rendered.isvc, Path("/models/m"), 8080)
    sleepy = predictor_command(plan.with_sleep_mode(rendered).isvc, Path("/models/m"), 8080)
    assert sleepy == [*plain, "--enable-sleep-mode"]
    assert "--enable-sleep-mode" not in rendered.predictor["args"]  # the measured rendering is left as it is
    assert plan.SLEEP_ENV == {"VLLM_SERVER_DEV_MODE": "1"}  # /sleep and /wake_up are dev-mode endpoints


def test_the_parity_batch_is_what_trainers_send():
    batch = plan.parity_batch()
    assert len(batch.items) == 2 + 2 * plan.GROUP and len(batch.queries) == 8
    assert len(batch.references) == len(batch.items) + len(batch.queries)
    groups = [item.get("group") for item in batch.items]
    assert groups.count("g0") == groups.count("g1") == plan.GROUP
    assert all(query.startswith("<s>### user:\n") for query in batch.queries)


def test_the_tolerance_grows_with_the_score_and_is_tighter_in_float32():
    assert plan.within(1.0 + 0.049, 1.0, "bfloat16") and not plan.within(1.0 + 0.051, 1.0, "bfloat16")
    assert not plan.within(1.0 + 0.003, 1.0, "float32")
    assert plan.compare([0.5, 1.0], [0.5], "bfloat16") == (float("inf"), False)


def test_the_scheduler_runs_at_a_gpus_scale_and_the_rehearsal_at_a_small_one():
    """Thousands of requests a side on a GPU (a few seconds each at thousands of scores/s); a few dozen
    in the rehearsal, so it stays quick on the CPU build; --scheduler-scale changes the counts only."""
    gpu = plan.settings(preflight.parse([]))
    rehearsal = plan.settings(preflight.parse(["--cpu-rehearsal"]))
    assert 512 * gpu.scheduler[0] >= 4096 and gpu.scheduler[1] <= 10
    assert 512 * rehearsal.scheduler[0] <= 64 and rehearsal.scheduler[1] <= 2
    assert plan.settings(preflight.parse(["--scheduler-scale", "2"])).scheduler == (2.0, gpu.scheduler[1])


def test_the_scheduler_bench_needs_only_what_the_vllm_interpreter_has():
    """gpu-check runs reward_testing.scheduler_bench under the CUDA vLLM's interpreter, without our venv:
    what it imports, through reward_testing's modules too, is the standard library, CHECK_MODULES, or
    uvloop (optional, vLLM's)."""
    allowed = set(sys.stdlib_module_names) | set(preflight.CHECK_MODULES) | {"uvloop", "reward_testing"}
    pending, seen, found = ["scheduler_bench"], set(), set()
    while pending:
        name = pending.pop()
        seen.add(name)
        tree = ast.parse((REPO / "testing" / "reward_testing" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            for module in modules:
                found.add(module.split(".")[0])
                local = module.removeprefix("reward_testing.")
                if module.startswith("reward_testing.") and local not in seen:
                    pending.append(local)
    assert found - allowed == set(), seen


@pytest.mark.timeout(900)
def test_a_cpu_rehearsal_runs_every_step_end_to_end():
    """Every step on vLLM's CPU build with a small model of the same architecture: parity with
    transformers through both routes, the forwarding benchmark's figures, and the scheduler's tables and
    summary lines with what they are for."""
    python = str(require_vllm())
    # a short folder: vLLM's IPC sockets live under it, and a socket's path holds 107 bytes at most
    short = tempfile.mkdtemp(prefix="gc-", dir="/tmp")
    try:
        run = check(
            {"VLLM_PYTHON": python, "GATEWAY_PYTHON": sys.executable, "GPU_CHECK_DIR": short},
            "--cpu-rehearsal",
            timeout=840,
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "parity /v1/rewards" in output and "parity /get_reward" in output
    summary = output[output.index("\nSummary") :]
    assert summary.count("  pass  ") == 2 and "FAIL" not in summary
    assert "bench per sample" in summary and "bench groups of 8" in summary
    # the scheduler's four shapes through the three gateways, their tables and their summary lines
    assert output.count("gateway coalesce / straight /classify: throughput") == 3
    for line in ("scheduler per sample", "scheduler verl interleaved", "scheduler groups of 8", "scheduler fair share"):
        assert f"  {line}  " in summary
    assert summary.count("throughput vs straight (") == 3 and summary.count("(goal: coalesce >= ") == 3
    assert "; prefix hits: straight " in summary
    assert "light client's p99 vs alone (" in summary and "(goal: on <= 2x)" in summary
    assert "requests failed" not in summary
    assert plan.SCHEDULER_GOALS in output and "not built yet" not in output
    assert "sleep mode: skipped (a GPU only" in output


def _imports(path: Path) -> tuple[set[str], list[str]]:
    """The top-level packages a file imports, and the functions that import inside their bodies."""
    tree = ast.parse(path.read_text())
    found, inside = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            isinstance(inner, ast.Import | ast.ImportFrom) for inner in ast.walk(node)
        ):
            inside.append(node.name)
    return found, inside


def test_the_preflight_runs_on_the_standard_library_and_the_run_imports_at_its_top():
    """Two programs: the preflight on any Python 3 (nothing of ours is installed on a lent machine), the run under
    the vLLM interpreter, its imports where a reader looks for them."""
    found, inside = _imports(SCRIPT)
    assert found - set(sys.stdlib_module_names) == {"reward_testing"} and not inside  # its versions.py: stdlib
    for name in ("plan.py", "check.py"):
        assert _imports(SCRIPT.with_name(name))[1] == [], name
    assert set(plan.TOLERANCES) == set(preflight.DTYPES)
