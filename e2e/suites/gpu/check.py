"""The run of `make gpu-check`, under the vLLM interpreter the preflight found (``preflight.py`` says what it
does, step by step, and runs this script with the same command line; ``plan`` and ``preflight`` are its
siblings on the script's path)."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch
import transformers
import vllm
from plan import (
    ARCHITECTURE,
    CONCURRENCY,
    FAIR_SHARE_GOAL,
    GROUP,
    PROMPT_WORDS,
    SCHEDULER_GOALS,
    SCHEDULER_THROUGHPUT_GOALS,
    SLEEP_ENV,
    SLEEP_LEVEL,
    TOLERANCES,
    ParityBatch,
    Rendered,
    Settings,
    Summary,
    compare,
    model_config,
    parity_batch,
    query_text,
    render,
    sentence,
    settings,
    with_sleep_mode,
)
from preflight import FAILED_EXIT, GATEWAY_PYTHON_ENV, SOURCE_PATHS, parse, progress
from transformers import AutoTokenizer, Qwen3ForSequenceClassification

from reward_testing import scheduler_bench
from reward_testing import tiny_model_maker as maker
from reward_testing.gateway_process import local_gateway, rendered_gateway
from reward_testing.scheduler_bench import GATEWAYS, Scale, Vllm, scheduler_figures
from reward_testing.scoring_cases import SPEC_TEMPLATE, prompt_response
from reward_testing.vllm_server import started_vllm, wait_healthy


def make_model(dest: Path, shape: dict[str, Any], dtype: str, device: str) -> int:
    """A random-weight Qwen3ForSequenceClassification and the tests' tokenizer, saved in ``dest``;
    returns its parameter count."""
    tokenizer = maker.make_tokenizer(model_max_length=shape["max_position_embeddings"])
    config = model_config(shape, dtype, tokenizer)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForSequenceClassification(config).to(getattr(torch, dtype)).eval()
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    count = sum(parameter.numel() for parameter in model.parameters())
    del model
    return count


def reference_rewards(folder: Path, dtype: str, device: str, items: list[dict]) -> list[float]:
    """transformers' forward pass per item (no padding) on ``device`` in ``dtype``: the last token's logit."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen3ForSequenceClassification.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
    rewards = []
    with torch.no_grad():
        for item in items:
            ids = torch.tensor([maker.item_ids(tokenizer, item)], device=device)
            rewards.append(float(model(input_ids=ids).logits[0, 0].float()))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # vLLM sizes its KV cache from the memory free when it starts
    return rewards


def device_facts(device: str) -> str:
    if device != "cuda":
        return f"CPU rehearsal ({os.cpu_count()} CPUs), no GPU"
    properties = torch.cuda.get_device_properties(0)
    facts = (
        f"{properties.name}, {properties.total_memory / 2**30:.1f} GiB, compute capability "
        f"{properties.major}.{properties.minor}, {torch.cuda.device_count()} device(s)"
    )
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        answer = subprocess.run(query, capture_output=True, text=True, timeout=30)
        if answer.returncode == 0 and answer.stdout.strip():
            facts += f", driver {answer.stdout.splitlines()[0].strip()}"
    return facts


def versions() -> str:
    cuda = f" (CUDA {torch.version.cuda})" if torch.version.cuda else ""
    return f"vLLM {vllm.__version__}, torch {torch.__version__}{cuda}, transformers {transformers.__version__}"


# ---------------------------------------------------------------------------------------------------
# Benchmark (aiohttp and httpx, through reward_testing.scheduler_bench)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRoute:
    title: str
    summary_name: str
    items: int  # scores a request
    direct: list  # scheduler_bench requests to vLLM's /classify
    through: list  # the same texts' requests to the gateway


def bench_routes(vllm, gateway: str, requests: int, warm_up: int, prompt_words: int, response_words: int, template):
    """Per-sample /get_reward and grouped /v1/rewards, each with vLLM's /classify of the same texts
    (``vllm``: a scheduler_bench.Vllm). The direct run and the gateway's score different texts (a tag at
    their start), so neither meets the other's prefix cache; completions of one group share their
    prompt, as GRPO's do."""
    rng = random.Random(11)
    total = warm_up + requests
    samples: dict[str, list[str]] = {}
    groups: dict[str, list[tuple[str, list[str]]]] = {}
    group_requests = max(1, requests // GROUP)
    group_warm_up = max(1, warm_up // GROUP)
    for run in ("direct", "gateway"):
        samples[run] = [
            query_text(f"{run} sample {i}: {sentence(rng, prompt_words)}", sentence(rng, response_words))
            for i in range(total)
        ]
        groups[run] = [
            (f"{run} group {i}: {sentence(rng, prompt_words)}", [sentence(rng, response_words) for _ in range(GROUP)])
            for i in range(group_warm_up + group_requests)
        ]

    per_sample = BenchRoute(
        f"per sample: /get_reward (1 query a request) vs vLLM /classify, concurrency {CONCURRENCY}",
        "bench per sample",
        1,
        [vllm.classify([text]) for text in samples["direct"]],
        [(f"{gateway}/get_reward", {"query": [text]}, {}) for text in samples["gateway"]],
    )
    grouped = BenchRoute(
        f"GRPO groups: /v1/rewards ({GROUP} completions sharing a prompt) vs vLLM /classify of the {GROUP} "
        f"rendered texts, concurrency {CONCURRENCY}",
        f"bench groups of {GROUP}",
        GROUP,
        [vllm.classify([template(prompt, r) for r in responses]) for prompt, responses in groups["direct"]],
        [
            (
                f"{gateway}/v1/rewards",
                {"items": [{"prompt": prompt, "response": r, "group": f"g{i}"} for r in responses]},
                {},
            )
            for i, (prompt, responses) in enumerate(groups["gateway"])
        ],
    )
    return [(per_sample, warm_up), (grouped, group_warm_up)]


def measure(requests: list, warm_up: int):
    """CONCURRENCY clients over one queue; the first ``warm_up`` requests open the connections and are not
    timed. Any request failing fails the step (it would measure an error path, not scoring)."""
    measured = scheduler_bench.run(scheduler_bench.closed_loop(requests, CONCURRENCY, warm_up))
    if measured.failures:
        raise RuntimeError(
            f"{measured.failures} of {len(requests)} requests failed; the first: {measured.first_failure}"
        )
    return measured


def forwarding_bench(vllm, gateway: str, chosen: Settings, template, summary: Summary) -> None:
    """Step 5: the forwarding gateway against vLLM straight, per sample and in GRPO groups."""
    warm_up = min(4 * CONCURRENCY, chosen.requests)
    for route, route_warm_up in bench_routes(
        vllm, gateway, chosen.requests, warm_up, chosen.prompt_words, chosen.response_words, template
    ):
        progress(f"bench {route.title}: {len(route.direct) - route_warm_up} requests each way")
        direct = measure(route.direct, route_warm_up)
        through = measure(route.through, route_warm_up)
        direct_rate, through_rate = direct.rate * route.items, through.rate * route.items
        for name, run, rate in (("vLLM direct", direct, direct_rate), ("via gateway", through, through_rate)):
            progress(f"  {name:12} {rate:9.0f} scores/s   p50 {run.p(50):7.1f} ms   p99 {run.p(99):7.1f} ms")
        ratio = through_rate / direct_rate
        added = f"{through.p(50) - direct.p(50):+.1f} ms at p50, {through.p(99) - direct.p(99):+.1f} ms at p99"
        progress(f"  gateway/direct: {ratio:.2f} of the throughput, {added}")
        summary.add(
            route.summary_name,
            f"{through_rate:.0f} vs {direct_rate:.0f} scores/s ({ratio:.2f}x); p99 "
            f"{through.p(99):.1f} vs {direct.p(99):.1f} ms ({added})",
            "figures",
        )


def scheduler_summary(figures, summary: Summary) -> None:
    """Step 6's ratios, one summary line a shape (``figures``: scheduler_bench.Figures)."""
    shapes = {"per sample": figures.single, "verl interleaved": figures.shared, "groups of 8": figures.groups}
    for name, shape in shapes.items():
        straight = shape.sides[0].run
        parts = [
            f"throughput vs straight ({straight.rate:.0f} {shape.unit}/s): {_versus(shape, 0)} "
            f"(goal: coalesce >= {SCHEDULER_THROUGHPUT_GOALS[name]:g}x)",
            f"p99 vs straight ({straight.p(99):.0f} ms): {_versus(shape, 1)}",
        ]
        if name == "verl interleaved":
            hits = [f"{_side_name(side.name)} {_percent(side.hit_ratio)}" for side in shape.sides]
            parts.append(f"prefix hits: {', '.join(hits)}")
        failed = sum(side.run.failures for side in shape.sides)
        parts += [f"{failed} requests failed"] if failed else []
        summary.add(f"scheduler {name}", "; ".join(parts), "figures")
    fairness = figures.fairness
    failed = sum(light.failures + heavy.failures for light, heavy in fairness.beside.values())
    parts = [
        f"light client's p99 vs alone ({fairness.alone.p(99):.0f} ms): fair share on "
        f"{fairness.p99_over_alone('coalesce'):.2f}x (without the time bound on a call "
        f"{fairness.p99_over_alone('count'):.2f}x), off {fairness.p99_over_alone('fifo'):.2f}x; its mean wait in "
        f"the gateway's queue with fair share on {fairness.queue_wait['coalesce'] * 1000:.0f} ms "
        f"(goal: on <= {FAIR_SHARE_GOAL:g}x)"
    ]
    parts += [f"{failed} requests failed"] if failed else []
    summary.add("scheduler fair share", "; ".join(parts), "figures")


def _versus(shape, figure: int) -> str:
    """The coalescing and forwarding gateways' throughput (``figure`` 0) or p99 (1) as multiples of the
    straight side's."""
    ratios = (f"{name} {shape.versus_straight(shape.side(name))[figure]:.2f}x" for name in ("coalesce", "forward"))
    return ", ".join(ratios)


def _side_name(side: str) -> str:
    """``straight /classify`` -> straight, ``gateway coalesce`` -> coalesce."""
    return side.removeprefix("gateway ").removesuffix(" /classify")


def _percent(ratio: float | None) -> str:
    return f"{ratio:.0%}" if ratio is not None else "-"


# ---------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------


def healthy_vllm(
    stack: ExitStack,
    rendered: Rendered,
    model_dir: Path,
    workdir: Path,
    chosen: Settings,
    summary,
    name: str = "vllm",
    extra_env: dict[str, str] | None = None,
):
    """vLLM with the predictor's rendered command line, once /health answers; its log's tail where not."""
    started = time.monotonic()
    vllm = stack.enter_context(
        started_vllm(rendered.isvc, model_dir, workdir / name, extra_env=extra_env, device=chosen.device)
    )
    progress(f"vLLM starting (log: {vllm.log}): {' '.join(vllm.args[1:])}")
    try:
        wait_healthy(vllm, timeout=chosen.start_timeout_s)
    except AssertionError as error:
        tail = "\n".join(vllm.log_text().splitlines()[-40:])
        progress(f"vLLM's log, its last lines:\n{tail}")
        last = (tail.splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"vLLM did not become healthy ({last}); its log: {vllm.log}") from error
    summary.add(f"{name} start", f"{time.monotonic() - started:.0f} s to /health 200 ({vllm.url})")
    progress(f"vLLM healthy after {time.monotonic() - started:.0f} s")
    return vllm


@dataclass(frozen=True)
class Gateways:
    """How each gateway of the check starts: the rendered environment and args, in front of vLLM, on the
    CPUs of its rendered limits.cpu (the last ones, where the machine has more), in the gateway's Python."""

    env: dict[str, str]
    args: list[str]
    upstream: str
    workdir: Path
    cpus: set[int] | None

    def start(self, stack: ExitStack, name: str) -> str:
        """The gateway with scheduler_bench.GATEWAYS[name] over the rendered environment; its URL."""
        log = self.workdir / f"gateway-{name}.log"
        env = {**self.env, **GATEWAYS[name]}
        python = os.environ[GATEWAY_PYTHON_ENV]
        url = stack.enter_context(local_gateway(env, self.args, self.upstream, log, python=python, cpus=self.cpus))
        pinned = f"CPUs {sorted(self.cpus)}" if self.cpus else "all CPUs"
        progress(f"gateway {name} ready at {url} ({pinned}, as its rendered limits.cpu)")
        return url


def gateways_for(rendered: Rendered, upstream: str, workdir: Path) -> Gateways:
    env, args = rendered_gateway(rendered.isvc)
    # the repository's packages, then what the caller's PYTHONPATH adds (packages carried beside a machine's own)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, SOURCE_PATHS), *filter(None, [os.environ.get("PYTHONPATH")])])
    cpus = sorted(os.sched_getaffinity(0))
    pinned = set(cpus[-rendered.gateway_cpus :]) if len(cpus) > rendered.gateway_cpus else None
    return Gateways(env, args, upstream, workdir, pinned)


def parity(gateway: str, batch: ParityBatch, references: list[float], dtype: str, device: str, summary) -> bool:
    """Step 4: both routes' scores against transformers'; whether all are within the tolerance."""

    def post(path: str, body: dict) -> dict:
        answer = httpx.post(gateway + path, json=body, timeout=300)
        if answer.status_code != 200:
            raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:500]}")
        return answer.json()

    rewards = post("/v1/rewards", {"items": batch.items})["rewards"]
    openrlhf = post("/get_reward", {"query": batch.queries})["rewards"]
    absolute, relative = TOLERANCES[dtype]
    tolerance = f"|diff| <= {absolute:g} + {relative:g}*|ref| ({dtype})"
    passed_all = True
    for route, got, want in (
        ("/v1/rewards", rewards, references[: len(batch.items)]),
        ("/get_reward", openrlhf, references[len(batch.items) :]),
    ):
        worst, passed = compare(got, want, dtype)
        passed_all &= passed
        verdict = "pass" if passed else "FAIL"
        line = (
            f"{len(want)} scores ({min(want):.3g} to {max(want):.3g}) vs transformers on {device}: "
            f"max |diff| {worst:.3g}, {tolerance}"
        )
        progress(f"parity {route}: {line}: {verdict}")
        summary.add(f"parity {route}", line, verdict)
    return passed_all


def scheduler_step(stack: ExitStack, gateways: Gateways, forward: str, model_name: str, chosen: Settings, summary):
    """Step 6: the coalescing and the first-come-first-served gateways beside the forwarding one, and the
    scheduler's four shapes through them."""
    urls = {"forward": forward, **{name: gateways.start(stack, name) for name in ("coalesce", "count", "fifo")}}
    requests_scale, fair_seconds = chosen.scheduler
    progress(f"scheduler: four traffic shapes, requests x{requests_scale:g}, fair share {fair_seconds:g} s a run")
    progress(SCHEDULER_GOALS)
    started = time.monotonic()
    figures = scheduler_figures(Vllm(gateways.upstream, model_name), urls, Scale(requests_scale, fair_seconds))
    progress(f"scheduler: the four shapes took {time.monotonic() - started:.0f} s")
    scheduler_summary(figures, summary)


def gpu_memory_used() -> float:
    """GiB in use on the device, every process's (vLLM's engine is another process)."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def sleep_step(rendered: Rendered, model_dir: Path, workdir: Path, chosen: Settings, summary, model_name: str):
    """Step 7: vLLM's sleep mode at level 1 on the served reward model, after the first vLLM has stopped.
    It compiles from the first one's cache (the same command line but the flag)."""
    env = {**SLEEP_ENV, "VLLM_CACHE_ROOT": str(workdir / "vllm" / "vllm-cache")}
    text = query_text("sleep: " + sentence(random.Random(3), PROMPT_WORDS), sentence(random.Random(4), 64))
    with ExitStack() as stack, httpx.Client(timeout=300) as client:
        vllm = healthy_vllm(stack, with_sleep_mode(rendered), model_dir, workdir, chosen, summary, "sleep-mode", env)
        url, body, _ = Vllm(vllm.url, model_name).classify([text])

        def reward() -> tuple[float, float]:
            asked = time.monotonic()
            answer = client.post(url, json=body)
            answer.raise_for_status()
            return float(answer.json()["data"][0]["probs"][-1]), time.monotonic() - asked

        def call(method: str, path: str) -> float:
            asked = time.monotonic()
            client.request(method, vllm.url + path).raise_for_status()
            return time.monotonic() - asked

        awake_score, awake_call_s = [reward() for _ in range(3)][-1]  # the first ones warm up
        awake_memory = gpu_memory_used()
        asleep_s = call("POST", f"/sleep?level={SLEEP_LEVEL}")
        sleeping = client.get(vllm.url + "/is_sleeping").json().get("is_sleeping")
        asleep_memory = gpu_memory_used()
        woken = time.monotonic()
        wake_s = call("POST", "/wake_up")
        woken_score, woken_call_s = reward()
        first_s = time.monotonic() - woken
        woken_memory = gpu_memory_used()
    same = "the same reward" if woken_score == awake_score else f"|diff| {abs(woken_score - awake_score):.3g}"
    line = (
        f"/sleep?level={SLEEP_LEVEL} {asleep_s:.2f} s (is_sleeping {sleeping}); GPU memory in use {awake_memory:.1f} "
        f"GiB awake, {asleep_memory:.1f} asleep ({awake_memory - asleep_memory:.1f} freed), {woken_memory:.1f} woken; "
        f"/wake_up {wake_s:.2f} s; first reward {first_s:.2f} s after the wake began (that call "
        f"{woken_call_s * 1000:.0f} ms, awake {awake_call_s * 1000:.0f} ms), {same} as before the sleep"
    )
    progress(f"sleep mode: {line}")
    summary.add("sleep mode", line, "figures")


def run_check(arguments: argparse.Namespace) -> int:
    chosen = settings(arguments)
    summary = Summary()
    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-", dir=os.environ.get("GPU_CHECK_DIR")))
    failed = False
    try:
        facts = device_facts(chosen.device)
        progress(f"device: {facts}")
        summary.add("device", facts)
        found = versions()
        progress(f"versions: {found}")
        summary.add("versions", found)

        model_dir = workdir / "model"
        progress(f"making a random-weight {ARCHITECTURE} ({chosen.dtype}) in {model_dir}")
        count = make_model(model_dir, chosen.shape, chosen.dtype, chosen.device)
        size = sum(path.stat().st_size for path in model_dir.iterdir()) / 2**30
        described = f"{ARCHITECTURE}, {count / 1e6:.0f}M parameters, {chosen.dtype}, {size:.2f} GiB on disk"
        progress(f"model: {described}")
        summary.add("model", described)

        batch = parity_batch()
        progress(f"transformers' reference: {len(batch.references)} forward passes on {chosen.device}")
        references = reference_rewards(model_dir, chosen.dtype, chosen.device, batch.references)

        rendered = render(chosen.gpus, chosen.dtype, workdir)
        resources = rendered.predictor.get("resources", {}).get("limits", {})
        summary.add("rendering", f"runtime {rendered.predictor['runtime']}, limits {resources}")

        with ExitStack() as stack:
            vllm = healthy_vllm(stack, rendered, model_dir, workdir, chosen, summary)
            gateways = gateways_for(rendered, vllm.url, workdir)
            forward = gateways.start(stack, "forward")
            failed |= not parity(forward, batch, references, chosen.dtype, chosen.device, summary)

            model_name = gateways.env["REWARD_GATEWAY_MODEL_NAME"]  # vLLM's --served-model-name, as rendered
            template = _template_renderer(model_dir, prompt_response)
            forwarding_bench(Vllm(vllm.url, model_name), forward, chosen, template, summary)
            scheduler_step(stack, gateways, forward, model_name, chosen, summary)
        if chosen.device == "cuda" and not arguments.no_sleep_mode:
            sleep_step(rendered, model_dir, workdir, chosen, summary, model_name)
        else:
            progress("sleep mode: skipped (a GPU only; --no-sleep-mode skips it there)")
    except Exception as error:  # a step that broke: say which, keep the folder with the logs
        failed = True
        arguments.keep = True
        progress(f"FAILED: {type(error).__name__}: {error}")
        summary.add("error", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}", "FAIL")
    finally:
        summary.print()
        print(SCHEDULER_GOALS, flush=True)
        if arguments.cpu_rehearsal:
            print("CPU rehearsal: a check of this script on vLLM's CPU build, not a GPU result.", flush=True)
        if arguments.keep:
            print(f"kept: {workdir} (model, vLLM's and the gateways' logs)", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return FAILED_EXIT if failed else 0


def _template_renderer(model_dir: Path, prompt_response):
    """The spec's template rendered as the gateway renders it, for the direct run's texts."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def render_one(prompt: str, response: str) -> str:
        return tokenizer.apply_chat_template(
            prompt_response(prompt, response), chat_template=SPEC_TEMPLATE, tokenize=False
        )

    return render_one


def main(argv: list[str] | None = None) -> int:
    return run_check(parse(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
