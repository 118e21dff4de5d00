"""A burst against a predictor at zero: the gateway's part of a wake-up, and its held requests.

Starts the gateway (`python -m reward_gateway`, KEDA's scaler on) in front of a
predictor port nothing listens on, opens StreamIsActive on the scaler as KEDA's
operator does, sends a burst of BENCH_WAKE_REQUESTS requests (GRPO groups of 8)
at once, and after BENCH_COLD_START_S (the predictor's cold start, which the
gateway does not control) brings the fake vLLM up on that port. Printed, never
asserted:

- wake: first request sent -> ``true`` read on KEDA's stream (the gateway's part
  of the scale-up decision; KEDA's own part is measured by e2e/suites/keda/test_keda.py);
- held: the peak of reward_gateway_held_requests, and what the holding cost the
  gateway (CPU while it retried, peak RSS);
- release: predictor up (the fake listening, in this process) -> each answer (p50,
  p99, last): held calls learn that vLLM takes connections from a probe every 50 ms,
  then the burst is as fast as the fake answers it (in this process, beside the load
  generator); and the answers by status (every request answered 200 is "nothing lost").

BENCH_WAKE_HELD (default: the burst's size) sets REWARD_GATEWAY_MAX_HELD_REQUESTS;
below the burst's size, the rest are answered 503 at once and counted apart.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
import grpc
import httpx
from gateway_bench import GATEWAY_CPUS, cpu_seconds, start, stop

from reward_gateway.scale.scaler import MESSAGES, stub
from reward_testing.fake_vllm import FakeVllm, serve_in_thread
from reward_testing.ports import free_port

REQUESTS = int(os.environ.get("BENCH_WAKE_REQUESTS", "512"))
HELD = int(os.environ.get("BENCH_WAKE_HELD", str(REQUESTS)))
COLD_START_S = float(os.environ.get("BENCH_COLD_START_S", "5"))
GROUP = 8


def _held_now(gateway_url: str) -> float:
    metrics = httpx.get(f"{gateway_url}/metrics", timeout=5).text
    found = re.search(r'reward_gateway_held_requests\{model="rm"\} (\S+)', metrics)
    return float(found.group(1)) if found else 0.0


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


class KedaStream:
    """StreamIsActive held open as KEDA's operator holds it; notes when ``true`` first comes."""

    def __init__(self, scaler_port: int):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{scaler_port}")
        ref = MESSAGES["ScaledObjectRef"](name="rm-predictor", namespace="bench")
        self.stream = stub(self.channel, "StreamIsActive")(ref)
        self.opened = threading.Event()
        self.woken = threading.Event()
        self.woken_at: float | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for answer in self.stream:
                self.opened.set()
                if answer.result and self.woken_at is None:
                    self.woken_at = time.monotonic()
                    self.woken.set()
        except grpc.RpcError:
            pass  # cancelled at the end

    def close(self) -> None:
        self.stream.cancel()
        self.channel.close()


async def _burst(gateway_url: str, answers: list[tuple[int, float]]) -> None:
    """Every request but the first (i = 0, sent alone before: the wake is timed from it), at once."""
    connector = aiohttp.TCPConnector(limit=REQUESTS)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(i: int) -> None:
            items = [{"text": f"prompt {i} answer {k}", "group": str(i)} for k in range(GROUP)]
            async with session.post(f"{gateway_url}/v1/rewards", json={"items": items}) as response:
                await response.read()
                answers.append((response.status, time.monotonic()))

        await asyncio.gather(*(one(i) for i in range(1, REQUESTS)))


def main() -> None:
    predictor_port, gateway_port, scaler_port = free_port(), free_port(), free_port()
    predictor_url, gateway_url = f"http://127.0.0.1:{predictor_port}", f"http://127.0.0.1:{gateway_port}"
    gateway_env = {
        "REWARD_GATEWAY_UPSTREAM_URL": predictor_url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(gateway_port),
        "REWARD_GATEWAY_SCALER_PORT": str(scaler_port),
        "REWARD_GATEWAY_MAX_HELD_REQUESTS": str(HELD),
        "REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS": str(COLD_START_S + 60),
    }
    command = [sys.executable, "-m", "reward_gateway"]
    gateway = start(command, gateway_env, gateway_url, "/v1/models/rm", GATEWAY_CPUS)
    keda = KedaStream(scaler_port)
    try:
        if not keda.opened.wait(timeout=10):
            raise SystemExit("the gateway's scaler did not answer StreamIsActive")
        answers: list[tuple[int, float]] = []
        cpu_before = cpu_seconds(gateway.pid)

        client = httpx.Client(timeout=600)  # made before the clock starts: it loads a TLS context
        items = [{"text": f"prompt 0 answer {k}", "group": "0"} for k in range(GROUP)]

        def first() -> None:
            with client:
                response = client.post(f"{gateway_url}/v1/rewards", json={"items": items})
            answers.append((response.status_code, time.monotonic()))

        alone = threading.Thread(target=first, daemon=True)
        sent = time.monotonic()
        alone.start()
        if not keda.woken.wait(timeout=10):
            raise SystemExit("no true on KEDA's stream within 10 s of the first request")
        burst = threading.Thread(target=asyncio.run, args=(_burst(gateway_url, answers),), daemon=True)
        burst.start()

        # The predictor's cold start: the gateway holds the burst meanwhile.
        peak = 0.0
        while time.monotonic() - sent < COLD_START_S:
            peak = max(peak, _held_now(gateway_url))
            time.sleep(0.1)  # noqa: TID251 sampling the held gauge during a fixed cold start
        refused_early = sum(1 for status, _ in answers if status == 503)
        held_cpu = cpu_seconds(gateway.pid) - cpu_before

        # In this process: serve_in_thread returns as the fake starts listening, so "up" is exact.
        with serve_in_thread(FakeVllm().app, port=predictor_port):
            up = time.monotonic()
            for thread in (alone, burst):
                thread.join(timeout=COLD_START_S + 120)
    finally:
        keda.close()
        rss = _peak_rss_mib(gateway.pid)
        stop(gateway)

    statuses = Counter(status for status, _ in answers)
    released = sorted(at - up for status, at in answers if status == 200)
    wake_ms = (keda.woken_at - sent) * 1000 if keda.woken_at is not None else float("nan")
    print(f"\nA burst of {REQUESTS} requests x {GROUP} items, predictor at zero (cold start {COLD_START_S:g} s)")
    print(f"  wake: first request -> true on KEDA's stream   {wake_ms:8.1f} ms")
    print(f"  held: peak {peak:.0f} of bound {HELD}; {refused_early} answered 503 at once (over the bound)")
    print(f"        gateway CPU while holding {held_cpu:.2f} s over {COLD_START_S:g} s; peak RSS {rss:.0f} MiB")
    if released:
        p50, p99 = statistics.median(released), released[min(len(released) - 1, int(0.99 * len(released)))]
        print(f"  release: predictor up -> answer  first {released[0] * 1000:.0f} ms, p50 {p50 * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms, last {released[-1] * 1000:.0f} ms")  # fmt: skip
    lost = REQUESTS - len(answers)
    print(f"  answers by status: {dict(sorted(statuses.items()))}; not answered: {lost}")


if __name__ == "__main__":
    main()
