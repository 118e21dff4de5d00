"""A generative judge as a reward model: each item's reward is the judge's verdict on it.

Each item becomes the judge's own conversation: an optional system message and a user message rendered
from the prompt template (reward_gateway.config.judge) over the item's prompt, conversation, response and
reference. It goes to vLLM's chat completions API as ``messages``, so vLLM applies the judge model's own
chat template to it, once, with the generation prompt, and tokenizes the result without adding special
tokens: the template's BOS is the only one (what transformers' ``apply_chat_template(...,
add_generation_prompt=True)`` gives). One call per item, at temperature 0:

- label probabilities: one generated token, with ``logprob_token_ids`` the labels' token ids, so vLLM
  answers their log-probabilities over the whole vocabulary at the verdict position (one forward pass;
  reward_gateway.judge.verdict renormalises them over the labels). The ids come from vLLM's ``/tokenize`` of
  each label without special tokens, where the label rule (docs/judges.md#the-label-rule) is checked: a
  label that breaks it would be silently split or merged. It checks as soon as vLLM answers after start
  (without waking a predictor at zero; before it listens, where vLLM is up already, as for a restarted
  gateway), and before the first verdict in any case. A refusal is recorded: every request fails with it
  (JudgeRefused), and `refusal()` says it to whoever waits on it, the server (reward_gateway.http.server),
  which ends the process with the message as the container's termination message (the RewardModel's
  Ready says it: CrashLoopBackOff, the message's tail).
- a structured verdict: up to ``maxTokens`` tokens under vLLM's structured output (the JSON schema, or
  the choices), read by reward_gateway.judge.verdict.

Items of one group (the completions of one prompt) share the judge's template and the prompt up to the
response, which vLLM's prefix cache computes once, in whole blocks (128 tokens on the CPU build), even for
the items that meet in one engine step: all the items go at once (sending a group's first item ahead of the
rest hit no more blocks, measured by make bench-vllm, and cost a forward pass of latency).

An item the judge cannot read (finished text with no prompt to split it at; a conversation that does not
end with the assistant's turn) or whose template fails (``invalid``), one vLLM refuses (its judge prompt
over the model's context: ``too_long``), and a verdict that gives no reward (``no_verdict``) fail that item
alone (reward_gateway.items.outcomes); the others are judged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jinja2 import TemplateError

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.config.judge import JudgeConfig, environment
from reward_gateway.items.errors import BadRequest, GatewayError, UpstreamError, all_or_first_failure, forget
from reward_gateway.items.extract import Score
from reward_gateway.items.kinds import CHAT_COMPLETIONS_PATH, ModelKind
from reward_gateway.items.outcomes import Failure, Outcome, failure_of
from reward_gateway.items.wire import Judged, ScoringItem
from reward_gateway.judge.verdict import OUTCOMES, Verdict, label_verdict, structured_verdict
from reward_gateway.signals.metrics import GatewayMetrics
from reward_gateway.upstream.client import VllmClient

logger = logging.getLogger("reward_gateway")

# How often the check at start asks vLLM again while it is not up yet, and how long it waits for an answer.
CHECK_PAUSE_S = 2.0
CHECK_TIMEOUT_S = 10.0
# An item without a verdict: its failure's reason, and its status where it fails a request (OpenRLHF's).
NO_VERDICT, NO_VERDICT_STATUS = "no_verdict", 422


class JudgeRefused(GatewayError):
    """The judge's settings cannot work with the judge's tokenizer: every verdict would be wrong."""

    status = 500


def judged_item(item: ScoringItem) -> Judged:
    if item.judged is None:
        raise BadRequest(
            "a judge reads the prompt and the response apart: send prompt and response, or messages that end "
            "with the assistant's response (finished text needs its prompt: OpenRLHF's prompts)"
        )
    return item.judged


class JudgePrompt:
    """The judge's messages for an item: the system message, and the user message from the template."""

    def __init__(self, judge: JudgeConfig):
        self._template = environment().from_string(judge.prompt)
        self._system = judge.system

    def messages(self, judged: Judged) -> list[dict[str, str]]:
        try:
            content = self._template.render(
                prompt=judged.prompt, messages=judged.messages, response=judged.response, reference=judged.reference
            )
        except TemplateError as error:
            raise BadRequest(f"the judge's prompt template failed on this item: {error}") from None
        user = {"role": "user", "content": content}
        return [{"role": "system", "content": self._system}, user] if self._system is not None else [user]


class JudgeScorer:
    """Scores items by the judge's verdicts (the scorer of a ``judge`` kind:
    reward_gateway.scoring.scorer.make_scorer)."""

    def __init__(self, config: GatewayConfig, client: VllmClient, metrics: GatewayMetrics):
        assert config.judge is not None
        self.config = config
        self.client = client
        self.kind: ModelKind = config.kind
        self.judge = config.judge
        self.prompt = JudgePrompt(config.judge)
        self._ids: tuple[int, ...] | None = None
        self._refusal: str | None = None
        self._refused = asyncio.Event()
        self._checking = asyncio.Lock()
        self._base = self._base_body()
        model = client.label
        self._share = metrics.judge_label_share.labels(model)
        self._verdicts = {outcome: metrics.judge_verdicts.labels(model, outcome) for outcome in OUTCOMES}

    def _base_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model_name, "temperature": 0}
        structured = self.judge.structured
        if structured is None:
            # the labels' own log-probabilities (logprobs must be on; their count is the labels')
            return {**body, "max_tokens": 1, "logprobs": True, "return_tokens_as_token_ids": True}
        if structured.choices is not None:
            outputs: dict[str, Any] = {"choice": [label.text for label in structured.choices]}
        else:
            # compact, as vLLM is started for a judge (render/vllm_args.JUDGE_ARGS): vLLM 0.32 ignores a
            # request's own disable_any_whitespace
            outputs = {"json": structured.json_schema}
        return {**body, "max_tokens": structured.max_tokens, "structured_outputs": outputs}

    async def score(self, items: list[ScoringItem], client: str = "default") -> list[Outcome]:
        """Each item's reward, or its failure (reward_gateway.items.outcomes), in the items' order. Only what fails
        every item raises: labels the judge's tokenizer refuses."""
        outcomes: list[Outcome | None] = [None] * len(items)
        calls: dict[int, list[dict[str, str]]] = {}
        for position, item in enumerate(items):
            try:
                calls[position] = self._messages(item)
            except BadRequest as error:  # the item a judge cannot read, or its template failing on it
                outcomes[position] = failure_of(error)
        if calls and self.judge.labels is not None:
            await self.label_ids()

        async def judge(position: int) -> None:
            outcomes[position] = await self._outcome(calls[position])

        await all_or_first_failure([judge(position) for position in calls])  # only a bug raises: it cancels the rest
        return outcomes  # type: ignore[return-value]

    async def _outcome(self, messages: list[dict[str, str]]) -> Outcome:
        """One item's verdict as its outcome: vLLM's failure, or no verdict, is the item's alone."""
        try:
            verdict = await self._verdict(messages)
        except UpstreamError as error:
            failure = failure_of(error)
            forget(error)
            return failure
        if verdict.reward is None:
            return Failure(NO_VERDICT, f"the judge gave no verdict: {verdict.message}", False, NO_VERDICT_STATUS)
        return Score(verdict.reward)

    def _messages(self, item: ScoringItem) -> list[dict[str, str]]:
        return self.prompt.messages(judged_item(item))

    async def _verdict(self, messages: list[dict[str, str]]) -> Verdict:
        answer = await self.client.post(CHAT_COMPLETIONS_PATH, self.body(messages))
        labels = self.judge.labels
        if labels is not None:
            verdict = label_verdict(answer, labels, self._ids or ())
            if verdict.label_share is not None:
                self._share.observe(verdict.label_share)
        else:
            verdict = structured_verdict(answer, self.judge.structured)  # type: ignore[arg-type]
        self._verdicts[verdict.outcome].inc()
        return verdict

    def body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One item's chat completion: its messages, with the verdict mode's settings."""
        if self._ids is not None:
            return {**self._base, "messages": messages, "logprob_token_ids": list(self._ids)}
        return {**self._base, "messages": messages}

    # the labels' token ids

    async def label_ids(self) -> tuple[int, ...]:
        """The labels' token ids, learnt from vLLM's tokenizer once (waiting for vLLM as any call does)."""
        if self._ids is None:
            async with self._checking:
                if self._ids is None and self._refusal is None:
                    self._learn(await self._tokenize(self.client.tokenize))
        if self._refusal is not None:
            raise JudgeRefused(self._refusal)
        return self._ids  # type: ignore[return-value]

    async def check_at_start(self) -> None:
        """The labels checked as soon as vLLM answers, without holding for it or waking it (the gateway's load
        counts no such call): a refusal ends the gateway at start, not at the first request."""
        if self.judge.labels is None:
            return
        while self._ids is None and self._refusal is None:
            try:
                async with asyncio.timeout(CHECK_TIMEOUT_S):
                    answers = await self._tokenize(self.client.probe_tokenize)
            except (TimeoutError, GatewayError):
                await asyncio.sleep(CHECK_PAUSE_S)  # vLLM not up yet: asked again; nothing waits on this
                continue
            async with self._checking:
                if self._ids is None and self._refusal is None:
                    self._learn(answers)
        if self._refusal is not None:
            raise JudgeRefused(self._refusal)

    async def refusal(self) -> str:
        """Why the judge refuses its labels, once it does (it never answers where they are fine)."""
        await self._refused.wait()
        return self._refusal  # type: ignore[return-value]

    async def _tokenize(self, tokenize: Callable[[dict[str, Any]], Awaitable[Any]]) -> list[Any]:
        """Each label's /tokenize answer, through the client's ``tokenize`` or its quiet ``probe_tokenize``."""
        labels = self.judge.labels or ()
        body = {"model": self.config.model_name, "add_special_tokens": False, "return_token_strs": True}
        return [await tokenize({**body, "prompt": label.text}) for label in labels]

    def _learn(self, answers: list[Any]) -> None:
        labels = self.judge.labels or ()
        ids: list[int] = []
        for label, answer in zip(labels, answers, strict=True):
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            if not isinstance(tokens, list) or len(tokens) != 1:
                shown = answer.get("token_strs") if isinstance(answer, dict) else None
                self._refuse(
                    f"judge label {label.text!r} is {len(tokens) if isinstance(tokens, list) else 'no'} tokens in the "
                    f"judge's tokenizer ({shown or tokens}), not one: a label's probability is one token's; choose "
                    "labels the tokenizer keeps whole, or a structured verdict"
                )
                return
            ids.append(int(tokens[0]))
        twins = [label.text for label, token in zip(labels, ids, strict=True) if ids.count(token) > 1]
        if twins:
            self._refuse(f"judge labels {', '.join(map(repr, twins))} are the same token in the judge's tokenizer")
            return
        self._ids = tuple(ids)
        logger.info("judge labels %s are tokens %s", [label.text for label in labels], list(ids))

    def _refuse(self, message: str) -> None:
        self._refusal = message
        logger.error("refusing to judge: %s", message)
        self._refused.set()
