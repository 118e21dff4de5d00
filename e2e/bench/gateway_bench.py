"""Scores per second through the reward gateway vs straight to the backend, at concurrency 64.

Starts the fake vLLM (runtimes/gateway/tests) and the gateway (`python -m
reward_gateway`, on kserve's model server) as processes, sends requests from 64
concurrent clients straight to the fake and through the gateway, and prints
throughput, p50/p99 latency and the ratios, for one item per request (OpenRLHF,
verl) and for GRPO groups of 8, against a fake with a model's latency (the goal:
>= 90% of the backend's throughput, <= 5 ms added at p99) and against a
zero-latency fake (the gateway's own ceiling).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import aiohttp
import httpx
import jinja2

from testenv.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 64
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "4000"))


# In production the gateway has CPUs of its own (the transformer pod), apart from
# the trainers and from vLLM. On a machine with two or more CPUs the gateway gets
# the last one, and the load generator and the fake vLLM share the rest, in both
# runs alike, so the ratio measures the gateway rather than contention.
CPUS = sorted(os.sched_getaffinity(0))
GATEWAY_CPUS = set(CPUS[-1:]) if len(CPUS) >= 2 else set(CPUS)
CLIENT_CPUS = set(CPUS[:-1]) if len(CPUS) >= 2 else set(CPUS)


def start(command: list[str], env: dict[str, str], url: str, probe: str, cpus: set[int]) -> subprocess.Popen:
    # Logs go to a file: an unread pipe fills up under load and stalls the server.
    # Kept only when start-up fails (the message names it); removed after a run.
    log = tempfile.NamedTemporaryFile(prefix="gateway-bench-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    process.log_path = Path(log.name)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{command} did not start; see {log.name}:\n{Path(log.name).read_text()[-2000:]}")


async def load(url: str, path: str, body, model_time) -> tuple[float, list[float]]:
    """Requests/s and each request's latency beyond the fake model's own delay.

    The fake's delay is a function of the first text it receives; both runs send
    it the same texts, so subtracting ``model_time(i)`` leaves the HTTP, queueing
    and gateway time that the two runs differ in, without the delay's spread.
    """
    # aiohttp, not httpx, drives the load: on two cores httpx's own overhead
    # would cap both runs and hide the gateway's cost.
    latencies: list[float] = []
    queue = iter(range(REQUESTS))
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:

        async def worker():
            for i in queue:
                started = time.perf_counter()
                async with client.post(path, json=body(i)) as answer:
                    answer.raise_for_status()
                    await answer.read()
                latencies.append(time.perf_counter() - started - model_time(i))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return REQUESTS / (time.perf_counter() - began), sorted(latencies)


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


GROUP = 8  # GRPO-style: completions of one prompt scored together
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
# A real vLLM answers in tens to thousands of ms (a batch forward pass); 50 ms
# base (0-200 ms by text) stands for a small reward model and keeps the gateway's
# share of the time large. Real 7-8B reward models are slower still.
MODEL_DELAY_MS = float(os.environ.get("BENCH_BACKEND_DELAY_MS", "50"))
GOAL_RATIO, GOAL_ADDED_P99_MS = 0.90, 5.0


def report(title: str, items: int, direct, through, judge: bool) -> None:
    print(f"\n  {title} ({items} item(s) per request, concurrency {CONCURRENCY}, {REQUESTS} requests)")
    print("    latency beyond the model's own delay:")
    for name, (rate, lat) in (("backend", direct), ("gateway", through)):
        print(
            f"    {name:8} {rate * items:8.0f} scores/s   "
            f"p50 {percentile(lat, 0.5):6.1f} ms   p99 {percentile(lat, 0.99):6.1f} ms"
        )
    ratio = through[0] / direct[0]
    added_p50 = percentile(through[1], 0.5) - percentile(direct[1], 0.5)
    added_p99 = percentile(through[1], 0.99) - percentile(direct[1], 0.99)
    print(f"    ratio    {ratio:.2f} of the backend's throughput")
    print(f"    added    {added_p50:.1f} ms at p50, {added_p99:.1f} ms at p99")
    if judge:
        met = ratio >= GOAL_RATIO and added_p99 <= GOAL_ADDED_P99_MS
        verdict = "met" if met else "NOT met"
        print(f"    goal     >= {GOAL_RATIO:.2f} and <= {GOAL_ADDED_P99_MS:g} ms added at p99: {verdict}")


def run_profile(delay_ms: float, title: str, judge: bool) -> None:
    backend_port, gateway_port = free_port(), free_port()
    backend_cmd = [
        sys.executable,
        "-c",
        "import uvicorn, gateway_fake_vllm as f; "
        f"uvicorn.run(f.FakeVllm(delay_s={delay_ms / 1000}).app, port={backend_port}, log_level='warning')",
    ]
    tests_dir = str(ROOT / "runtimes/gateway/tests")
    backend = start(
        backend_cmd,
        {"PYTHONPATH": os.pathsep.join([tests_dir, str(ROOT / "e2e")])},
        f"http://127.0.0.1:{backend_port}",
        "/health",
        CLIENT_CPUS,
    )
    gateway_env = {
        "REWARD_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{backend_port}",
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(gateway_port),
        # render here, so a group goes to vLLM as one call
        "REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway",
        "REWARD_GATEWAY_CHAT_TEMPLATE": TEMPLATE,
    }
    gateway = start(
        [sys.executable, "-m", "reward_gateway"],
        gateway_env,
        f"http://127.0.0.1:{gateway_port}",
        "/health",
        GATEWAY_CPUS,
    )
    backend_url, gateway_url = f"http://127.0.0.1:{backend_port}", f"http://127.0.0.1:{gateway_port}"
    print(f"\n{title}: fake vLLM {delay_ms:g} ms base delay per call (0-4x by text)")

    def model_time(first_text: str) -> float:
        return delay_ms / 1000 * (zlib.crc32(first_text.encode()) % 5)  # the fake's own rule

    template = jinja2.Template(TEMPLATE)

    def rendered(i: int) -> list[str]:
        """The texts the gateway sends upstream for group i, so the direct run sends the same."""
        return [
            template.render(messages=[{"role": "user", "content": f"prompt {i}"}, {"role": "assistant", "content": a}])
            for a in (f"answer {k}" for k in range(GROUP))
        ]

    try:
        single = (
            asyncio.run(
                load(
                    backend_url,
                    "/classify",
                    lambda i: {"model": "rm", "input": [f"text {i}"], "use_activation": False},
                    lambda i: model_time(f"text {i}"),
                )
            ),
            asyncio.run(
                load(gateway_url, "/get_reward", lambda i: {"query": [f"text {i}"]}, lambda i: model_time(f"text {i}"))
            ),
        )
        grouped = (
            asyncio.run(
                load(
                    backend_url,
                    "/classify",
                    lambda i: {"model": "rm", "input": rendered(i)},
                    lambda i: model_time(rendered(i)[0]),
                )
            ),
            asyncio.run(
                load(
                    gateway_url,
                    "/v1/rewards",
                    lambda i: {
                        "items": [
                            {"prompt": f"prompt {i}", "response": f"answer {k}", "group": f"g{i}"} for k in range(GROUP)
                        ]
                    },
                    lambda i: model_time(rendered(i)[0]),
                )
            ),
        )
    finally:
        for process in (gateway, backend):
            process.terminate()
            process.wait(timeout=30)
            process.log_path.unlink(missing_ok=True)
    report("OpenRLHF/verl style: /get_reward vs /classify", 1, *single, judge=judge)
    report("GRPO group: /v1/rewards vs /classify", GROUP, *grouped, judge=judge)


def main() -> None:
    os.sched_setaffinity(0, CLIENT_CPUS)
    print(f"CPUs: gateway {sorted(GATEWAY_CPUS)}, load generator and fake vLLM {sorted(CLIENT_CPUS)}")
    run_profile(MODEL_DELAY_MS, "Model-like backend (the goal is judged here; BENCH_BACKEND_DELAY_MS)", judge=True)
    run_profile(0, "Zero-latency backend (the gateway's own ceiling, no goal)", judge=False)


if __name__ == "__main__":
    main()
