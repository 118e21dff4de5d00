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

7. on a GPU (``--no-sleep-mode`` skips it): vLLM again with the same command line and its sleep mode
   enabled, one reward, ``/sleep?level=1``, ``/wake_up``: the GPU memory asleep and awake, each call's
   time, the time to the first reward after the wake and whether that reward is the one before the sleep.

Steps 5 to 7 print figures and ratios, never asserted: SCHEDULER_GOALS says what 6 is for.

Where something is missing (no CUDA device, no vLLM, another release, the gateway's dependencies) it
stops within seconds with one line naming it, exit status 2. Parity failing: exit status 1.

``--cpu-rehearsal`` runs the same steps here, on the CPU build of vLLM with a small model of the same
architecture (float32, ``resources.gpus: 0``, the CPU runtime's settings): a check of this script,
not a GPU result.

Two programs: this one, the preflight, runs on any Python 3 with the standard library alone (the machine
has no venv of ours); with nothing missing it runs ``check.py`` under the vLLM interpreter, which imports
what it uses (torch, transformers, vLLM, httpx, the repository's packages) at its top. ``plan.py`` holds
what the run is, decided without a GPU (the model's shape, the rendering, the parity batch, the
tolerances and the settings), so the unit tests read it here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
# The repository's own packages, whatever PYTHONPATH the caller set: the lent machine has no venv of ours
SOURCE_PATHS = [REPO / "operator", REPO / "runtimes" / "gateway", REPO / "testing"]
for _path in reversed(SOURCE_PATHS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from reward_testing.versions import VLLM as VLLM_VERSION  # noqa: E402  (standard library only)

CHECK = Path(__file__).resolve().with_name("check.py")  # the run, under the vLLM interpreter
GATEWAY_PYTHON_ENV = "GATEWAY_PYTHON"
MISSING_EXIT = 2
FAILED_EXIT = 1
DTYPES = ("bfloat16", "float16", "float32")  # plan.TOLERANCES has one for each

# What the check itself imports under the vLLM interpreter (vLLM's own dependencies bring them)
CHECK_MODULES = ("torch", "transformers", "tokenizers", "safetensors", "yaml", "httpx", "aiohttp")
# What `python -m reward_gateway` imports (pyproject.toml: the package's and the gateway extra's)
GATEWAY_MODULES = ("orjson", "httptools", "fastapi", "pydantic", "uvicorn", "jinja2", "prometheus_client", "yaml")

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


# wall-clock: the preflight and the run (under the vLLM interpreter) count from one start
STARTED = float(os.environ.get("GPU_CHECK_STARTED", time.time()))


def progress(message: str) -> None:
    print(f"[gpu-check {time.time() - STARTED:6.1f}s] {message}", flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, which the run (check.py) reads again."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pin", default=VLLM_VERSION, help="the vLLM release required (VLLM_VERSION in versions.env)")
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    parser.add_argument("--requests", type=int, default=0, help="measured requests per benchmark run")
    parser.add_argument(
        "--scheduler-scale",
        type=float,
        default=0,
        help="multiplies the scheduler's request counts (default: the device's, plan.SCHEDULER_SCALE)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (model, logs)")
    parser.add_argument(
        "--cpu-rehearsal", action="store_true", help="run every step on vLLM's CPU build with a small model"
    )
    parser.add_argument(
        "--no-sleep-mode", action="store_true", help="skip step 7, vLLM's sleep mode (a GPU only; about a minute)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    arguments = parse(given)
    try:
        python, gateway_python, facts = preflight(arguments.pin, need_cuda=not arguments.cpu_rehearsal)
    except Missing as missing:
        print(f"gpu-check: cannot run: {missing}", file=sys.stderr, flush=True)
        return MISSING_EXIT
    progress(f"found vLLM {facts['vllm']} and torch {facts['torch']} in {python}; the gateway runs on {gateway_python}")
    paths = [str(path) for path in SOURCE_PATHS]
    env = {
        **os.environ,
        "GPU_CHECK_STARTED": str(STARTED),
        "VLLM_PYTHON": python,
        GATEWAY_PYTHON_ENV: gateway_python,
        "PYTHONPATH": os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    sys.stdout.flush()
    os.execve(python, [python, str(CHECK), *given], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
