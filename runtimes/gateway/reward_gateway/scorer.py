"""Scores a list of items through vLLM: templating, batching by group, fan-out.

Items of one group go to vLLM in one call, so completions that share a prompt
are scheduled together and vLLM's prefix cache can hit; other items go one per
call. Calls run concurrently (the upstream client bounds how many), and the
scores come back in the order of the items. Calls of texts go through the model's
coalescer where it is on (reward_gateway.coalesce): merged with other requests'
calls into fewer vLLM calls, queued fairly by client.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from reward_gateway.chat_template import ChatTemplateRenderer
from reward_gateway.coalesce import Coalescer, QueueObserver
from reward_gateway.config import GatewayConfig
from reward_gateway.errors import BadRequest, UpstreamError, all_or_first_failure
from reward_gateway.extract import Score
from reward_gateway.kinds import CallBody
from reward_gateway.reward_token import TOKENIZE_PATH, RewardTokenizer
from reward_gateway.upstream import VllmClient
from reward_gateway.wire import ScoringItem

logger = logging.getLogger("reward_gateway")


@dataclass
class _Call:
    """One upstream call: the positions of its items and what to send for them (reward_gateway.kinds.CallBody)."""

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

    async def score(self, items: list[ScoringItem], client: str = "default") -> list[Score]:
        """Scores in the items' order; ``client``: who asks, for the fair share of the coalescer's queue."""
        if self.renderer is not None and self.renderer.needs_bos:
            await self._learn_bos()
        calls = self.plan(items)
        results: list[Score | None] = [None] * len(items)

        async def run(call: _Call) -> None:
            scores = await self._send(call, client)
            for position, score in zip(call.positions, scores, strict=True):
                results[position] = score

        if len(calls) == 1:  # most requests: no task to create, nothing to cancel
            await run(calls[0])
            return results  # type: ignore[return-value]
        await all_or_first_failure([run(call) for call in calls])
        return results  # type: ignore[return-value]

    def plan(self, items: list[ScoringItem]) -> list[_Call]:
        """Turn items into calls; raises BadRequest before anything is sent."""
        calls: list[_Call] = []
        by_group: dict[str, _Call] = {}
        for position, item in enumerate(items):
            if item.conversation is not None and self.renderer is None:
                # vLLM templates one conversation per request with the model's own template.
                self._check_step_tags(item.conversation[-1]["content"])
                calls.append(_Call([position], messages=item.conversation))
                continue
            text = item.text if item.conversation is None else self.renderer.render(item.conversation)  # type: ignore[union-attr]
            self._check_step_tags(text or "")
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
            marked = await self.client.post(TOKENIZE_PATH, {**probe, "add_special_tokens": True})
            plain = await self.client.post(TOKENIZE_PATH, {**probe, "add_special_tokens": False})
            bos = special_prefix(marked, plain)
            self.renderer.learnt_bos(bos)  # type: ignore[union-attr]
            logger.info("the chat template's bos_token is %r, learnt from vLLM's tokenizer", bos)

    def _check_step_tags(self, text: str) -> None:
        if self.kind.steps and self.config.step_tag not in text:
            raise BadRequest(
                f"a {self.kind.name} reward model scores steps ending in {self.config.step_tag!r}; "
                "this item has none (send steps, or put the tag after each step)"
            )

    async def _send(self, call: _Call, client: str) -> list[Score]:
        inputs: list[Any] | None = call.texts
        if self.reward_tokenizer is not None:
            # vLLM appends nothing and cannot append after its own template: the ids go instead.
            if call.messages is not None:
                inputs = [await self.reward_tokenizer.conversation(call.messages)]
            else:
                inputs = await self.reward_tokenizer.texts(call.texts or [])
        if inputs is not None and self.coalescer is not None:
            response: Any = {"data": await self.coalescer.call(inputs, client)}
        else:
            body = self.body.of_messages(call.messages or []) if inputs is None else self.body.of_inputs(inputs)
            response = await self.client.post(self.body.path, body)
        scores = self.kind.extract(response, len(call.positions), self.config.step_aggregate)
        if self.kind.steps:
            self._check_step_count(call, scores)
        return scores

    def _check_step_count(self, call: _Call, scores: list[Score]) -> None:
        """vLLM scores the tokens whose id is its step_tag_id (model.stepTagId): as many steps as the input
        holds step tags, or that id is not the tag's and the numbers are some other tokens'. Fewer only
        where vLLM truncated the input (truncatePromptTokens)."""
        tag = self.config.step_tag
        if call.messages is not None:
            tags = [sum(str(message.get("content") or "").count(tag) for message in call.messages)]
        else:
            tags = [text.count(tag) for text in call.texts or []]
        for score, count in zip(scores, tags, strict=True):
            steps = len(score.step_scores or [])
            truncated = self.config.truncate_prompt_tokens is not None and steps < count
            if steps != count and not truncated:
                raise UpstreamError(
                    "bad_response",
                    502,
                    f"vLLM scored {steps} steps where the input holds {count} step tags {tag!r}: its step_tag_id "
                    "(model.stepTagId) is not the token id of the step tag (gateway.stepTag)",
                )


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
