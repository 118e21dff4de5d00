"""Scores a list of items through vLLM: templating, batching by group, fan-out.

Items of one group go to vLLM in one call, so completions that share a prompt
are scheduled together and vLLM's prefix cache can hit; other items go one per
call. Calls run concurrently (the upstream client bounds how many), and the
scores come back in the order of the items.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from reward_gateway.chat_template import ChatTemplateRenderer
from reward_gateway.config import GatewayConfig
from reward_gateway.errors import BadRequest
from reward_gateway.extract import Score
from reward_gateway.kinds import KINDS
from reward_gateway.upstream import VllmClient
from reward_gateway.wire import ScoringItem


@dataclass
class _Call:
    """One upstream call: the positions of its items and what to send for them."""

    positions: list[int]
    texts: list[str] | None = None
    add_special_tokens: bool = False
    messages: list[dict[str, str]] | None = None


class Scorer:
    def __init__(self, config: GatewayConfig, client: VllmClient):
        self.config = config
        self.client = client
        self.kind = KINDS[config.model_kind]
        self._fields = self.kind.request_fields()
        self.renderer = None
        if config.template_mode == "gateway" and config.chat_template is not None:
            self.renderer = ChatTemplateRenderer(config.chat_template)

    async def score(self, items: list[ScoringItem]) -> list[Score]:
        calls = self.plan(items)
        results: list[Score | None] = [None] * len(items)

        async def run(call: _Call) -> None:
            scores = await self._send(call)
            for position, score in zip(call.positions, scores, strict=True):
                results[position] = score

        if len(calls) == 1:  # most requests: no task to create, nothing to cancel
            await run(calls[0])
            return results  # type: ignore[return-value]
        try:
            # A TaskGroup cancels the other calls as soon as one fails: the
            # request is lost anyway, and vLLM's time is better spent elsewhere.
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(run(call))
        except ExceptionGroup as failures:
            raise failures.exceptions[0] from None
        return results  # type: ignore[return-value]

    def plan(self, items: list[ScoringItem]) -> list[_Call]:
        """Turn items into calls; raises BadRequest before anything is sent."""
        calls: list[_Call] = []
        by_group: dict[tuple[str, bool], _Call] = {}
        for position, item in enumerate(items):
            if item.conversation is not None and self.renderer is None:
                # vLLM templates one conversation per request with the model's own template.
                self._check_step_tags(item.conversation[-1]["content"])
                calls.append(_Call([position], messages=item.conversation))
                continue
            text, add_special_tokens = self._text(item)
            self._check_step_tags(text)
            if item.group is None:
                calls.append(_Call([position], [text], add_special_tokens))
                continue
            key = (item.group, add_special_tokens)
            call = by_group.get(key)
            if call is None:
                call = by_group[key] = _Call([], [], add_special_tokens)
                calls.append(call)
            call.positions.append(position)
            call.texts.append(text)  # type: ignore[union-attr]
        return calls

    def _text(self, item: ScoringItem) -> tuple[str, bool]:
        """The text to send and whether vLLM should add special tokens to it.

        Rendered templates already hold BOS, so vLLM must add nothing. Text from
        trainers is normalised to start with exactly one BOS when the gateway
        knows it; otherwise vLLM adds the model's own, as verl expects.
        """
        if item.conversation is not None:
            return self.renderer.render(item.conversation), False  # type: ignore[union-attr]
        text = item.text or ""
        bos = self.config.known_bos
        if not bos:
            return text, True
        while text.startswith(bos):
            text = text[len(bos) :]
        return bos + text, False

    def _check_step_tags(self, text: str) -> None:
        if self.config.model_kind == "process" and self.config.step_tag not in text:
            raise BadRequest(
                f"a process reward model scores steps ending in {self.config.step_tag!r}; "
                "this item has none (send steps, or put the tag after each step)"
            )

    async def _send(self, call: _Call) -> list[Score]:
        body: dict[str, Any] = {"model": self.config.model_name}
        if call.messages is not None:
            body["messages"] = call.messages
        else:
            body["input"] = call.texts
            body["add_special_tokens"] = call.add_special_tokens
        if self.config.truncate_prompt_tokens is not None:
            body["truncate_prompt_tokens"] = self.config.truncate_prompt_tokens
        body.update(self._fields)
        response = await self.client.post(self.kind.path, body)
        return self.kind.extract(response, len(call.positions), self.config.step_aggregate)
