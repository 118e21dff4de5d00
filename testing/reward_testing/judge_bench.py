"""A judge's group traffic, measured against a real vLLM: the completions of one prompt judged together, against
as many unrelated items, with vLLM's prefix-cache hit ratio from its own metrics.

Each request is 8 items to ``/v1/rewards`` of a judge's gateway (label probabilities). In a group, the 8 items
answer one prompt: their judge prompts share the judge's template and that prompt up to the response, which is
what vLLM's prefix cache can serve once computed (in blocks: 128 tokens on the CPU build). Unrelated items share
only the template's opening. The ratio is ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``
around each side; each side's texts are its own, so nothing one side computed is cached for the next.

Standard library, aiohttp and httpx only (as reward_testing.scheduler_bench, whose load generator it uses).
"""

from __future__ import annotations

from dataclasses import dataclass

from reward_testing.scheduler_bench import Request, Run, Scale, Texts, Vllm, closed_loop, run

# Items a request; words in the prompt (about a token a word with the tests' tokenizer: three of the CPU
# build's 128-token blocks) and in each response.
GROUP = 8
PROMPT_WORDS = 400
RESPONSE_WORDS = 30
CONCURRENCY = 4


@dataclass
class JudgeSide:
    name: str
    run: Run
    hit_ratio: float | None


def _items(texts: Texts, grouped: bool) -> list[dict]:
    prompt = texts.sentence(PROMPT_WORDS)
    prompts = [prompt if grouped else texts.sentence(PROMPT_WORDS) for _ in range(GROUP)]
    return [{"prompt": p, "response": texts.sentence(RESPONSE_WORDS), "group": "g"} for p in prompts]


def _side(vllm: Vllm, gateway: str, texts: Texts, scale: Scale, grouped: bool) -> JudgeSide:
    count = scale.count(24)
    requests: list[Request] = [(f"{gateway}/v1/rewards", {"items": _items(texts, grouped)}, {}) for _ in range(count)]
    hits, queries = vllm.prefix_counters()
    result = run(closed_loop(requests, CONCURRENCY))
    hits_after, queries_after = vllm.prefix_counters()
    ratio = (hits_after - hits) / (queries_after - queries) if queries_after > queries else None
    name = f"group of {GROUP}, one prompt" if grouped else f"{GROUP} unrelated items"
    return JudgeSide(name, result, ratio)


def judge_figures(vllm: Vllm, gateway: str, scale: Scale) -> tuple[JudgeSide, JudgeSide]:
    """The two sides after a warm-up, printed as a table with their ratio."""
    texts = Texts()
    run(closed_loop([(f"{gateway}/v1/rewards", {"items": _items(texts, False)}, {})] * 4, 2))
    grouped = _side(vllm, gateway, texts, scale, grouped=True)
    unrelated = _side(vllm, gateway, texts, scale, grouped=False)
    lines = [
        f"\n  a judge's group traffic: {GROUP} items a request, {CONCURRENCY} concurrent (/v1/rewards, label "
        "probabilities)",
        f"    {'side':<28}{'items/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'failed':>8}{'prefix hits':>13}",
    ]
    for side in (grouped, unrelated):
        hits = f"{side.hit_ratio:.0%}" if side.hit_ratio is not None else "-"
        lines.append(
            f"    {side.name:<28}{side.run.rate * GROUP:>10.1f}{side.run.p(50):>10.0f}{side.run.p(99):>10.0f}"
            f"{side.run.failures:>8}{hits:>13}"
        )
    if unrelated.run.rate:
        lines.append(
            f"    group / unrelated: throughput {grouped.run.rate / unrelated.run.rate:.2f}x, "
            f"p50 {grouped.run.p(50) / unrelated.run.p(50):.2f}x"
        )
    lines += [
        f"    {side.name}: first failure: {side.run.first_failure}"
        for side in (grouped, unrelated)
        if side.run.failures
    ]
    print("\n".join(lines), flush=True)
    return grouped, unrelated
