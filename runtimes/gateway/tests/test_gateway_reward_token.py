"""A token model scored at a reward token (REWARD_GATEWAY_REWARD_TOKEN_ID, InternLM2-Reward's get_score):
each item goes to vLLM as token ids from vLLM's own tokenizer with exactly one reward token at the end,
and the reward is the value there. Without the setting nothing changes: texts go, and no /tokenize.

vLLM stands in as a recording stub: /tokenize answers a word's id per word (the template's markers
included), /pooling a value per token equal to the token's id, so a reward says which token was last.
The real vLLM's answers: e2e/tests/offline/test_real_vllm_reward_token.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from reward_gateway.config.gateway import ChatTemplate, CoalesceConfig, GatewayConfig
from reward_gateway.items.outcomes import Failure
from reward_gateway.items.wire import ScoringItem
from reward_gateway.scoring.reward_token import with_reward_token
from reward_gateway.scoring.scorer import Scorer

REWARD = 99
BOS = 1
WORDS = {"<s>": BOS, "[R]": REWARD, "user:": 10, "assistant:": 11, "hi": 20, "hello": 21, "there": 22}
TEMPLATE = "{{ bos_token }}{% for m in messages %} {{ m['role'] }}: {{ m['content'] }}{% endfor %}"
CONVERSATION = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
TEMPLATED = [BOS, 10, 20, 11, 21, 22]  # the conversation through TEMPLATE, one BOS


class StubVllm:
    def __init__(self, tokens: Any = None):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.tokens = tokens  # a fixed /tokenize answer's tokens, where set

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        self.calls.append((path, body))
        if path == "/tokenize":
            if self.tokens is not None:
                return {"tokens": self.tokens}
            text = (
                body["prompt"]
                if "prompt" in body
                else "<s>" + "".join(f" {m['role']}: {m['content']}" for m in body["messages"])
            )
            return {"tokens": [WORDS[word] for word in text.replace("<s>", "<s> ").replace("[R]", " [R]").split()]}
        assert path == "/pooling"
        # texts and messages (no reward token set) score 0 at their one "token"
        inputs = [ids if isinstance(ids, list) else [0] for ids in body.get("input", [[0]])]
        return {"data": [{"index": i, "data": [[float(t)] for t in ids]} for i, ids in enumerate(inputs)]}

    async def tokenize(self, body: dict[str, Any]) -> Any:
        return await self.post("/tokenize", body)

    def sent(self, path: str) -> list[dict[str, Any]]:
        return [body for called, body in self.calls if called == path]


def scorer(stub: StubVllm, **settings: Any) -> Scorer:
    config = GatewayConfig(
        upstream_url="http://vllm", model_name="rm", model_kind="token", reward_token_id=REWARD, **settings
    )
    return Scorer(config, stub)  # type: ignore[arg-type]


def score(scorer: Scorer, items: list[ScoringItem]) -> list[float]:
    return [s.reward for s in asyncio.run(scorer.score(items))]


def test_the_reward_token_is_appended_once_unless_the_ids_end_with_it():
    assert with_reward_token([1, 5], REWARD) == [1, 5, REWARD]
    assert with_reward_token([1, 5, REWARD], REWARD) == [1, 5, REWARD]
    assert with_reward_token([], REWARD) == [REWARD]
    assert with_reward_token([REWARD, 5], REWARD) == [REWARD, 5, REWARD]  # only the last position counts


def test_messages_with_vllms_template_go_as_ids_ending_in_one_reward_token():
    """Upstream mode: vLLM's /tokenize templates the conversation (no generation prompt, no added
    special tokens), and /pooling gets those ids plus the reward token, never messages."""
    stub = StubVllm()
    assert score(scorer(stub), [ScoringItem(conversation=CONVERSATION)]) == [float(REWARD)]
    (tokenize,) = stub.sent("/tokenize")
    assert tokenize == {
        "model": "rm",
        "messages": CONVERSATION,
        "add_generation_prompt": False,
        "add_special_tokens": False,
    }
    (pooling,) = stub.sent("/pooling")
    assert pooling["input"] == [[*TEMPLATED, REWARD]]
    assert "messages" not in pooling
    assert (pooling["task"], pooling["use_activation"]) == ("token_classify", False)


def test_the_gateways_rendering_and_finished_text_are_tokenized_as_given():
    """Gateway mode renders the template itself; a trainer's finished text (its BOS in it) is scored as
    given; one already ending with the reward token keeps its one."""
    stub = StubVllm()
    rm = scorer(stub, template_mode="gateway", chat_template=ChatTemplate(TEMPLATE, bos_token="<s>"))
    items = [
        ScoringItem(conversation=CONVERSATION),
        ScoringItem(text="<s> user: hi assistant: hello there"),
        ScoringItem(text="<s> user: hi assistant: hello there[R]"),
    ]
    assert score(rm, items) == [float(REWARD)] * 3
    assert [body["prompt"] for body in stub.sent("/tokenize")] == [
        "<s> user: hi assistant: hello there",
        "<s> user: hi assistant: hello there",
        "<s> user: hi assistant: hello there[R]",
    ]
    assert all(body["add_special_tokens"] is False and "messages" not in body for body in stub.sent("/tokenize"))
    assert [body["input"] for body in stub.sent("/pooling")] == [[[*TEMPLATED, REWARD]]] * 3


def test_a_group_is_one_pooling_call_of_id_lists_in_the_items_order():
    stub = StubVllm()
    items = [ScoringItem(text="<s> user: hi", group="g"), ScoringItem(text="<s> user: hello there", group="g")]
    assert score(scorer(stub), items) == [float(REWARD)] * 2
    (pooling,) = stub.sent("/pooling")
    assert pooling["input"] == [[BOS, 10, 20, REWARD], [BOS, 10, 21, 22, REWARD]]
    assert len(stub.sent("/tokenize")) == 2


def test_merged_calls_carry_ids_through_the_coalescer():
    stub = StubVllm()
    rm = scorer(stub, coalesce=CoalesceConfig(enabled=True))
    assert score(rm, [ScoringItem(text="<s> user: hi"), ScoringItem(conversation=CONVERSATION)]) == [99.0, 99.0]
    inputs = sorted(ids for body in stub.sent("/pooling") for ids in body["input"])
    assert inputs == sorted([[BOS, 10, 20, REWARD], [*TEMPLATED, REWARD]])


def test_without_a_reward_token_texts_and_messages_go_as_before():
    stub = StubVllm()
    rm = scorer(stub)
    rm = Scorer(dataclasses.replace(rm.config, reward_token_id=None), stub)  # type: ignore[arg-type]
    asyncio.run(rm.score([ScoringItem(conversation=CONVERSATION), ScoringItem(text="<s> user: hi")]))
    assert stub.sent("/tokenize") == []
    assert sorted(str(body.get("messages") or body.get("input")) for body in stub.sent("/pooling")) == sorted(
        [str(CONVERSATION), str(["<s> user: hi"])]
    )


@pytest.mark.parametrize("tokens", [None, ["<s>", "hi"], "1 2"])
def test_a_tokenize_answer_without_ids_is_a_bad_upstream_answer(tokens):
    stub = StubVllm(tokens=tokens if tokens is not None else {"no": "ids"})
    [outcome] = asyncio.run(scorer(stub).score([ScoringItem(text="<s> user: hi")]))
    assert isinstance(outcome, Failure) and "no token ids" in outcome.message
    assert (outcome.reason, outcome.status) == ("bad_response", 502)
    assert stub.sent("/pooling") == []
