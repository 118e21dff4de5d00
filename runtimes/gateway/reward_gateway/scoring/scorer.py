"""Scores a list of items through vLLM: templating, batching by group, fan-out.

Items of one group go to vLLM in one call, so completions that share a prompt
are scheduled together and vLLM's prefix cache can hit; other items go one per
call. Calls run concurrently (the upstream client bounds how many), and each
item's score, or its failure, comes back in the order of the items: one bad item
fails alone (reward_gateway.items.outcomes, reward_gateway.scoring.per_item). Calls of texts go
through the model's coalescer where it is on (reward_gateway.scoring.coalesce): merged with
other requests' calls into fewer vLLM calls, queued fairly by client.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.items.errors import BadRequest, UpstreamError, all_or_first_failure, forget
from reward_gateway.items.extract import Score, ordered_data
from reward_gateway.items.kinds import CallBody, ModelKind
from reward_gateway.items.outcomes import Failure, Outcome, failure_of
from reward_gateway.items.wire import ScoringItem
from reward_gateway.scoring.chat_template import ChatTemplateRenderer
from reward_gateway.scoring.coalesce import Coalescer, QueueObserver
from reward_gateway.scoring.per_item import answer_each
from reward_gateway.scoring.reward_token import RewardTokenizer
from reward_gateway.signals.metrics import GatewayMetrics
from reward_gateway.upstream.client import VllmClient

logger = logging.getLogger("reward_gateway")


@dataclass
class _Call:
    """One upstream call: the positions of its items and what to send for them (reward_gateway.items.kinds.CallBody)."""

    positions: list[int]
    texts: list[str] | None = None
    messages: list[dict[str, Any]] | None = None


class Scorer:
    def __init__(self, config: GatewayConfig, client: VllmClient, observer: QueueObserver | None = None):
        self.config = config
        self.client = client
        self.kind = config.kind
        self.body = CallBody(config.model_name, self.kind, config.truncate_prompt_tokens)
        self.renderer = None
        # A model scored at a reward token (model.rewardTokenId) is sent token ids, not texts.
        self.reward_tokenizer: RewardTokenizer | None = None
        if config.reward_token_id is not None:
            self.reward_tokenizer = RewardTokenizer(client, config.model_name, config.reward_token_id)
        if config.template_mode == "gateway" and config.chat_template is not None:
            self.renderer = ChatTemplateRenderer(config.chat_template)
        self._learning_bos = asyncio.Lock()
        self.coalescer: Coalescer | None = None
        if config.coalesce.enabled:
            self.coalescer = Coalescer(client, self.body, config.coalesce, config.request_timeout_s, observer)

    async def check_at_start(self) -> None:
        """Nothing: a pooled kind's settings are vLLM's own arguments, which vLLM checks as it starts."""

    async def refusal(self) -> str:
        """Never: nothing of a pooled kind's settings is refused once it serves."""
        return await asyncio.get_running_loop().create_future()  # never set

    async def score(self, items: list[ScoringItem], client: str = "default") -> list[Outcome]:
        """Each item's score or failure, in the items' order; ``client``: who asks, for the fair share of the
        coalescer's queue. One item's failure is its own (reward_gateway.items.outcomes); only what fails every
        item before anything is sent (the BOS not learnt from vLLM) raises."""
        if self.renderer is not None and self.renderer.needs_bos:
            await self._learn_bos()
        outcomes: list[Outcome | None] = [None] * len(items)
        calls = self.plan(items, outcomes)

        async def run(call: _Call) -> None:
            for position, outcome in zip(call.positions, await self._send(call, client), strict=True):
                outcomes[position] = outcome

        if len(calls) == 1:  # most requests: no task to create, nothing to cancel
            await run(calls[0])
        elif calls:  # only a bug raises here: it cancels the other calls
            await all_or_first_failure([run(call) for call in calls])
        return outcomes  # type: ignore[return-value]

    def plan(self, items: list[ScoringItem], outcomes: list[Outcome | None]) -> list[_Call]:
        """Turn items into calls; an item the gateway refuses (no step tag, a template that rejects it) gets
        its failure in ``outcomes`` and no call."""
        calls: list[_Call] = []
        by_group: dict[str, _Call] = {}
        for position, item in enumerate(items):
            try:
                if item.conversation is not None and self.renderer is None:
                    # vLLM templates one conversation per request with the model's own template.
                    self._check_step_tags(item.conversation[-1]["content"])
                    calls.append(_Call([position], messages=item.conversation))
                    continue
                text = item.text if item.conversation is None else self.renderer.render(item.conversation)  # type: ignore[union-attr]
                self._check_step_tags(text or "")
            except BadRequest as error:
                outcomes[position] = failure_of(error)
                continue
            if item.group is None:
                calls.append(_Call([position], [text or ""]))
                continue
            call = by_group.get(item.group)
            if call is None:
                call = by_group[item.group] = _Call([], [])
                calls.append(call)
            call.positions.append(position)
            call.texts.append(text or "")  # type: ignore[union-attr]
        return calls

    async def _learn_bos(self) -> None:
        """Learn the served tokenizer's BOS text from vLLM, once (its /tokenize route).

        The tokens vLLM adds in front of a text with add_special_tokens on are
        the BOS (none for tokenizers without one, e.g. Qwen's); their strings
        are what a chat template writes as bos_token."""
        async with self._learning_bos:
            if not self.renderer.needs_bos:  # type: ignore[union-attr]
                return
            probe = {"model": self.config.model_name, "prompt": "reward", "return_token_strs": True}
            marked = await self.client.tokenize({**probe, "add_special_tokens": True})
            plain = await self.client.tokenize({**probe, "add_special_tokens": False})
            bos = special_prefix(marked, plain)
            self.renderer.learnt_bos(bos)  # type: ignore[union-attr]
            logger.info("the chat template's bos_token is %r, learnt from vLLM's tokenizer", bos)

    def _check_step_tags(self, text: str) -> None:
        if self.kind.steps and self.config.step_tag not in text:
            raise BadRequest(
                f"a {self.kind.name} reward model scores steps ending in {self.config.step_tag!r}; "
                "this item has none (send steps, or put the tag after each step)"
            )

    async def _send(self, call: _Call, client: str) -> list[Outcome]:
        """The call's outcomes, one per item: its texts (or ids) answered one by one where vLLM refuses some."""
        answered: list[Any] = [None] * len(call.positions)

        def settle(position: int, answer: Any) -> None:
            answered[position] = answer

        inputs: list[Any] | None = call.texts
        if self.reward_tokenizer is not None:
            # vLLM appends nothing and cannot append after its own template: the ids go instead.
            if call.messages is not None:
                tokenized = [await self.reward_tokenizer.conversation(call.messages)]
            else:
                tokenized = await self.reward_tokenizer.texts(call.texts or [])
            inputs = []
            for position, ids in enumerate(tokenized):
                if isinstance(ids, Failure):
                    settle(position, ids)  # over the model's context, or refused: vLLM is not asked to score it
                else:
                    inputs.append(ids)
        sent = [position for position, answer in enumerate(answered) if answer is None]
        if inputs is None:  # a conversation for vLLM to template: one item, one call
            await answer_each(self._post_messages, [call.messages], settle)
        elif inputs:
            post = self._post_inputs if self.coalescer is None else functools.partial(self._coalesced, client)

            def settle_sent(index: int, answer: Any) -> None:
                settle(sent[index], answer)

            await answer_each(post, inputs, settle_sent)
        return [self._outcome(call, position, answer) for position, answer in enumerate(answered)]

    async def _post_inputs(self, inputs: list[Any]) -> list[dict[str, Any]]:
        response = await self.client.post(self.body.path, self.body.of_inputs(inputs))
        return ordered_data(response, len(inputs))

    async def _post_messages(self, conversations: list[Any]) -> list[dict[str, Any]]:
        response = await self.client.post(self.body.path, self.body.of_messages(conversations[0]))
        return ordered_data(response, 1)

    async def _coalesced(self, client: str, inputs: list[Any]) -> list[Any]:
        """The coalescer answers each input itself (an entry, or its item's failure): never a refusal to halve."""
        return await self.coalescer.call(inputs, client)  # type: ignore[union-attr]

    def _outcome(self, call: _Call, position: int, answer: Any) -> Outcome:
        """An item's Score from its entry of vLLM's answer (a malformed entry is its failure), or its failure."""
        if isinstance(answer, Failure):
            return answer
        try:
            score = self.kind.score(answer, self.config.step_aggregate)
            if not math.isfinite(score.reward):  # JSON would carry it as null, or not at all: never a reward
                raise UpstreamError("bad_response", 502, f"vLLM answered a reward that is not finite ({score.reward})")
            if self.kind.steps:
                self._check_step_count(call, position, score)
        except UpstreamError as error:
            failure = failure_of(error)
            forget(error)
            return failure
        return score

    def _check_step_count(self, call: _Call, position: int, score: Score) -> None:
        """vLLM scores the tokens whose id is its step_tag_id (model.stepTagId): as many steps as the input
        holds step tags, or that id is not the tag's and the numbers are some other tokens'. Fewer only
        where vLLM truncated the input (truncatePromptTokens)."""
        tag = self.config.step_tag
        if call.messages is not None:
            count = sum(str(message.get("content") or "").count(tag) for message in call.messages)
        else:
            count = (call.texts or [])[position].count(tag)
        steps = len(score.step_scores or [])
        truncated = self.config.truncate_prompt_tokens is not None and steps < count
        if steps != count and not truncated:
            raise UpstreamError(
                "bad_response",
                502,
                f"vLLM scored {steps} steps where the input holds {count} step tags {tag!r}: its step_tag_id "
                "(model.stepTagId) is not the token id of the step tag (gateway.stepTag)",
            )


class ItemScorer(Protocol):
    """What scores a request's items with one model: the pooled scorer above, or a judge's
    (reward_gateway.judge.scorer)."""

    kind: ModelKind

    async def score(self, items: list[ScoringItem], client: str = "default") -> list[Outcome]: ...

    async def check_at_start(self) -> None:
        """What the scorer checks with vLLM once it answers (a judge's labels), without waking it; raises
        JudgeRefused where it refuses."""

    async def refusal(self) -> str:
        """Why the scorer refuses its settings, once it does (at the check or at a request): every request
        fails with it from then on, and the server ends the process (reward_gateway.http.server)."""


def make_scorer(
    config: GatewayConfig,
    client: VllmClient,
    observer: QueueObserver | None,
    metrics: GatewayMetrics,
) -> ItemScorer:
    """The scorer of the model's kind."""
    if config.kind.judge:
        from reward_gateway.judge.scorer import JudgeScorer  # jinja2 and the verdicts, for judges only

        return JudgeScorer(config, client, metrics)
    return Scorer(config, client, observer)


def special_prefix(marked: Any, plain: Any) -> str:
    """The text of the tokens vLLM's /tokenize put before the text itself (the BOS)."""
    try:
        tokens, strings, bare = marked["tokens"], marked["token_strs"], plain["tokens"]
        for start in range(len(tokens) - len(bare) + 1):
            if tokens[start : start + len(bare)] == bare:
                return "".join(strings[:start])
    except (KeyError, TypeError):
        pass
    raise UpstreamError("bad_response", 502, "vLLM's /tokenize answer does not show the tokenizer's BOS")
