"""Each kind of reward model, and how vLLM is asked for its score.

The one table every scoring route reads (the scorer and /classify alike), so a
kind cannot be asked one way on one route and another way on the next: the
vLLM route, the pooling task, whether vLLM applies its activation, and which
extractor in reward_gateway.extract turns vLLM's answer into rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reward_gateway.extract import Score, process_scores, sequence_scores, token_scores

# (vLLM's answer, how many texts were sent, REWARD_GATEWAY_STEP_AGGREGATE) -> one Score per text
Extractor = Callable[[Any, int, str], list[Score]]


@dataclass(frozen=True)
class ModelKind:
    name: str
    path: str  # vLLM route
    task: str | None  # pooling task sent with the request; None: not sent
    use_activation: bool | None  # None: not sent, vLLM's default applies
    extract: Extractor
    # Memory vLLM's answer takes per byte of text sent (reward_gateway.asgi's
    # charge): 0 where it answers a few numbers per text (covered by the charge
    # per string); a value per token otherwise.
    answer_cost_per_byte: int = 0

    def request_fields(self) -> dict[str, Any]:
        """What every request for this kind carries besides the model and its input."""
        fields: dict[str, Any] = {}
        if self.task is not None:
            fields["task"] = self.task
        if self.use_activation is not None:
            fields["use_activation"] = self.use_activation
        return fields


KINDS: dict[str, ModelKind] = {
    # Outcome reward models with a one-label head (Skywork, ArmoRM's scalar,
    # most of RewardBench). /classify is what verl calls; with its default
    # activation vLLM answers sigmoid(logit) for one label, and the trainers'
    # reward is the raw logit, so the activation is switched off.
    "sequence": ModelKind("sequence", "/classify", None, False, sequence_scores),
    # One value per token (ALL pooling): only /pooling's token_classify task
    # returns every token's value. The reward is the last token's raw value,
    # so no activation either.
    # Measured: 21 bytes of JSON per token, and 348 at the peak of parsing it
    # (orjson, tracemalloc); a hostile text can be a token per byte.
    "token": ModelKind("token", "/pooling", "token_classify", False, token_scores, answer_cost_per_byte=370),
    # Process reward models (Qwen2.5-Math-PRM style, STEP pooling) answer a
    # [p_negative, p_positive] pair per step tag: probabilities, which is what
    # vLLM's default activation (softmax) gives, so use_activation is not sent.
    "process": ModelKind("process", "/pooling", "token_classify", None, process_scores),
}

# verl's /classify is passed through to vLLM's own /classify, so it serves the
# kinds that vLLM scores there.
CLASSIFY_PATH = "/classify"
CLASSIFY_KINDS = tuple(kind.name for kind in KINDS.values() if kind.path == CLASSIFY_PATH)
