"""A dataset scored through the gateway (``reward-gateway-client score``) against a real vLLM (the pinned CPU
build): figures and ratios, printed, never asserted.

One vLLM (BENCH_SHAPE's sequence model, as rendered) and one gateway with the rendered settings. Each side
gets a dataset of its own (same shape, other words), so vLLM's prefix cache never carries one side's work
to the next: GROUPS prompts of PROMPT_WORDS words with N responses each, as finished text.

- straight to vLLM: each group's texts in one ``/classify`` call, MAX_IN_FLIGHT at once (what a worker
  that skipped the gateway would send);
- the batch: the same rows through the gateway, a group per call, MAX_IN_FLIGHT at once, in committed
  chunks (the worker's own cost, the gateway's, and the checkpoints');
- the batch, rows shuffled: the same rows with no group, in random order (each row a call of its own).

Each side's rows/s and vLLM's prefix-cache hit ratio over it (``vllm:prefix_cache_hits_total`` /
``vllm:prefix_cache_queries_total``), then the ratios. BENCH_BATCH_GROUPS (default 96) sizes the datasets.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from reward_gateway_client.batch.worker import Job, ShardWorker
from reward_gateway_client.http import GatewaySettings
from vllm_bench import served_model

from reward_testing.scheduler_bench import Vllm
from reward_testing.tiny_model_maker import WORDS

GROUPS = int(os.environ.get("BENCH_BATCH_GROUPS", "96"))
N = 8
PROMPT_WORDS, RESPONSE_WORDS = 200, 12
MAX_IN_FLIGHT = 8


def say(message: str) -> None:
    print(f"[bench-batch {time.strftime('%H:%M:%S')}] {message}", flush=True)


def dataset(seed: int) -> list[dict]:
    """GROUPS prompts with N responses each, as finished texts, grouped by prompt."""
    words = random.Random(seed)
    rows = []
    for g in range(GROUPS):
        prompt = " ".join(words.choice(WORDS) for _ in range(PROMPT_WORDS))
        for r in range(N):
            response = " ".join(words.choice(WORDS) for _ in range(RESPONSE_WORDS))
            rows.append({"id": f"{g}-{r}", "group": f"g{g}", "text": f"{prompt} {response}"})
    return rows


def write(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def hit_ratio(vllm: Vllm, before: tuple[float, float]) -> float | None:
    hits, queries = vllm.prefix_counters()
    return (hits - before[0]) / (queries - before[1]) if queries > before[1] else None


async def straight(vllm: Vllm, rows: list[dict]) -> None:
    """Each group's texts in one /classify call, MAX_IN_FLIGHT calls at once."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row["text"])
    limit = asyncio.Semaphore(MAX_IN_FLIGHT)
    async with httpx.AsyncClient(timeout=600) as http:

        async def one(texts: list[str]) -> None:
            url, body, _ = vllm.classify(texts)
            async with limit:
                answer = await http.post(url, json=body)
                answer.raise_for_status()

        await asyncio.gather(*(one(texts) for texts in groups.values()))


def through_gateway(gateway: str, source: Path, output: Path) -> None:
    job = Job(source, output, max_in_flight=MAX_IN_FLIGHT)
    summary = asyncio.run(ShardWorker(job, GatewaySettings(url=gateway), io.StringIO()).run())
    if summary.failed:
        raise SystemExit(f"{summary.failed} rows failed: {dict(summary.failures)}")


def measured(name: str, vllm: Vllm, run) -> tuple[float, float | None]:
    before = vllm.prefix_counters()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    rate, ratio = GROUPS * N / seconds, hit_ratio(vllm, before)
    hits = "n/a" if ratio is None else f"{ratio:.2f}"
    say(f"{name:<32} {GROUPS * N} rows in {seconds:6.1f} s: {rate:7.1f} rows/s, prefix-cache hits {hits}")
    return rate, ratio


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    say(f"commit {commit}, {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp, served_model(Path(tmp), {"batch": {}}) as served:
        vllm, gateways = served
        work = Path(tmp)
        warm = dataset(0)[: 2 * N]
        asyncio.run(straight(vllm, warm))  # the first calls pay vLLM's own warm-up, on texts of their own
        direct = dataset(1)
        grouped = write(dataset(2), work / "grouped.jsonl")
        shuffled_rows = [{k: v for k, v in row.items() if k != "group"} for row in dataset(3)]
        random.Random(4).shuffle(shuffled_rows)
        shuffled = write(shuffled_rows, work / "shuffled.jsonl")
        gateway = gateways["batch"]
        shape = f"{GROUPS} prompts of {PROMPT_WORDS} words x {N} responses of {RESPONSE_WORDS} words"
        say(f"{shape}, {MAX_IN_FLIGHT} calls at once")
        sides = {
            "straight to vLLM, a group a call": lambda: asyncio.run(straight(vllm, direct)),
            "the batch, a group a call": lambda: through_gateway(gateway, grouped, work / "out-grouped"),
            "the batch, rows shuffled": lambda: through_gateway(gateway, shuffled, work / "out-shuffled"),
        }
        rates = [measured(name, vllm, run) for name, run in sides.items()]
    (straight_rate, _), (batch_rate, _), (shuffled_rate, _) = rates
    say(f"ratio the batch / straight to vLLM: {batch_rate / straight_rate:.2f}")
    say(f"ratio grouped / shuffled: {batch_rate / shuffled_rate:.2f}")
    say(f"done; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
