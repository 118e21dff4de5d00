"""The gateway as a scheduler, against a real vLLM (the pinned CPU build): figures and ratios.

Makes a random-weight sequence reward model bigger than the tests' (BENCH_SHAPE: 4 layers, hidden
512), serves it with vLLM started as KServe starts the predictor (the operator's rendered args), and
puts three gateways in front of it, each started with the operator's rendered environment:

- ``forward``: coalescing off (the gateway's behaviour before it could merge);
- ``coalesce``: coalescing on, with the gateway's default settings (fair share on);
- ``fifo``: coalescing on, fair share off (first come, first served).

One load generator (aiohttp, closed loop of C workers over a fixed list) sends each traffic shape
straight to vLLM's ``/classify`` (one call per request, as a trainer's own client would) and through
a gateway. Every side gets texts of its own (same lengths, other words), so vLLM's prefix cache
never carries one side's work to the next; the prefix-cache ratio is read from vLLM's own
``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total`` around each side.

Traffic shapes (issue "The gateway as a scheduler"):
1. OpenRLHF: 64 concurrent clients, one sample per request.
2. verl per sample: 16 prompts x 8 completions, each completion its own request, interleaved.
3. TRL: groups of 8 completions in one request (``/v1/rewards``).
4. Fair share: a light client at 0.4 of the gateway's measured capacity, a flooding one at 4x the
   light one's rate (open loop, so the flood's backlog grows), with fair share on (``coalesce``)
   and off (``fifo``); the light client's p99 against its p99 alone.

Printed, never asserted. BENCH_SCALE (default 1) multiplies the request counts.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from reward_operator.render import render_reward_model
from reward_testing.gateway_process import gateway_process, rendered_gateway
from reward_testing.ports import free_port
from reward_testing.prometheus_text import sample_sum
from reward_testing.tiny_model_maker import WORD_LIST
from reward_testing.tiny_models import make_tiny_models
from reward_testing.vllm_server import started_vllm, wait_healthy

# BENCH_MODEL picks the model: "bench" (default) spends most of a call in compute on a CPU; "tiny"
# (the tests' model, hidden 128 over 2 layers) spends most of it in vLLM's per-request work, as a
# GPU does with a real reward model, which is the regime coalescing is for.
SHAPES = {
    "bench": {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,  # head_dim 32, which vLLM's CPU attention supports
        "num_key_value_heads": 4,
    },
    "tiny": {},
}
BENCH_MODEL = os.environ.get("BENCH_MODEL", "bench")
BENCH_SHAPE = SHAPES[BENCH_MODEL]
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
WORDS = WORD_LIST.split()
FAIR_SECONDS = 12.0 * SCALE
GATEWAYS = {
    "forward": {"REWARD_GATEWAY_COALESCE": "false"},
    "coalesce": {"REWARD_GATEWAY_COALESCE": "true"},
    "fifo": {"REWARD_GATEWAY_COALESCE": "true", "REWARD_GATEWAY_FAIR_SHARE": "false"},
}


def say(message: str) -> None:
    print(f"[bench-vllm {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Texts:
    """Texts no other side has seen: each call draws from a fresh seed."""

    def __init__(self) -> None:
        self.seed = 0

    def sentence(self, words: int) -> str:
        self.seed += 1
        rng = random.Random(self.seed)
        return " ".join(rng.choice(WORDS) for _ in range(words))


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def p(self, percent: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))] * 1000 if ordered else float("nan")


Request = tuple[str, dict, dict[str, str]]  # (url, JSON body, headers)


async def closed_loop(requests: list[Request], concurrency: int) -> Run:
    """``concurrency`` workers take the requests in order, each sending its next when answered."""
    run = Run()
    queue: asyncio.Queue[Request] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            while not queue.empty():
                url, body, headers = queue.get_nowait()
                await _send(session, url, body, headers, run)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        run.elapsed = time.perf_counter() - started
    return run


async def open_loop(streams: list[tuple[Callable[[], Request], float]], seconds: float) -> list[Run]:
    """Each stream sends at its rate (requests/s, evenly spaced) for ``seconds``, whatever the answers;
    its run ends when its last answer is in."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def stream(make: Callable[[], Request], rate: float) -> Run:
            run = Run()
            started = time.perf_counter()
            sent: list[asyncio.Task[None]] = []
            for index in range(int(rate * seconds)):
                await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))  # noqa: TID251 an open loop sends on a clock, whatever the answers
                sent.append(asyncio.ensure_future(_send(session, *make(), run)))
            await asyncio.gather(*sent)
            run.elapsed = time.perf_counter() - started
            return run

        return list(await asyncio.gather(*(stream(make, rate) for make, rate in streams)))


async def _send(session: aiohttp.ClientSession, url: str, body: dict, headers: dict[str, str], run: Run) -> None:
    started = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers) as answer:
            await answer.read()
            ok = answer.status == 200
    except aiohttp.ClientError:
        ok = False
    if ok:
        run.latencies.append(time.perf_counter() - started)
    else:
        run.failures += 1


class Vllm:
    """The served model's URL and its prefix-cache counters."""

    def __init__(self, url: str, model: str):
        self.url = url
        self.model = model

    def classify(self, texts: list[str]) -> Request:
        # As the gateway sends finished text: no BOS added, the raw logit.
        body = {"model": self.model, "input": texts, "add_special_tokens": False, "use_activation": False}
        return f"{self.url}/classify", body, {}

    def prefix_counters(self) -> tuple[float, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return sample_sum(text, "vllm:prefix_cache_hits_total"), sample_sum(text, "vllm:prefix_cache_queries_total")


@dataclass
class Side:
    name: str
    run: Run
    hit_ratio: float | None = None


def measured(vllm: Vllm, name: str, requests: list[Request], concurrency: int) -> Side:
    hits, queries = vllm.prefix_counters()
    run = asyncio.run(closed_loop(requests, concurrency))
    hits_after, queries_after = vllm.prefix_counters()
    ratio = (hits_after - hits) / (queries_after - queries) if queries_after > queries else None
    return Side(name, run, ratio)


def table(title: str, sides: list[Side], unit: str = "requests") -> None:
    print(f"\n  {title}")
    print(f"    {'side':<22}{unit + '/s':>14}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}{'prefix hits':>13}")
    for side in sides:
        hits = f"{side.hit_ratio:.0%}" if side.hit_ratio is not None else "-"
        run = side.run
        print(f"    {side.name:<22}{run.rate:>14.1f}{run.p(50):>10.0f}{run.p(99):>10.0f}{run.failures:>8}{hits:>13}")
    straight = sides[0].run
    for side in sides[1:]:
        print(
            f"    {side.name} / {sides[0].name}: throughput {side.run.rate / straight.rate:.2f}x, "
            f"p99 {side.run.p(99) / straight.p(99):.2f}x"
        )


def single_samples(vllm: Vllm, gateways: dict[str, str], texts: Texts) -> float:
    """OpenRLHF: 64 clients, one sample per request. Returns the coalescing gateway's requests/s."""
    count = int(512 * SCALE)

    def samples() -> list[str]:
        return [texts.sentence(random.Random(i).randint(80, 240)) for i in range(count)]

    sides = [measured(vllm, "straight /classify", [vllm.classify([t]) for t in samples()], 64)]
    for name in ("forward", "coalesce"):
        requests = [(f"{gateways[name]}/get_reward", {"query": [t]}, {}) for t in samples()]
        sides.append(measured(vllm, f"gateway {name}", requests, 64))
    table("64 concurrent clients, 1 sample per request (OpenRLHF /get_reward)", sides)
    return sides[-1].run.rate


def shared_prompts(vllm: Vllm, gateways: dict[str, str], texts: Texts) -> None:
    """verl per sample: 16 prompts x 8 completions, each its own request, interleaved."""
    rounds = max(1, int(4 * SCALE))

    def completions() -> list[str]:
        out = []
        for _ in range(rounds):
            prompts = [texts.sentence(300) for _ in range(16)]
            answers = [[f"{prompt} answer {texts.sentence(20)}" for prompt in prompts] for _ in range(8)]
            out += [text for group in answers for text in group]  # p0c0, p1c0, ..., p15c0, p0c1, ...
        return out

    sides = [measured(vllm, "straight /classify", [vllm.classify([t]) for t in completions()], 64)]
    for name in ("forward", "coalesce"):
        requests = [(f"{gateways[name]}/get_reward", {"query": [t]}, {}) for t in completions()]
        sides.append(measured(vllm, f"gateway {name}", requests, 64))
    table("16 prompts x 8 completions, each completion its own request, interleaved (verl per sample)", sides)


def groups(vllm: Vllm, gateways: dict[str, str], texts: Texts) -> None:
    """TRL: each request a group of 8 completions of one prompt (/v1/rewards)."""
    count = int(96 * SCALE)

    def group() -> list[str]:
        prompt = texts.sentence(120)
        return [f"{prompt} answer {texts.sentence(40)}" for _ in range(8)]

    sides = [measured(vllm, "straight /classify", [vllm.classify(group()) for _ in range(count)], 16)]
    for name in ("forward", "coalesce"):
        requests = [
            (f"{gateways[name]}/v1/rewards", {"items": [{"text": t} for t in group()]}, {}) for _ in range(count)
        ]
        sides.append(measured(vllm, f"gateway {name}", requests, 16))
    table("groups of 8 in one request, 16 concurrent (TRL /v1/rewards)", sides, unit="groups")


def fair_share(gateways: dict[str, str], texts: Texts, capacity: float) -> None:
    """A light client at 0.4 of the capacity, a flooding one at 4x its rate: twice what vLLM can answer."""
    light_rate, heavy_rate = capacity * 0.4, capacity * 1.6

    def client(gateway: str, name: str) -> Callable[[], Request]:
        return lambda: (f"{gateway}/get_reward", {"query": [texts.sentence(160)]}, {"X-Reward-Client": name})

    (alone,) = asyncio.run(open_loop([(client(gateways["coalesce"], "light"), light_rate)], FAIR_SECONDS))
    print(
        f"\n  fair share: light client {light_rate:.1f} req/s, flooding client {heavy_rate:.1f} req/s "
        f"(the coalescing gateway's capacity {capacity:.1f} req/s), {FAIR_SECONDS:g} s"
    )
    print(f"    {'light client':<34}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}{'p99 / alone':>13}")
    print(f"    {'alone':<34}{alone.p(50):>10.0f}{alone.p(99):>10.0f}{alone.failures:>8}{1.0:>13.2f}")
    for label, name in (("beside the flood, fair share on", "coalesce"), ("beside the flood, fair share off", "fifo")):
        streams = [(client(gateways[name], "heavy"), heavy_rate), (client(gateways[name], "light"), light_rate)]
        heavy, light = asyncio.run(open_loop(streams, FAIR_SECONDS))
        print(
            f"    {label:<34}{light.p(50):>10.0f}{light.p(99):>10.0f}{light.failures:>8}"
            f"{light.p(99) / alone.p(99):>13.2f}   (flood: p99 {heavy.p(99):.0f} ms, {heavy.failures} failed)"
        )


@contextmanager
def served_model(workdir: Path) -> Iterator[tuple[Vllm, dict[str, str]]]:
    started = time.perf_counter()
    model = make_tiny_models(workdir / "model", ("sequence",), shape=BENCH_SHAPE)["sequence"]
    shape = BENCH_SHAPE or "the tests' shape"
    say(f"model {BENCH_MODEL!r} made in {time.perf_counter() - started:.0f} s: {shape}")
    reward_model = {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "bench", "namespace": "bench", "uid": "00000000-0000-4000-8000-00000000b0b0"},
        "spec": {
            "model": {"uri": "hf://bench/reward-model", "kind": "sequence", "dtype": "float32"},
            "resources": {"gpus": 0},
        },
    }
    isvc = next(o for o in render_reward_model(reward_model) if o["kind"] == "InferenceService")
    with ExitStack() as stack:
        started = time.perf_counter()
        server = stack.enter_context(started_vllm(isvc, model.path, workdir / "vllm"))
        wait_healthy(server)
        say(f"vLLM {server.url} healthy after {time.perf_counter() - started:.0f} s")
        env, args = rendered_gateway(isvc)
        gateways = {}
        for name, overrides in GATEWAYS.items():
            port = free_port()
            settings = {**env, "REWARD_GATEWAY_PORT": str(port), "REWARD_GATEWAY_UPSTREAM_URL": server.url}
            settings.update(overrides)
            settings.update(_overrides_from_environment())
            log = workdir / f"gateway-{name}.log"
            stack.enter_context(gateway_process(args, settings, port, env["REWARD_GATEWAY_MODEL_NAME"], log))
            gateways[name] = f"http://127.0.0.1:{port}"
        say(f"gateways {', '.join(gateways)} ready")
        yield Vllm(server.url, env["REWARD_GATEWAY_MODEL_NAME"]), gateways


def _overrides_from_environment() -> dict[str, str]:
    """BENCH_GATEWAY_<SETTING>=value sets REWARD_GATEWAY_<SETTING> on every gateway (a settings sweep)."""
    prefix = "BENCH_GATEWAY_"
    return {f"REWARD_GATEWAY_{k[len(prefix) :]}": v for k, v in os.environ.items() if k.startswith(prefix)}


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    say(f"commit {commit}, {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    overrides = _overrides_from_environment()
    if overrides:
        say(f"gateway settings changed for this run: {overrides}")
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp, served_model(Path(tmp)) as (vllm, gateways):
        texts = Texts()
        # A warm-up on every path: vLLM's first calls and the gateways' first connections cost extra.
        asyncio.run(closed_loop([vllm.classify([texts.sentence(100)]) for _ in range(32)], 16))
        for url in gateways.values():
            asyncio.run(closed_loop([(f"{url}/get_reward", {"query": [texts.sentence(100)]}, {})] * 32, 16))
        capacity = single_samples(vllm, gateways, texts)
        shared_prompts(vllm, gateways, texts)
        groups(vllm, gateways, texts)
        fair_share(gateways, texts, capacity)
    say(f"done; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
