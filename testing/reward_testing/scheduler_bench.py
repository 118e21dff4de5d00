"""The gateway as a scheduler, measured: the issue's four traffic shapes sent straight to a real vLLM
and through gateways in front of it, as tables and as figures a caller can put ratios of in a summary.

Shared by ``make bench-vllm`` (e2e/bench/vllm_bench.py, the CPU build) and ``make gpu-check``
(e2e/suites/gpu, a lent GPU), so both measure the same shapes the same way. gpu-check runs
under the CUDA vLLM's interpreter, which has none of our venv: this module needs the standard
library, aiohttp and httpx only (uvloop where it is there), and reward_testing modules that need no
more.

One load generator (aiohttp, closed loop of C workers over a fixed list) sends each shape straight to
vLLM's ``/classify`` (one call per request, as a trainer's own client would) and through a gateway.
Every side gets texts of its own (same lengths, other words), so vLLM's prefix cache never carries one
side's work to the next; the prefix-cache ratio is read from vLLM's own
``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total`` around each side.

Traffic shapes (issue "The gateway as a scheduler"):
1. OpenRLHF: 64 concurrent clients, one sample per request.
2. verl per sample: 16 prompts x 8 completions, each completion its own request, interleaved.
3. TRL: groups of 8 completions in one request (``/v1/rewards``).
4. Fair share: a light client at 0.4 of the gateway's measured capacity, a flooding one at 4x the
   light one's rate (open loop, so the flood's backlog grows), with fair share on (``coalesce``),
   on without the time bound on a merged call (``count``, where started) and off (``fifo``); the
   light client's p99 against its p99 alone.

The gateways (GATEWAYS: their settings over the rendered environment) are the caller's to start.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import httpx

from reward_testing.prometheus_text import sample_sum
from reward_testing.tiny_model_maker import WORDS

# name -> what each gateway sets over the operator's rendered environment
GATEWAYS = {
    "forward": {"REWARD_GATEWAY_COALESCE": "false"},  # the gateway's behaviour before it could merge
    "coalesce": {"REWARD_GATEWAY_COALESCE": "true"},  # the gateway's default settings: fair share on
    "fifo": {"REWARD_GATEWAY_COALESCE": "true", "REWARD_GATEWAY_FAIR_SHARE": "false"},  # first come, first served
    # fair share on, merged calls bounded by count alone (COALESCE_MAX_CALL_MS=0): what the time bound does
    "count": {"REWARD_GATEWAY_COALESCE": "true", "REWARD_GATEWAY_COALESCE_MAX_CALL_MS": "0"},
}
STRAIGHT = "straight /classify"

Request = tuple[str, dict, dict[str, str]]  # (url, JSON body, headers)
T = TypeVar("T")


@dataclass(frozen=True)
class Scale:
    """How much each shape sends: ``requests`` multiplies the request counts (1: a few hundred a side,
    sized for the CPU build), ``fair_seconds`` is how long each fair-share run sends."""

    requests: float = 1.0
    fair_seconds: float = 12.0

    def count(self, base: int) -> int:
        return max(1, int(base * self.requests))


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """The load generator's event loop: uvloop where installed (vLLM brings it), as the client's own
    cost per request is then smaller than what it measures; asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


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
    first_failure: str = ""  # what the first failed request got: a status and body, or the client's error
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def p(self, percent: float) -> float:
        """The ``percent``-th percentile latency in ms."""
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))] * 1000 if ordered else float("nan")


async def closed_loop(requests: list[Request], concurrency: int, warm_up: int = 0) -> Run:
    """``concurrency`` workers take the requests in order, each sending its next when answered. The first
    ``warm_up`` requests open the connections and are not timed: the clock starts as the first timed
    one is taken (their failures count all the same)."""
    result = Run()
    queue: asyncio.Queue[tuple[int, Request]] = asyncio.Queue()
    for numbered in enumerate(requests):
        queue.put_nowait(numbered)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        started = [time.perf_counter()]

        async def worker() -> None:
            while not queue.empty():
                index, (url, body, headers) = queue.get_nowait()
                if index == warm_up > 0:
                    started[0] = time.perf_counter()
                await _send(session, url, body, headers, result, timed=index >= warm_up)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.elapsed = time.perf_counter() - started[0]
    return result


async def open_loop(streams: list[tuple[Callable[[], Request], float]], seconds: float) -> list[Run]:
    """Each stream sends at its rate (requests/s, evenly spaced) for ``seconds``, whatever the answers;
    its run ends when its last answer is in."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def stream(make: Callable[[], Request], rate: float) -> Run:
            result = Run()
            started = time.perf_counter()
            sent: list[asyncio.Task[None]] = []
            for index in range(int(rate * seconds)):
                await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))  # noqa: TID251 an open loop sends on a clock, whatever the answers
                sent.append(asyncio.ensure_future(_send(session, *make(), result)))
            await asyncio.gather(*sent)
            result.elapsed = time.perf_counter() - started
            return result

        return list(await asyncio.gather(*(stream(make, rate) for make, rate in streams)))


async def _send(
    session: aiohttp.ClientSession, url: str, body: dict, headers: dict[str, str], into: Run, timed: bool = True
) -> None:
    started = time.perf_counter()
    try:
        async with session.post(url, json=body, headers=headers) as answer:
            content = await answer.read()
            failure = "" if answer.status == 200 else f"{answer.status} {content[:300].decode(errors='replace')}"
    except aiohttp.ClientError as error:
        failure = f"{type(error).__name__}: {error}"
    if not failure:
        if timed:
            into.latencies.append(time.perf_counter() - started)
        return
    into.failures += 1
    into.first_failure = into.first_failure or f"{url}: {failure}"


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


@dataclass
class Shape:
    """One traffic shape's sides, straight to vLLM first, then through the gateways."""

    title: str
    sides: list[Side]
    unit: str = "requests"

    def side(self, gateway: str) -> Side:
        return next(side for side in self.sides if side.name == f"gateway {gateway}")

    def versus_straight(self, side: Side) -> tuple[float, float]:
        """``side``'s throughput and p99 latency, each as a multiple of the straight side's."""
        straight = self.sides[0].run
        return side.run.rate / straight.rate, side.run.p(99) / straight.p(99)


def measured(vllm: Vllm, name: str, requests: list[Request], concurrency: int) -> Side:
    hits, queries = vllm.prefix_counters()
    result = run(closed_loop(requests, concurrency))
    hits_after, queries_after = vllm.prefix_counters()
    ratio = (hits_after - hits) / (queries_after - queries) if queries_after > queries else None
    return Side(name, result, ratio)


def table(shape: Shape) -> None:
    lines = [
        f"\n  {shape.title}",
        f"    {'side':<22}{shape.unit + '/s':>14}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}{'prefix hits':>13}",
    ]
    for side in shape.sides:
        hits = f"{side.hit_ratio:.0%}" if side.hit_ratio is not None else "-"
        result = side.run
        lines.append(
            f"    {side.name:<22}{result.rate:>14.1f}{result.p(50):>10.0f}{result.p(99):>10.0f}"
            f"{result.failures:>8}{hits:>13}"
        )
    for side in shape.sides[1:]:
        throughput, p99 = shape.versus_straight(side)
        lines.append(f"    {side.name} / {shape.sides[0].name}: throughput {throughput:.2f}x, p99 {p99:.2f}x")
    lines += [f"    {side.name}: first failure: {side.run.first_failure}" for side in shape.sides if side.run.failures]
    print("\n".join(lines), flush=True)


def _shape(
    vllm: Vllm,
    gateways: dict[str, str],
    title: str,
    requests: Callable[[str | None], list[Request]],
    concurrency: int,
    unit: str = "requests",
) -> Shape:
    """The shape measured straight (``requests(None)``) and through the forwarding and the coalescing
    gateway (``requests(url)``, texts of their own), printed as a table."""
    sides = [measured(vllm, STRAIGHT, requests(None), concurrency)]
    for name in ("forward", "coalesce"):
        sides.append(measured(vllm, f"gateway {name}", requests(gateways[name]), concurrency))
    shape = Shape(title, sides, unit)
    table(shape)
    return shape


def _per_sample(vllm: Vllm, texts: list[str], gateway: str | None) -> list[Request]:
    """One text a request: vLLM's /classify, or a gateway's /get_reward (OpenRLHF's, verl's)."""
    if gateway is None:
        return [vllm.classify([text]) for text in texts]
    return [(f"{gateway}/get_reward", {"query": [text]}, {}) for text in texts]


def single_samples(vllm: Vllm, gateways: dict[str, str], texts: Texts, scale: Scale) -> Shape:
    """OpenRLHF: 64 clients, one sample per request."""
    count = scale.count(512)

    def requests(gateway: str | None) -> list[Request]:
        samples = [texts.sentence(random.Random(i).randint(80, 240)) for i in range(count)]
        return _per_sample(vllm, samples, gateway)

    title = "64 concurrent clients, 1 sample per request (OpenRLHF /get_reward)"
    return _shape(vllm, gateways, title, requests, 64)


def shared_prompts(vllm: Vllm, gateways: dict[str, str], texts: Texts, scale: Scale) -> Shape:
    """verl per sample: 16 prompts x 8 completions, each its own request, interleaved."""
    rounds = scale.count(4)

    def requests(gateway: str | None) -> list[Request]:
        completions = []
        for _ in range(rounds):
            prompts = [texts.sentence(300) for _ in range(16)]
            answers = [[f"{prompt} answer {texts.sentence(20)}" for prompt in prompts] for _ in range(8)]
            completions += [text for group in answers for text in group]  # p0c0, p1c0, ..., p15c0, p0c1, ...
        return _per_sample(vllm, completions, gateway)

    title = "16 prompts x 8 completions, each completion its own request, interleaved (verl per sample)"
    return _shape(vllm, gateways, title, requests, 64)


def groups(vllm: Vllm, gateways: dict[str, str], texts: Texts, scale: Scale) -> Shape:
    """TRL: each request a group of 8 completions of one prompt (/v1/rewards)."""
    count = scale.count(96)

    def group() -> list[str]:
        prompt = texts.sentence(120)
        return [f"{prompt} answer {texts.sentence(40)}" for _ in range(8)]

    def requests(gateway: str | None) -> list[Request]:
        if gateway is None:
            return [vllm.classify(group()) for _ in range(count)]
        return [(f"{gateway}/v1/rewards", {"items": [{"text": t} for t in group()]}, {}) for _ in range(count)]

    title = "groups of 8 in one request, 16 concurrent (TRL /v1/rewards)"
    return _shape(vllm, gateways, title, requests, 16, unit="groups")


@dataclass
class Fairness:
    """The light client's runs: alone, and beside the flood through each gateway (its name -> the light
    client's run, the flood's)."""

    alone: Run
    beside: dict[str, tuple[Run, Run]]
    # the light client's mean wait in each gateway's queue beside the flood, in seconds (its own figure)
    queue_wait: dict[str, float] = field(default_factory=dict)

    def p99_over_alone(self, gateway: str) -> float:
        return self.beside[gateway][0].p(99) / self.alone.p(99)


FAIR_SHARE_SIDES = (
    ("beside the flood, fair share on", "coalesce"),
    ("the same, no time bound on a call", "count"),
    ("beside the flood, fair share off", "fifo"),
)


def fair_share(gateways: dict[str, str], model: str, texts: Texts, capacity: float, scale: Scale) -> Fairness:
    """A light client at 0.4 of the capacity, a flooding one at 4x its rate: twice what vLLM can answer."""
    light_rate, heavy_rate, seconds = capacity * 0.4, capacity * 1.6, scale.fair_seconds

    def client(gateway: str, name: str) -> Callable[[], Request]:
        return lambda: (f"{gateway}/get_reward", {"query": [texts.sentence(160)]}, {"X-Reward-Client": name})

    (alone,) = run(open_loop([(client(gateways["coalesce"], "light"), light_rate)], seconds))
    print(
        f"\n  fair share: light client {light_rate:.1f} req/s, flooding client {heavy_rate:.1f} req/s "
        f"(the coalescing gateway's capacity {capacity:.1f} req/s), {seconds:g} s"
    )
    print(f"    {'light client':<34}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}{'p99 / alone':>13}{'queue wait':>12}")
    print(f"    {'alone':<34}{alone.p(50):>10.0f}{alone.p(99):>10.0f}{alone.failures:>8}{1.0:>13.2f}")
    fairness = Fairness(alone, {})
    for label, name in FAIR_SHARE_SIDES:
        if name not in gateways:
            continue
        streams = [(client(gateways[name], "heavy"), heavy_rate), (client(gateways[name], "light"), light_rate)]
        waited_before = queue_wait(gateways[name], model, "light")
        heavy, light = run(open_loop(streams, seconds))
        fairness.beside[name] = (light, heavy)
        fairness.queue_wait[name] = _mean_between(waited_before, queue_wait(gateways[name], model, "light"))
        print(
            f"    {label:<34}{light.p(50):>10.0f}{light.p(99):>10.0f}{light.failures:>8}"
            f"{fairness.p99_over_alone(name):>13.2f}{fairness.queue_wait[name] * 1000:>9.0f} ms"
            f"   (flood: p99 {heavy.p(99):.0f} ms, {heavy.failures} failed)",
            flush=True,
        )
    return fairness


def queue_wait(gateway: str, model: str, client: str) -> tuple[float, float]:
    """(seconds waited in all, parts) of ``client``'s in the gateway's queue for ``model``, from its own
    histogram (reward_gateway_client_queue_wait_seconds): the scheduler's share of the client's latency."""
    text = httpx.get(f"{gateway}/metrics", timeout=30).text
    series = f'reward_gateway_client_queue_wait_seconds_{{}}{{{{client="{client}",model="{model}"}}}}'
    return sample_sum(text, series.format("sum")), sample_sum(text, series.format("count"))


def _mean_between(before: tuple[float, float], after: tuple[float, float]) -> float:
    parts = after[1] - before[1]
    return (after[0] - before[0]) / parts if parts else float("nan")


@dataclass
class Figures:
    """What the four shapes measured."""

    single: Shape
    shared: Shape
    groups: Shape
    fairness: Fairness


def warm_up(vllm: Vllm, gateways: dict[str, str], texts: Texts) -> None:
    """vLLM's first calls and the gateways' first connections cost extra: 32 requests down every path."""
    run(closed_loop([vllm.classify([texts.sentence(100)]) for _ in range(32)], 16))
    for url in gateways.values():
        run(closed_loop([(f"{url}/get_reward", {"query": [texts.sentence(100)]}, {})] * 32, 16))


def scheduler_figures(vllm: Vllm, gateways: dict[str, str], scale: Scale) -> Figures:
    """The four shapes, in order, after a warm-up; ``gateways``: GATEWAYS' names -> the URLs of those
    gateways, in front of ``vllm``. The fair share's capacity: the coalescing gateway's rate with one
    sample per request."""
    texts = Texts()
    warm_up(vllm, gateways, texts)
    single = single_samples(vllm, gateways, texts, scale)
    shared = shared_prompts(vllm, gateways, texts, scale)
    grouped = groups(vllm, gateways, texts, scale)
    fairness = fair_share(gateways, vllm.model, texts, single.side("coalesce").run.rate, scale)
    return Figures(single, shared, grouped, fairness)
