"""Each kind of reward model, and how vLLM is asked for its score.

The one table every scoring route reads (the scorer and /classify alike), so a
kind cannot be asked one way on one route and another way on the next: the
vLLM route, the pooling task, whether vLLM applies its activation, which
scorer in reward_gateway.items.extract reads an entry of vLLM's answer, and what
else sets the kind apart (steps, a reward token). Code asks a kind's fields,
never its name. `CallBody` builds every scoring call's body from a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reward_gateway.items.extract import Score, ordered_data, process_score, sequence_score, token_score

# (one entry of vLLM's answer, REWARD_GATEWAY_STEP_AGGREGATE) -> the Score of its text
EntryScore = Callable[[dict[str, Any], str], Score]
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
# vLLM's tokenizer (the served tokenizer and chat template): reward-token models' ids and a judge's labels
TOKENIZE_PATH = "/tokenize"


def verdict_apart(entry: dict[str, Any], aggregate: str) -> Score:
    """A judge answers no pooled scores: its verdicts are read call by call (reward_gateway.judge.verdict)."""
    raise TypeError("a judge's rewards are verdicts, read by reward_gateway.judge.scorer")


@dataclass(frozen=True)
class ModelKind:
    name: str
    path: str  # vLLM route
    task: str | None  # pooling task sent with the request; None: not sent
    use_activation: bool | None  # None: not sent, vLLM's default applies
    score: EntryScore
    # Memory vLLM's answer takes per byte of text sent (reward_gateway.http.asgi's
    # charge): 0 where it answers a few numbers per text (covered by the charge
    # per string); a value per token otherwise.
    answer_cost_per_byte: int = 0
    # Scored step by step: each item must hold the step tag, vLLM's count of steps is checked against
    # the tags sent, and answers carry the step scores beside the reward.
    steps: bool = False
    # Its own scorer may read the score at a reward token appended to the text, which the gateway
    # then appends (REWARD_GATEWAY_REWARD_TOKEN_ID, reward_gateway.scoring.reward_token).
    reward_token: bool = False
    # A generative judge: each item's reward is its verdict (reward_gateway.judge.scorer, on vLLM's generate
    # runner), read from its own chat completion; it reads the items' references (REWARD_GATEWAY_JUDGE).
    judge: bool = False

    def extract(self, response: Any, expected: int, aggregate: str) -> list[Score]:
        """One Score per text sent, from vLLM's whole answer (a malformed one fails all of them)."""
        return [self.score(entry, aggregate) for entry in ordered_data(response, expected)]

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
    "sequence": ModelKind("sequence", "/classify", None, False, sequence_score),
    # One value per token (ALL pooling): only /pooling's token_classify task
    # returns every token's value. The reward is the last token's raw value,
    # so no activation either.
    # Measured: 21 bytes of JSON per token, and 348 at the peak of parsing it
    # (orjson, tracemalloc); a hostile text can be a token per byte.
    "token": ModelKind(
        "token", "/pooling", "token_classify", False, token_score, answer_cost_per_byte=370, reward_token=True
    ),
    # Process reward models (Qwen2.5-Math-PRM style, STEP pooling) answer a
    # [p_negative, p_positive] pair per step tag: probabilities, which is what
    # vLLM's default activation (softmax) gives, so use_activation is not sent.
    "process": ModelKind("process", "/pooling", "token_classify", None, process_score, steps=True),
    # An instruction-tuned LLM's verdict on the item (LLM-as-judge): its label probabilities, or a
    # structured verdict, one chat completion per item.
    "judge": ModelKind("judge", CHAT_COMPLETIONS_PATH, None, None, verdict_apart, judge=True),
}

# verl's /classify is passed through to vLLM's own /classify, so it serves the
# kinds that vLLM scores there.
CLASSIFY_PATH = "/classify"
CLASSIFY_KINDS = tuple(kind.name for kind in KINDS.values() if kind.path == CLASSIFY_PATH)


class CallBody:
    """The body of every scoring call to vLLM: the direct path's (reward_gateway.scoring.scorer) and the merged
    calls' (reward_gateway.scoring.coalesce) alike, so the two cannot ask vLLM differently.

    Inputs (texts, or token ids) go with add_special_tokens false: rendered templates write their own
    BOS, and finished text is scored exactly as given (reward_gateway.items.wire.ScoringItem). A conversation
    goes as ``messages`` for vLLM to template. Both carry the kind's settings and, where configured,
    truncate_prompt_tokens."""

    def __init__(self, model: str, kind: ModelKind, truncate_prompt_tokens: int | None = None):
        self.path = kind.path
        truncate = {} if truncate_prompt_tokens is None else {"truncate_prompt_tokens": truncate_prompt_tokens}
        # Built once: a body is made for every call.
        self._inputs = {"model": model, "add_special_tokens": False, **truncate, **kind.request_fields()}
        self._messages = {"model": model, **truncate, **kind.request_fields()}

    def of_inputs(self, inputs: list[Any]) -> dict[str, Any]:
        return {**self._inputs, "input": inputs}

    def of_messages(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {**self._messages, "messages": messages}
