"""Scores per second through the reward gateway vs straight to the backend, at concurrency 64.

Starts the fake vLLM (runtimes/gateway/tests) and the gateway (`python -m
reward_gateway`, on kserve's model server) as processes, sends one-item
requests from 64 concurrent clients to each, and prints throughput, p50/p99
latency and the ratios. Goal: >= 90% of the backend's throughput, <= 5 ms added at p99.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from testenv.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 64
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "4000"))


def start(command: list[str], env: dict[str, str], url: str, probe: str) -> subprocess.Popen:
    # Logs go to a file: an unread pipe fills up under load and stalls the server.
    log = tempfile.NamedTemporaryFile(prefix="gateway-bench-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{command} did not start; see {log.name}:\n{Path(log.name).read_text()[-2000:]}")


async def load(url: str, path: str, body) -> tuple[float, list[float]]:
    latencies: list[float] = []
    queue = iter(range(REQUESTS))
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker():
            for i in queue:
                started = time.perf_counter()
                answer = await client.post(path, json=body(i))
                answer.raise_for_status()
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return REQUESTS / (time.perf_counter() - began), sorted(latencies)


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


def main() -> None:
    backend_port, gateway_port = free_port(), free_port()
    backend_cmd = [
        sys.executable,
        "-c",
        "import uvicorn, gateway_fake_vllm as f; "
        f"uvicorn.run(f.FakeVllm().app, port={backend_port}, log_level='warning')",
    ]
    tests_dir = str(ROOT / "runtimes/gateway/tests")
    backend = start(backend_cmd, {"PYTHONPATH": tests_dir}, f"http://127.0.0.1:{backend_port}", "/health")
    gateway_env = {
        "REWARD_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{backend_port}",
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(gateway_port),
    }
    gateway = start(
        [sys.executable, "-m", "reward_gateway"], gateway_env, f"http://127.0.0.1:{gateway_port}", "/health"
    )
    try:
        direct = asyncio.run(
            load(
                f"http://127.0.0.1:{backend_port}",
                "/classify",
                lambda i: {"model": "rm", "input": [f"text {i}"], "use_activation": False},
            )
        )
        through = asyncio.run(
            load(f"http://127.0.0.1:{gateway_port}", "/get_reward", lambda i: {"query": [f"text {i}"]})
        )
    finally:
        gateway.terminate()
        backend.terminate()
    for name, (rate, lat) in (("backend", direct), ("gateway", through)):
        print(
            f"{name:8} {rate:8.0f} scores/s   p50 {percentile(lat, 0.5):6.1f} ms   p99 {percentile(lat, 0.99):6.1f} ms"
        )
    print(f"ratio    {through[0] / direct[0]:.2f} of backend throughput (goal >= 0.90)")
    print(f"added    {percentile(through[1], 0.99) - percentile(direct[1], 0.99):.1f} ms at p99 (goal <= 5 ms)")


if __name__ == "__main__":
    main()
