"""A small HTTP server with vLLM 0.33's /classify, /pooling and /health shapes.

Scores are a deterministic function of the text, so tests can compute the
reward they expect for any input. Every request body is recorded.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from testenv.helpers import free_port

STEP_TAG = "<extra_0>"
MAX_CHARS = 4000  # stands in for the model's context length


def logit(text: str) -> float:
    """The fake reward head's raw output for a text: spread over about -20..20."""
    return (zlib.crc32(text.encode()) % 4001) / 100.0 - 20.0


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def step_probability(text_up_to_step: str) -> float:
    return round(sigmoid(logit(text_up_to_step) / 5), 6)


def conversation_text(messages: list[dict[str, str]]) -> str:
    # Stands in for the model's own chat template when vLLM templates messages.
    return "".join(f"<{m['role']}>{m['content']}" for m in messages)


class FakeVllm:
    def __init__(self, delay_s: float = 0.0):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.healthy = True
        self.delay_s = delay_s
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/health")
        async def health():
            return JSONResponse({}, status_code=200 if self.healthy else 503)

        @app.post("/classify")
        async def classify(request: Request):
            return await self._answer("/classify", await request.json(), self._classify)

        @app.post("/pooling")
        async def pooling(request: Request):
            return await self._answer("/pooling", await request.json(), self._pooling)

        return app

    async def _answer(self, path, body, score):
        self.calls.append((path, body))
        if not self.healthy:
            return JSONResponse({"error": {"message": "loading", "code": 503}}, status_code=503)
        texts = self._texts(body)
        if body.get("truncate_prompt_tokens") is None:
            for text in texts:
                if len(text) > MAX_CHARS:
                    message = f"This model's maximum context length is {MAX_CHARS} tokens; the input has {len(text)}"
                    return JSONResponse({"error": {"message": message, "code": 400}}, status_code=400)
        if self.delay_s:
            # Later texts answer sooner, so a gateway that kept arrival order would fail.
            await asyncio.sleep(self.delay_s * (zlib.crc32(texts[0].encode()) % 5))
        data = [score(index, text, body) for index, text in enumerate(texts)]
        return {"id": "fake", "object": "list", "created": int(time.time()), "model": body.get("model"), "data": data}

    @staticmethod
    def _texts(body: dict[str, Any]) -> list[str]:
        if "messages" in body:
            return [conversation_text(body["messages"])]
        value = body["input"]
        return [value] if isinstance(value, str) else list(value)

    @staticmethod
    def _classify(index: int, text: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = logit(text)
        # vLLM's default for one-label heads is the sigmoid, not the logit.
        score = raw if body.get("use_activation") is False else sigmoid(raw)
        return {"index": index, "label": "LABEL_0", "probs": [score], "num_classes": 1}

    @staticmethod
    def _pooling(index: int, text: str, body: dict[str, Any]) -> dict[str, Any]:
        if STEP_TAG in text:
            # STEP pooling: [p_negative, p_positive] at each step tag.
            pieces = text.split(STEP_TAG)[:-1]
            steps, prefix = [], ""
            for piece in pieces:
                prefix += piece + STEP_TAG
                p = step_probability(prefix)
                steps.append([1 - p, p])
            return {"index": index, "object": "pooling", "data": steps}
        # ALL pooling: one value per token (whitespace words here).
        words = text.split(" ")
        values = [[logit(" ".join(words[: i + 1]))] for i in range(len(words))]
        return {"index": index, "object": "pooling", "data": values}


@contextmanager
def serve_in_thread(app, port: int | None = None):
    """Serve an ASGI app on a real loopback port for the duration of the block."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
