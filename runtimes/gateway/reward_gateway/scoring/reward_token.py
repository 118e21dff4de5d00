"""Token ids ending in the reward token, for token reward models scored at one (InternLM2-Reward).

InternLM2-Reward's own scorer (``get_score`` in its modeling file) applies the chat template,
tokenizes the text, appends ``config.reward_token_id`` and reads the value at that last position;
its forward asserts the last token is the reward token. vLLM appends nothing (its
InternLM2ForRewardModel only runs the value head over every token), so the gateway does what the
model's scorer does: it asks vLLM's own tokenizer for the ids of the templated conversation (the
text the gateway rendered, a trainer's finished text, or ``messages`` with vLLM's template), appends
the reward token unless the ids already end with it, and sends ids. Ids and not the token's text:
an added token's text is split out before the rest is tokenized, but one whose ``lstrip`` is set
eats the whitespace before it (a template's closing newline), and the ids would then differ from
the model's scorer's.

With the ids in hand the gateway knows each item's length: one longer than the model's context
(/tokenize's ``max_model_len``) fails alone before vLLM is asked to score it, and so does one that
/tokenize refuses (reward_gateway.items.outcomes).
"""

from __future__ import annotations

from typing import Any

from reward_gateway.items.errors import UpstreamError, all_or_first_failure, forget
from reward_gateway.items.outcomes import TOO_LONG_MARK, Failure, failure_of
from reward_gateway.upstream.client import VllmClient

# An item's ids, or its failure.
Tokenized = list[int] | Failure


def with_reward_token(ids: list[int], reward_token_id: int) -> list[int]:
    """``ids`` ending in exactly one reward token: appended, unless the text already ended with it."""
    if ids and ids[-1] == reward_token_id:
        return ids
    return [*ids, reward_token_id]


class RewardTokenizer:
    """Tokenizes through vLLM's /tokenize (the served tokenizer and chat template) and appends the reward token."""

    def __init__(self, client: VllmClient, model_name: str, reward_token_id: int):
        self.client = client
        self.model_name = model_name
        self.reward_token_id = reward_token_id

    async def texts(self, texts: list[str]) -> list[Tokenized]:
        """Each finished text's ids (no special tokens added: a rendered template writes its own BOS)."""
        results: list[Tokenized] = [[] for _ in texts]

        async def one(position: int, text: str) -> None:
            results[position] = await self._tokenized({"prompt": text, "add_special_tokens": False})

        await all_or_first_failure([one(position, text) for position, text in enumerate(texts)])
        return results

    async def conversation(self, messages: list[dict[str, Any]]) -> Tokenized:
        """The conversation templated by vLLM as /pooling would (no generation prompt, the template's BOS only)."""
        return await self._tokenized(
            {"messages": messages, "add_generation_prompt": False, "add_special_tokens": False}
        )

    async def _tokenized(self, body: dict[str, Any]) -> Tokenized:
        try:
            return self._ending(await self.client.tokenize({"model": self.model_name, **body}))
        except UpstreamError as error:
            failure = failure_of(error)
            forget(error)
            return failure

    def _ending(self, answer: Any) -> Tokenized:
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise UpstreamError("bad_response", 502, "vLLM's /tokenize answer holds no token ids")
        ids = with_reward_token(tokens, self.reward_token_id)
        limit = answer.get("max_model_len")
        if isinstance(limit, int) and not isinstance(limit, bool) and len(ids) > limit:
            message = (
                f"This model's {TOO_LONG_MARK} is {limit} tokens; the item is {len(ids)} with its reward token "
                "(not sent to vLLM to score)"
            )
            return Failure("too_long", message, retry=False)
        return ids
