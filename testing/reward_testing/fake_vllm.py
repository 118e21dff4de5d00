"""A small HTTP server with vLLM 0.32's /classify, /pooling, /tokenize, /v1/completions, /v1/chat/completions
(as a judge is asked) and /health shapes.

Scores are a deterministic function of the text, so tests can compute the
reward they expect for any input. Every request body is recorded. Two fakes can
stand for two reward models that disagree (a rollout's stable model and its
candidate): ``scale`` and ``offset`` change a fake's raw scores, and ``fixed``
gives chosen texts chosen scores, for figures computed by hand.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
import zlib
from collections import deque
from contextlib import contextmanager
from typing import Any

import uvicorn

from reward_testing.ports import free_port

STEP_TAG = "<extra_0>"
MAX_CHARS = 4000  # stands in for the model's context length


def logit(text: str) -> float:
    """The fake reward head's raw output for a text: spread over about -20..20."""
    return (zlib.crc32(text.encode()) % 4001) / 100.0 - 20.0


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def step_probability(text_up_to_step: str, raw: float | None = None) -> float:
    """A step's positive probability, from the text up to it (or from a fake's own raw score of it)."""
    return round(sigmoid((logit(text_up_to_step) if raw is None else raw) / 5), 6)


def text_tokens(text: str) -> list[str]:
    """The fake tokenizer of /v1/completions: each word with the whitespace before it, so the
    tokens add up to the text (as a real tokenizer's decoded tokens mostly do)."""
    return re.findall(r"\s*\S+", text)


def token_logprob(token: str) -> float:
    """The fake model's log-probability of a token (its decoded string), whatever precedes it."""
    return -((zlib.crc32(token.encode()) % 1000) / 250)


def completion_text(prompt: str, choice: int, max_tokens: int = 16) -> str:
    """What the fake generates for a prompt as choice ``choice``: at most three tokens."""
    words = [f"gen{choice}", f"t{zlib.crc32(prompt.encode()) % 1000}", "end"]
    return "".join(f" {word}" for word in words[:max_tokens])


def conversation_text(messages: list[dict[str, str]]) -> str:
    # Stands in for the model's own chat template when vLLM templates messages.
    return "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages)


def token_id(string: str) -> int:
    """The fake tokenizer's id of a whitespace-separated word."""
    return zlib.crc32(string.encode()) % 32000


def label_logprob(text: str, token: int) -> float:
    """The fake judge's log-probability of token ``token`` next after the templated conversation ``text``:
    at most e^-3 each, so a few dozen labels hold less than the whole distribution."""
    return -3.0 - (zlib.crc32(f"{text}|{token}".encode()) % 1000) / 250


def judge_reward(text: str, labels: dict[str, float]) -> tuple[float, float]:
    """What a judge gateway must answer for the fake's label probabilities: the labels' values expected under
    their renormalised probabilities, and the share of probability they hold."""
    weights = {label: math.exp(label_logprob(text, token_id(label))) for label in labels}
    total = sum(weights.values())
    return sum(value * weights[label] for label, value in labels.items()) / total, total


def judge_verdict(text: str, choices: list[str] | None = None) -> str:
    """The fake judge's structured verdict: one of the choices, or ``{"score": 0..10}`` (the schema's first
    required field for ``score``), chosen by the conversation."""
    pick = zlib.crc32(text.encode())
    if choices is not None:
        return choices[pick % len(choices)]
    return json.dumps({"score": pick % 11})


class EngineSteps:
    """vLLM's scheduling, in time only, for the benchmark.

    vLLM runs a pooling model in steps: each step takes the waiting texts that
    fit its token budget (max_num_batched_tokens) in arrival order, and all of
    them finish together when the step ends, so answers leave vLLM in bursts of
    up to ``tokens_per_step // tokens_per_text`` texts. Texts arriving during a
    step wait for the next one.
    """

    def __init__(self, step_s: float, tokens_per_step: int, tokens_per_text: int):
        self.step_s = step_s
        self.texts_per_step = max(1, tokens_per_step // tokens_per_text)
        self.waiting: deque[asyncio.Future] = deque()
        self.running: asyncio.Task | None = None
        self.steps_done = 0
        self.step_began = asyncio.Event()  # set once a step has taken its texts

    async def run(self, texts: list[str]) -> None:
        loop = asyncio.get_running_loop()
        finished = [loop.create_future() for _ in texts]
        self.waiting.extend(finished)
        if self.running is None or self.running.done():
            self.running = loop.create_task(self._steps())
        await asyncio.gather(*finished)

    async def _steps(self) -> None:
        while self.waiting:
            batch = [self.waiting.popleft() for _ in range(min(self.texts_per_step, len(self.waiting)))]
            self.step_began.set()
            await asyncio.sleep(self.step_s)  # noqa: TID251 the simulated GPU time of one engine step
            self.steps_done += 1
            for text in batch:
                text.set_result(None)


class FakeVllm:
    """The fake as a plain ASGI app (the object itself; ``.app`` too).

    No web framework: in the benchmark the fake shares a CPU with the load
    generator, and its own cost per request would blur the latency being measured.
    A real vLLM's HTTP work runs on its own machine.

    Timing: ``delay_s`` holds each call for a multiple of it chosen by its first
    text (tests of ordering), or ``engine`` schedules texts in vLLM-like steps
    (the benchmark). The time each call spent here is kept by its first text in
    ``residence`` and served (and cleared) at GET /fake/residence, so a benchmark
    can tell the time spent in the model from the time spent around it.
    """

    # What ``misbehaviour`` may be set to, for tests of the gateway's failure answers.
    MISBEHAVIOURS = ("429", "cut", "duplicate_index", "index_out_of_range", "oversized", "hang", "empty_404")

    def __init__(self, delay_s: float = 0.0, engine: EngineSteps | None = None):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.healthy = True
        # None: behave. "429": vLLM's queue is full. "cut": the answer stops
        # half-way and the connection closes. "duplicate_index" and
        # "index_out_of_range": data entries with wrong `index` values.
        # "oversized": a valid answer padded far past what its request could need.
        # "hang": no answer until the caller gives up and closes the connection
        # (counted in ``abandoned``): a model too slow for a shadow call's wait.
        # "empty_404": a 404 with an empty body (what answered is not vLLM's API, or not yet).
        self.misbehaviour: str | None = None
        # A process model's step rows as vLLM answers them under a wrong setting: None, the
        # [p_negative, p_positive] pair; "one_label": [sigmoid(logit)] (returnedTokenIds of one id);
        # "logits": the raw pair (the activation off); "every_token": a pair per word, tags or not
        # (a stepTagId that is not the tag's id but a frequent token's).
        self.step_rows: str | None = None
        self.abandoned = 0
        # This fake's context length, in characters: a text longer than it is refused as vLLM refuses one.
        self.max_chars = MAX_CHARS
        # This fake's raw score of a text: scale * logit(text) + offset, or fixed[text].
        self.scale = 1.0
        self.offset = 0.0
        self.fixed: dict[str, float] = {}
        self.delay_s = delay_s
        self.engine = engine
        self.residence: dict[str, float] = {}
        self.scorers = {"/classify": self._classify, "/pooling": self._pooling}
        # /v1/completions' choices in index order as vLLM sends them, or "reversed" (a gateway must sort by index).
        self.choice_order = "index"
        # What the served tokenizer puts in front of a text with add_special_tokens (None: nothing, as Qwen's).
        self.bos_token: str | None = "<s>"
        # A judge's structured verdicts chosen for given conversations (their templated text), else judge_verdict.
        self.verdicts: dict[str, str] = {}
        self.app = self

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path == "/health" and scope["method"] == "GET":
            status, answer = (200 if self.healthy else 503), {}
        elif path == "/fake/residence":
            status, answer, self.residence = 200, self.residence, {}
        elif path in self.scorers and scope["method"] == "POST":
            status, answer = await self._answer(path, json.loads(await _read(receive)), self.scorers[path], receive)
        elif path == "/v1/completions" and scope["method"] == "POST":
            status, answer = await self._completions(json.loads(await _read(receive)), receive)
        elif path == "/v1/chat/completions" and scope["method"] == "POST":
            status, answer = await self._chat(json.loads(await _read(receive)), receive)
        elif path == "/tokenize" and scope["method"] == "POST":
            status, answer = 200, self._tokenize(json.loads(await _read(receive)))
        else:
            status, answer = 404, {"error": {"message": f"no route {path}", "code": 404}}
        payload = b"" if answer is None else json.dumps(answer).encode()
        cuttable = path in self.scorers or path in ("/v1/completions", "/v1/chat/completions")
        length = len(payload) + (100 if self.misbehaviour == "cut" and cuttable else 0)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        # Cut: uvicorn closes a connection whose app returned before its answer's length was sent.
        await send({"type": "http.response.body", "body": payload})

    async def _refusal(self, path, body, texts, receive) -> tuple[int, dict[str, Any] | None] | None:
        """The call recorded; the answer of a fake that misbehaves, is loading, or gets texts too long."""
        self.calls.append((path, body))
        if self.misbehaviour == "hang":
            while (await receive())["type"] != "http.disconnect":
                pass
            self.abandoned += 1
            return 499, {}  # nobody reads it: the connection is gone
        if not self.healthy:
            return 503, {"error": {"message": "loading", "code": 503}}
        if self.misbehaviour == "429":
            return 429, {"error": {"message": "the engine's queue is full", "code": 429}}
        if self.misbehaviour == "empty_404":
            return 404, None
        if body.get("truncate_prompt_tokens") is None:
            for text in texts:
                if len(text) > self.max_chars:
                    message = (
                        f"This model's maximum context length is {self.max_chars} tokens; the input has {len(text)}"
                    )
                    return 400, {"error": {"message": message, "code": 400}}
        return None

    async def _answer(self, path, body, score, receive) -> tuple[int, dict[str, Any]]:
        arrived = time.perf_counter()
        texts = self._texts(body)
        refused = await self._refusal(path, body, texts, receive)
        if refused is not None:
            return refused
        if self.engine is not None:
            await self.engine.run(texts)
        elif self.delay_s:
            # Later texts answer sooner, so a gateway that kept arrival order would fail.
            await asyncio.sleep(self.delay_s * (zlib.crc32(texts[0].encode()) % 5))  # noqa: TID251 simulated model time
        data = [score(index, text, body) for index, text in enumerate(texts)]
        for entry in data:
            if self.misbehaviour == "duplicate_index":
                entry["index"] = 0
            elif self.misbehaviour == "index_out_of_range":
                entry["index"] += 1
        self.residence[texts[0]] = time.perf_counter() - arrived
        padding = {"padding": "x" * (100 * len(json.dumps(body)) + 2**21)} if self.misbehaviour == "oversized" else {}
        return 200, padding | {
            "id": "fake",
            "object": "list",
            "created": int(time.time()),
            "model": body.get("model"),
            "data": data,
        }

    async def _completions(self, body: dict[str, Any], receive) -> tuple[int, dict[str, Any]]:
        """vLLM's completions API for a prompt or a list of them: ``n`` choices each, numbered
        prompt by prompt (index = prompt * n + j); with echo, the prompt (its BOS first where
        add_special_tokens, vLLM's default) before the generated text; with logprobs, each token's
        log-probability (none for a text's first token), its string and its text_offset (the
        strings' lengths added up, as vLLM adds them)."""
        prompts = [body["prompt"]] if isinstance(body["prompt"], str) else list(body["prompt"])
        refused = await self._refusal("/v1/completions", body, prompts, receive)
        if refused is not None:
            return refused
        if self.delay_s:
            # Later prompts answer sooner: the answer's order must come from the indices.
            await asyncio.sleep(self.delay_s * (zlib.crc32(prompts[0].encode()) % 5))  # noqa: TID251 model time
        n, max_tokens = body.get("n", 1), body.get("max_tokens", 16)
        bos = self.bos_token if body.get("add_special_tokens", True) else None
        choices = []
        for index, prompt in enumerate(prompts):
            prompt_tokens = ([bos] if bos is not None else []) + text_tokens(prompt)
            for j in range(n):
                generated = completion_text(prompt, j, max_tokens)
                tokens = text_tokens(generated)
                text, logprobs = generated, None
                if body.get("echo"):
                    text, tokens = prompt + generated, prompt_tokens + tokens
                if body.get("logprobs") is not None:
                    offsets = [sum(len(token) for token in tokens[:i]) for i in range(len(tokens))]
                    values = [token_logprob(token) for token in tokens]
                    if body.get("echo"):
                        values[0] = None  # the first token of a text follows nothing
                    logprobs = {
                        "text_offset": offsets,
                        "token_logprobs": values,
                        "tokens": tokens,
                        "top_logprobs": [None if v is None else {t: v} for t, v in zip(tokens, values, strict=True)],
                    }
                choice = {"index": index * n + j, "text": text, "logprobs": logprobs, "finish_reason": "length"}
                choices.append(choice | {"stop_reason": None, "prompt_logprobs": None})
        if self.choice_order == "reversed":
            choices.reverse()
        for choice in choices:
            if self.misbehaviour == "duplicate_index":
                choice["index"] = 0
            elif self.misbehaviour == "index_out_of_range":
                choice["index"] += 1
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        return 200, {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": choices,
            "usage": usage,
        }

    async def _chat(self, body: dict[str, Any], receive) -> tuple[int, dict[str, Any]]:
        """vLLM's chat completions API as a judge is asked: the conversation templated (``conversation_text``,
        with the generation prompt), then either one token with the labels' log-probabilities
        (``logprob_token_ids``, tokens named ``token_id:<id>``), or a structured verdict (``judge_verdict``:
        a choice, or JSON), cut at ``max_tokens`` (a token per 4 characters here) with finish_reason length."""
        text = conversation_text(body["messages"]) + "<assistant>"
        refused = await self._refusal("/v1/chat/completions", body, [text], receive)
        if refused is not None:
            return refused
        if self.delay_s:
            await asyncio.sleep(self.delay_s * (zlib.crc32(text.encode()) % 5))  # noqa: TID251 simulated model time
        max_tokens, logprobs, finish = body.get("max_tokens") or 16, None, "stop"
        ids = body.get("logprob_token_ids")
        if ids:
            content = "Yes"
            entries = [
                {"token": f"token_id:{token}", "logprob": label_logprob(text, token), "bytes": []} for token in ids
            ]
            logprobs = {"content": [{"token": "token_id:1", "logprob": -0.5, "bytes": [], "top_logprobs": entries}]}
            finish = "length"
        else:
            outputs = body.get("structured_outputs") or {}
            content = self.verdicts.get(text) or judge_verdict(text, outputs.get("choice"))
            if len(content) > 4 * max_tokens:
                content, finish = content[: 4 * max_tokens], "length"
        message = {"role": "assistant", "content": content, "reasoning": None}
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
        return 200, {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 1, "total_tokens": 0},
        }

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's /tokenize for a prompt: a token per whitespace word, BOS first where the tokenizer adds one."""
        self.calls.append(("/tokenize", body))
        strings = body["prompt"].split()
        if body.get("add_special_tokens", True) and self.bos_token is not None:
            strings.insert(0, self.bos_token)
        tokens = [token_id(string) for string in strings]
        answer = {"count": len(tokens), "max_model_len": self.max_chars, "tokens": tokens}
        return answer | ({"token_strs": strings} if body.get("return_token_strs") else {})

    @staticmethod
    def _texts(body: dict[str, Any]) -> list[str]:
        if "messages" in body:
            return [conversation_text(body["messages"])]
        value = body["input"]
        return [value] if isinstance(value, str) else list(value)

    def raw_score(self, text: str) -> float:
        """This fake's reward head's raw output for a text."""
        fixed = self.fixed.get(text)
        return fixed if fixed is not None else self.scale * logit(text) + self.offset

    def _classify(self, index: int, text: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = self.raw_score(text)
        # vLLM's default for one-label heads is the sigmoid, not the logit.
        score = raw if body.get("use_activation") is False else sigmoid(raw)
        return {"index": index, "label": "LABEL_0", "probs": [score], "num_classes": 1}

    def _pooling(self, index: int, text: str, body: dict[str, Any]) -> dict[str, Any]:
        if STEP_TAG in text:
            # STEP pooling: [p_negative, p_positive] at each step tag.
            pieces = text.split(STEP_TAG)[:-1]
            if self.step_rows == "every_token":
                pieces = " ".join(pieces).split(" ")
            steps, prefix = [], ""
            for piece in pieces:
                prefix += piece + STEP_TAG
                p = step_probability(prefix, self.raw_score(prefix))
                steps.append([1 - p, p])
            if self.step_rows == "one_label":
                steps = [[sigmoid(self.raw_score(text))] for _ in steps]
            elif self.step_rows == "logits":
                steps = [[-1.5, 2.0] for _ in steps]
            return {"index": index, "object": "pooling", "data": steps}
        # ALL pooling: one value per token (whitespace words here), the BOS's first where
        # a text is sent with add_special_tokens true.
        words = text.split(" ")
        values = [[self.raw_score(" ".join(words[: i + 1]))] for i in range(len(words))]
        if "input" in body and body.get("add_special_tokens") is True and self.bos_token is not None:
            values.insert(0, [self.raw_score(self.bos_token)])
        return {"index": index, "object": "pooling", "data": values}


async def _read(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


@contextmanager
def serve_in_thread(app, port: int | None = None, **settings: Any):
    """Serve an ASGI app on a real loopback port for the duration of the block (``settings``: uvicorn.Config's)."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **settings)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)  # noqa: TID251  # allow-sleep: uvicorn's `started` is a plain flag, no event to wait on
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
