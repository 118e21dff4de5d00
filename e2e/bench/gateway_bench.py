"""Scores per second through the reward gateway vs straight to the backend, at concurrency 64.

Starts the fake vLLM (reward_testing.fake_vllm) and the gateway (`python -m
reward_gateway` with the operator's environment and KServe's arguments, as the
transformer container runs it) as processes, sends requests from 64 concurrent
clients straight to the fake and through the gateway, and prints
throughput, the time each request spent outside the model (p50/p99) and the
ratios, for one item per request (OpenRLHF, verl) and for GRPO groups of 8.

The fake schedules like vLLM (see EngineSteps): texts run in steps of at most
max_num_batched_tokens and each step's answers leave together, so the gateway
meets vLLM's real burst pattern. Three backends:

- vLLM's default token budget on H100/H200 (8192) with 512-token samples: bursts
  of 16. The goal is judged here, on the median of BENCH_TRIALS (3) runs: >= 90%
  of the backend's throughput and <= 5 ms added at p99.
- every request in one step: bursts of 64 requests, the worst case (no goal).
- zero latency: the gateway's own ceiling (no goal).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import jinja2
import uvloop

from reward_testing.paths import REPO
from reward_testing.ports import free_port

CONCURRENCY = 64
GROUP = 8  # GRPO-style: completions of one prompt scored together
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "4000"))
GROUP_REQUESTS = REQUESTS // 4  # 8 texts each: as many texts as 2000 single requests
# Where the goal is judged, each comparison runs this many times and the median
# counts: on a small VM one hiccup moves one run's p99 by several ms.
TRIALS = int(os.environ.get("BENCH_TRIALS", "3"))
WARM_UP_REQUESTS = 4 * CONCURRENCY
GOAL_RATIO, GOAL_ADDED_P99_MS = 0.90, 5.0
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"

# In production the gateway has CPUs of its own (the transformer pod), apart from
# the trainers and from vLLM. On a machine with two or more CPUs the gateway gets
# the last one, and the load generator and the fake vLLM share the rest, in both
# runs alike, so the ratio measures the gateway rather than contention.
CPUS = sorted(os.sched_getaffinity(0))
GATEWAY_CPUS = set(CPUS[-1:]) if len(CPUS) >= 2 else set(CPUS)
CLIENT_CPUS = set(CPUS[:-1]) if len(CPUS) >= 2 else set(CPUS)


@dataclass(frozen=True)
class Backend:
    name: str
    title: str
    engine: str  # Python expression for the fake's engine argument
    judge: bool


def _engine(step_ms: float, tokens_per_step: int, tokens_per_text: int) -> str:
    return (
        f"f.EngineSteps(step_s={step_ms / 1000}, tokens_per_step={tokens_per_step}, tokens_per_text={tokens_per_text})"
    )


STEP_MS = float(os.environ.get("BENCH_STEP_MS", "50"))
TOKENS_PER_STEP = int(os.environ.get("BENCH_TOKENS_PER_STEP", "8192"))
TOKENS_PER_TEXT = int(os.environ.get("BENCH_TOKENS_PER_TEXT", "512"))
BACKENDS = (
    Backend(
        "steps",
        f"vLLM-like steps: {TOKENS_PER_STEP} tokens per {STEP_MS:g} ms step, {TOKENS_PER_TEXT} tokens per text, "
        f"bursts of {TOKENS_PER_STEP // TOKENS_PER_TEXT} texts (goal judged here)",
        _engine(STEP_MS, TOKENS_PER_STEP, TOKENS_PER_TEXT),
        judge=True,
    ),
    Backend(
        "burst",
        f"Worst case: every request in one {STEP_MS:g} ms step, bursts of {CONCURRENCY} requests (no goal)",
        _engine(STEP_MS, CONCURRENCY * GROUP, 1),
        judge=False,
    ),
    Backend("zero", "Zero latency: the gateway's own ceiling (no goal)", "None", judge=False),
)


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
    while time.monotonic() < deadline and process.poll() is None:  # a crash at start-up ends the wait
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)  # noqa: TID251 the pause between two probes of a starting server (a crash ends it)
    process.kill()
    raise SystemExit(f"{command} did not start; see {log.name}:\n{Path(log.name).read_text()[-2000:]}")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)
    process.log_path.unlink(missing_ok=True)  # type: ignore[attr-defined]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    rate: float  # requests per second
    outside: list[float]  # per request: seconds spent outside the model, sorted
    requests: int
    gateway_cpu_s: float  # CPU the gateway spent on them (0 for a direct run)


async def load(
    url: str,
    path: str,
    body: Callable[[int], dict],
    first_text: Callable[[int], str],
    backend_url: str,
    requests: int,
    gateway_pid: int | None = None,
) -> Run:
    """Drive 64 closed-loop clients; each request's time outside the model.

    A request's latency minus the time the fake held it (its residence, which the
    fake reports per first text) is what HTTP, queueing and the gateway cost it:
    the part the gateway can add to. Comparing whole latencies would not show it:
    with vLLM's queue full, time a request spends in the gateway is time it does
    not wait in vLLM's queue.
    """
    # aiohttp, not httpx, drives the load: on two cores httpx's own overhead
    # would cap both runs and hide the gateway's cost.
    latencies: dict[int, float] = {}
    measured_from: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:

        async def worker(queue):
            for i in queue:
                if i == 0:
                    measured_from["cpu"] = cpu_seconds(gateway_pid) if gateway_pid else 0.0
                    measured_from["time"] = time.perf_counter()
                started = time.perf_counter()
                async with client.post(path, json=body(i)) as answer:
                    answer.raise_for_status()
                    await answer.read()
                if i >= 0:
                    latencies[i] = time.perf_counter() - started

        # Requests below 0 warm up and are not measured: the first round opens 64
        # connections at once in both processes, a cost trainers pay once per run
        # (they keep connections alive). One queue, not a warm-up phase and then
        # a measured one: the barrier between them would start the measured phase
        # with all 64 clients at once, a burst no steady trainer makes.
        queue = iter(range(-WARM_UP_REQUESTS, requests))
        await asyncio.gather(*(worker(queue) for _ in range(CONCURRENCY)))
        rate = requests / (time.perf_counter() - measured_from["time"])
        gateway_cpu_s = cpu_seconds(gateway_pid) - measured_from["cpu"] if gateway_pid else 0.0
    async with aiohttp.ClientSession() as client, client.get(backend_url + "/fake/residence") as answer:
        residence = await answer.json()
    return Run(rate, sorted(latencies[i] - residence[first_text(i)] for i in latencies), requests, gateway_cpu_s)


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


@dataclass
class Trial:
    """One direct run and one run through the gateway, of the same requests."""

    direct: Run
    through: Run

    @property
    def ratio(self) -> float:
        return self.through.rate / self.direct.rate

    def added_ms(self, p: float) -> float:
        return percentile(self.through.outside, p) - percentile(self.direct.outside, p)


@dataclass(frozen=True)
class Route:
    title: str
    items: int  # per request
    requests: int
    direct_body: Callable[[int], dict]  # to the fake's /classify
    gateway_path: str
    gateway_body: Callable[[int], dict]
    first_text: Callable[[int], str]  # what the fake sees first for request i


def report(route: Route, trials: list[Trial], judge: bool) -> None:
    print(
        f"\n  {route.title} ({route.items} item(s) per request, concurrency {CONCURRENCY}, {route.requests} requests)"
    )
    print("    time outside the model per request:")
    for number, trial in enumerate(trials, 1):
        if len(trials) > 1:
            print(f"    trial {number}")
        for name, run in (("backend", trial.direct), ("gateway", trial.through)):
            print(
                f"    {name:8} {run.rate * route.items:8.0f} scores/s   "
                f"p50 {percentile(run.outside, 0.5):6.1f} ms   p99 {percentile(run.outside, 0.99):6.1f} ms"
            )
        if len(trials) > 1:
            print(f"    added    {trial.added_ms(0.5):.1f} ms at p50, {trial.added_ms(0.99):.1f} ms at p99")
    # The median of the trials: one hiccup of the machine moves one trial's p99.
    ratio = statistics.median(trial.ratio for trial in trials)
    added_p50 = statistics.median(trial.added_ms(0.5) for trial in trials)
    added_p99 = statistics.median(trial.added_ms(0.99) for trial in trials)
    which = f" (median of {len(trials)} trials)" if len(trials) > 1 else ""
    print(f"    ratio    {ratio:.2f} of the backend's throughput{which}")
    print(f"    added    {added_p50:.1f} ms at p50, {added_p99:.1f} ms at p99{which}")
    cpu_ms = statistics.median(trial.through.gateway_cpu_s / trial.through.requests * 1000 for trial in trials)
    print(
        f"    gateway  {cpu_ms:.2f} ms of CPU per request: one CPU's ceiling {route.items * 1000 / cpu_ms:.0f} scores/s"
    )
    if judge:
        met = ratio >= GOAL_RATIO and added_p99 <= GOAL_ADDED_P99_MS
        verdict = "met" if met else "NOT met"
        print(f"    goal     >= {GOAL_RATIO:.2f} and <= {GOAL_ADDED_P99_MS:g} ms added at p99: {verdict}")


def run_backend(profile: Backend) -> None:
    backend_port, gateway_port = free_port(), free_port()
    backend_cmd = [
        sys.executable,
        "-c",
        # Neither the fake nor the load generator collects garbage during a run:
        # their pauses (20-30 ms on this machine) would land in both runs' p99.
        "import gc, uvicorn, reward_testing.fake_vllm as f; gc.disable(); "
        f"uvicorn.run(f.FakeVllm(engine={profile.engine}).app, port={backend_port}, log_level='warning')",
    ]
    backend_url, gateway_url = f"http://127.0.0.1:{backend_port}", f"http://127.0.0.1:{gateway_port}"
    backend = start(
        backend_cmd,
        {"PYTHONPATH": str(REPO / "testing")},
        backend_url,
        "/health",
        CLIENT_CPUS,
    )
    gateway_env = {
        "REWARD_GATEWAY_UPSTREAM_URL": backend_url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(gateway_port),
        # render here, so a group goes to vLLM as one call
        "REWARD_GATEWAY_CHAT_TEMPLATE_MODE": "gateway",
        "REWARD_GATEWAY_CHAT_TEMPLATE": TEMPLATE,
    }
    # What KServe appends to the transformer's command (the environment wins where both say).
    kserve_args = f"--model_name rm --predictor_host 127.0.0.1:{backend_port} --http_port {gateway_port}".split()
    try:
        command = [sys.executable, "-m", "reward_gateway", *kserve_args]
        gateway = start(command, gateway_env, gateway_url, "/v1/models/rm", GATEWAY_CPUS)
    except BaseException:
        stop(backend)  # not left running, pinned, without garbage collection
        raise
    print(f"\n{profile.title}")

    template = jinja2.Template(TEMPLATE)

    @functools.cache
    def rendered(i: int) -> list[str]:
        """The texts the gateway sends upstream for group i, so the direct run sends the same."""
        return [
            template.render(messages=[{"role": "user", "content": f"prompt {i}"}, {"role": "assistant", "content": a}])
            for a in (f"answer {k}" for k in range(GROUP))
        ]

    # Rendered before the runs: the load generator shares a CPU with the fake,
    # and templating during the direct run only would slow that run alone.
    for i in range(-WARM_UP_REQUESTS, GROUP_REQUESTS):
        rendered(i)

    routes = (
        Route(
            "OpenRLHF/verl style: /get_reward vs /classify",
            1,
            REQUESTS,
            lambda i: {"model": "rm", "input": [f"text {i}"], "use_activation": False},
            "/get_reward",
            lambda i: {"query": [f"text {i}"]},
            lambda i: f"text {i}",
        ),
        Route(
            "GRPO group: /v1/rewards vs /classify",
            GROUP,
            GROUP_REQUESTS,
            lambda i: {"model": "rm", "input": rendered(i)},
            "/v1/rewards",
            lambda i: {
                "items": [{"prompt": f"prompt {i}", "response": f"answer {k}", "group": f"g{i}"} for k in range(GROUP)]
            },
            lambda i: rendered(i)[0],
        ),
    )

    def trial(route: Route) -> Trial:
        direct = asyncio.run(
            load(backend_url, "/classify", route.direct_body, route.first_text, backend_url, route.requests)
        )
        through = asyncio.run(
            load(
                gateway_url,
                route.gateway_path,
                route.gateway_body,
                route.first_text,
                backend_url,
                route.requests,
                gateway.pid,
            )
        )
        return Trial(direct, through)

    trials = TRIALS if profile.judge else 1
    try:
        results = [(route, [trial(route) for _ in range(trials)]) for route in routes]
    finally:
        for process in (gateway, backend):
            stop(process)
    for route, route_trials in results:
        report(route, route_trials, judge=profile.judge)


def main() -> None:
    os.sched_setaffinity(0, CLIENT_CPUS)
    # The load generator's own CPU per request delays every answer it reads, in
    # both runs; uvloop keeps that small next to what is measured.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    gc.disable()  # see the fake's start-up in run_backend
    print(f"CPUs: gateway {sorted(GATEWAY_CPUS)}, load generator and fake vLLM {sorted(CLIENT_CPUS)}")
    chosen = os.environ.get("BENCH_BACKENDS", ",".join(backend.name for backend in BACKENDS)).split(",")
    for profile in BACKENDS:
        if profile.name in chosen:
            run_backend(profile)


if __name__ == "__main__":
    main()
