"""A rollout on the real node as a trainer drives it: a RewardModel sized to run beside its candidate, and a
trainer's traffic (GRPO groups sent from the client pod to ``status.url``) whose every answer is kept.

Shared by the suites that roll a candidate out on the real node (e2e/suites/canary, e2e/suites/prometheus).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from reward_testing.scoring_cases import SPEC_TEMPLATE

from .served import call_all, reward_model

OTHER_SEED = 101  # the bad candidate's weights (tiny_model_maker's seeds are 1-3)
# Two vLLMs at once on the node's 2 cores, beside the gateway: 600m each (the real-node default is 1500m).
# When the promotion restarts the stable predictor, its new pod waits for the candidate's to go.
VLLM_CPU = "600m"

# A trainer's texts: each request holds two groups, the four responses of two prompts.
PROMPTS = [
    "what is two plus three?",
    "find the sum of four and seven",
    "solve the question: ten minus five",
    "check the final answer: seven times two",
    "compute the total of three and three",
    "is the number ten large or small?",
    "think step by step: four plus five",
    "which answer is correct, two or four?",
]
RESPONSES = [
    "two plus three equals five. the answer is five!",
    "maybe the total is seven, i think",
    "let us solve it: the result is ten.",
    "the cat and the dog walk by the river",
]


def texts() -> list[tuple[str, str]]:
    return [(prompt, response) for prompt in PROMPTS for response in RESPONSES]


def canary_model(
    name: str, uri: str, candidate: str | None = None, serving_mode: str = "Standard", **canary: Any
) -> dict:
    """A sequence RewardModel on the real node (the spec's chat template, applied by the gateway), sized so that
    it and a candidate fit the node, in ``serving_mode``; with ``candidate`` (its URI), spec.canary with
    ``canary``'s fields."""
    spec = reward_model(
        name, "sequence", uri, model={"chatTemplate": SPEC_TEMPLATE}, gateway={"chatTemplateMode": "gateway"},
        serving={"mode": serving_mode},
    )  # fmt: skip
    spec["spec"]["resources"]["cpu"] = VLLM_CPU
    if candidate:
        spec["spec"]["canary"] = {"model": {"uri": candidate}, "resources": {"cpu": VLLM_CPU}, **canary}
    return spec


@dataclass(frozen=True)
class Answer:
    at: float  # time.monotonic() when its batch was sent
    status: int  # 0: no answer (a connection refused or reset); -1: the client pod could not be reached
    texts: tuple[tuple[str, str], ...]
    body: Any

    @property
    def role(self) -> str | None:
        return self.body["identity"]["role"] if self.status == 200 else None

    @property
    def revision(self) -> str | None:
        return self.body["identity"]["revision"] if self.status == 200 else None


class Traffic:
    """Batches of requests from the client pod to ``status.url`` in a thread, while resumed; every answer kept.
    Each request holds two GRPO groups, each under a key of its own, so a split spreads the requests evenly."""

    BATCH = 6  # requests per exec into the client pod

    def __init__(self, cluster, namespace: str, url: str, tag: str):
        self.cluster, self.namespace, self.url, self.tag = cluster, namespace, url, tag
        self.answers: list[Answer] = []
        self._sent = 0
        self._on, self._stop = threading.Event(), threading.Event()
        self._batch = threading.Lock()  # held while a batch is in flight
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _bodies(self) -> tuple[list[dict], list[tuple[tuple[str, str], ...]]]:
        bodies, sent = [], []
        for _ in range(self.BATCH):
            n = self._sent
            self._sent += 1
            prompts = (PROMPTS[n % len(PROMPTS)], PROMPTS[(n + 3) % len(PROMPTS)])
            pairs = tuple((p, r) for p in prompts for r in RESPONSES)
            group = {p: f"{self.tag}-{n}-{i}" for i, p in enumerate(prompts)}
            bodies.append({"items": [{"prompt": p, "response": r, "group": group[p]} for p, r in pairs]})
            sent.append(pairs)
        return bodies, sent

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._on.wait(0.5):
                continue
            with self._batch:
                if not self._on.is_set():
                    continue
                bodies, sent = self._bodies()
                sent_at = time.monotonic()
                try:
                    found = call_all(self.cluster, self.namespace, self.url, "/v1/rewards", bodies)
                except (AssertionError, ValueError, IndexError) as error:  # the exec itself failed, or printed nothing
                    found = [{"status": -1, "body": str(error)}] * len(bodies)
                self.answers.extend(
                    Answer(sent_at, a["status"], pairs, a["body"]) for a, pairs in zip(found, sent, strict=True)
                )

    def resume(self) -> None:
        self._on.set()

    def pause(self) -> None:
        """Stop sending; returns once the batch in flight (if any) is back."""
        self._on.clear()
        with self._batch:
            pass

    def since(self, moment: float) -> list[Answer]:
        """The answers to the requests sent at or after ``moment``."""
        return [a for a in list(self.answers) if a.at >= moment]

    def close(self) -> None:
        self.pause()
        self._stop.set()
        self._thread.join(timeout=30)

    def __enter__(self) -> Traffic:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
