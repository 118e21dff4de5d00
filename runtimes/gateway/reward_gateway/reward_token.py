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
"""

from __future__ import annotations

from typing import Any

from reward_gateway.errors import UpstreamError, all_or_first_failure
from reward_gateway.upstream import VllmClient

TOKENIZE_PATH = "/tokenize"


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

    async def texts(self, texts: list[str]) -> list[list[int]]:
        """Each finished text's ids (no special tokens added: a rendered template writes its own BOS)."""
        results: list[list[int]] = [[] for _ in texts]

        async def one(position: int, text: str) -> None:
            body = {"model": self.model_name, "prompt": text, "add_special_tokens": False}
            results[position] = self._ending(await self.client.post(TOKENIZE_PATH, body))

        await all_or_first_failure([one(position, text) for position, text in enumerate(texts)])
        return results

    async def conversation(self, messages: list[dict[str, Any]]) -> list[int]:
        """The conversation templated by vLLM as /pooling would (no generation prompt, the template's BOS only)."""
        body = {
            "model": self.model_name,
            "messages": messages,
            "add_generation_prompt": False,
            "add_special_tokens": False,
        }
        return self._ending(await self.client.post(TOKENIZE_PATH, body))

    def _ending(self, answer: Any) -> list[int]:
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise UpstreamError("bad_response", 502, "vLLM's /tokenize answer holds no token ids")
        return with_reward_token(tokens, self.reward_token_id)
