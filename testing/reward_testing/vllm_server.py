"""A real vLLM (the pinned CPU build) as a local process, started as KServe starts the predictor:
the ClusterServingRuntime's command and args, then the args the operator rendered.

Added for a test on the CPU: eager mode (starts in 20-35 s; torch.compile takes longer), a 128 MiB KV
cache (unset, vLLM sizes it from most of the machine's memory), every temporary and cache file in the
test's own folder, and loopback only.
One vLLM takes about 3 GB: start few, and share them (module-scoped fixtures).

On a GPU (``device="cuda"``, e2e/suites/gpu) nothing is added to the rendered command line: the
engine runs as a GPU predictor would (CUDA graphs, torch.compile, the KV cache from vLLM's
``--gpu-memory-utilization``), only its files and its address are kept local.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from reward_testing.paths import REPO
from reward_testing.ports import free_port
from reward_testing.vllm import require_vllm
from reward_testing.waiting import wait_until

CPU_ARGS = ["--enforce-eager", "--kv-cache-memory-bytes=128M"]
# device -> (what is added after the rendered args, what is added to the environment)
DEVICE_SETTINGS = {
    "cpu": (CPU_ARGS, {"VLLM_TARGET_DEVICE": "cpu"}),
    "cuda": ([], {}),
}
START_TIMEOUT_S = 360  # 20-35 s alone on two idle cores; minutes beside builds and other vLLMs


@dataclass
class VllmServer:
    url: str
    log: Path
    process: subprocess.Popen
    args: list[str]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


def predictor_command(isvc: dict, model_dir: Path, port: int, runtime: str = "vllm-reward") -> list[str]:
    """The predictor's command line as KServe makes it: the runtime's command and args (``--port`` and
    ``--model`` pointed here), then the InferenceService's rendered args."""
    manifest = yaml.safe_load((REPO / "runtimes" / f"{runtime}.yaml").read_text())
    container = manifest["spec"]["containers"][0]
    args = []
    for arg in container["args"]:
        if arg.startswith("--port="):
            arg = f"--port={port}"
        elif arg.startswith("--model="):
            arg = f"--model={model_dir}"
        args.append(arg)
    rendered = isvc["spec"]["predictor"]["model"]["args"]
    return [str(require_vllm()), *container["command"][1:], *args, *rendered]


def runtime_env(runtime: str) -> dict[str, str]:
    """The literal environment of the runtime's container (KServe puts the InferenceService's after it)."""
    manifest = yaml.safe_load((REPO / "runtimes" / f"{runtime}.yaml").read_text())
    env = manifest["spec"]["containers"][0].get("env", [])
    return {item["name"]: item["value"] for item in env if "value" in item}


def predictor_env(isvc: dict) -> dict[str, str]:
    """The literal environment the operator rendered for the predictor (values only)."""
    env = isvc["spec"]["predictor"]["model"].get("env", [])
    return {item["name"]: item["value"] for item in env if "value" in item}


@contextmanager
def run_vllm(
    isvc: dict, model_dir: Path, workdir: Path, extra_env: dict[str, str] | None = None, device: str = "cpu"
) -> Iterator[VllmServer]:
    """Serve ``model_dir`` with the predictor of the rendered InferenceService ``isvc``; yields once
    ``/health`` answers 200, and stops the server (its whole process group) after."""
    with started_vllm(isvc, model_dir, workdir, extra_env, device) as server:
        wait_healthy(server)
        yield server


@contextmanager
def started_vllm(
    isvc: dict,
    model_dir: Path,
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    device: str = "cpu",
    runtime: str = "vllm-reward",
) -> Iterator[VllmServer]:
    """As ``run_vllm``, but yields at once: start several, then ``wait_healthy`` on each (they load
    side by side). ``runtime``: the ClusterServingRuntime whose command and args come first
    (``vllm-generate`` for an RLHFPipeline's actor and reference)."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    device_args, device_env = DEVICE_SETTINGS[device]
    command = [*predictor_command(isvc, model_dir, port, runtime), "--host=127.0.0.1", *device_args]
    env = {
        **os.environ,
        **runtime_env(runtime),
        **predictor_env(isvc),
        **device_env,
        "VLLM_HOST_IP": "127.0.0.1",
        "TMPDIR": str(workdir / "tmp"),
        "HOME": str(workdir),  # the runtime says /tmp: a pod's own
        "VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
        "HF_HOME": str(workdir / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        **(extra_env or {}),
    }
    log = workdir / "vllm.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        yield VllmServer(f"http://127.0.0.1:{port}", log, process, command)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=10)


def wait_healthy(server: VllmServer, timeout: float = START_TIMEOUT_S) -> None:
    """Until vLLM's /health answers 200; fails with its log's tail if it exits first."""

    def healthy() -> bool:
        assert server.alive(), f"vLLM exited {server.process.returncode}:\n{server.log_text()[-4000:]}"
        try:
            return httpx.get(f"{server.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until("vLLM's /health", healthy, timeout=timeout, interval=0.5)
