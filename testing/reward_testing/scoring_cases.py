"""What the real-vLLM tests send and what transformers is asked for the same items: one source for
the local processes (e2e/tests/offline/test_real_vllm_parity.py) and the real node
(e2e/tests/node/test_real_node_rewards.py), so both check the same texts."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from reward_testing.prometheus_text import sample_sum
from reward_testing.tiny_model_maker import BOS, STEP_TAG, WORD_LIST

TOLERANCE = 1e-4


def assert_close(got: list[float], want: list[float]) -> None:
    """Each score within TOLERANCE of the reference's, and as many of them."""
    assert len(got) == len(want)
    assert all(abs(g - w) <= TOLERANCE for g, w in zip(got, want, strict=True)), (got, want)


def assert_same_ids(seen: list[list[int]], references: list[dict], bos_token_id: int) -> None:
    """vLLM was given exactly transformers' ids for these items (in any order, from its request log), each
    with one BOS, at its start: the template applied once."""
    assert sorted(seen) == sorted(reference["ids"] for reference in references)
    for ids in seen:
        assert ids.count(bos_token_id) == 1 and ids[0] == bos_token_id, ids


# A chat template of the spec's own (model.chatTemplate), unlike the tokenizer's: it must be the one
# applied, by vLLM (upstream) or by the gateway, and only once.
SPEC_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}### {{ message['role'] }}:\n{{ message['content'] }}\n{% endfor %}"
)

CONVERSATION = [
    {"role": "system", "content": "solve the question step by step"},
    {"role": "user", "content": "what is two plus three?"},
    {"role": "assistant", "content": "two plus three equals five. the answer is five!"},
]
PROMPT, RESPONSE = "find the sum of four and seven", "four plus seven equals ten. maybe the total is new"
STEPS = ["four plus seven", "equals ten.", "the answer is ten"]
STEPPED = "".join(step + STEP_TAG for step in STEPS)  # the gateway's rendering of steps
TAGGED = [*CONVERSATION[:2], {"role": "assistant", "content": f"two plus three{STEP_TAG}is five{STEP_TAG}"}]
# OpenRLHF's query: the policy's rendering, its BOS included, scored as given
SPEC_QUERY = f"{BOS}### user:\n{PROMPT}\n### assistant:\n{RESPONSE}\n"
OWN_QUERY = f"{BOS}<|user|>{PROMPT}<|end|><|assistant|>{RESPONSE}<|end|>"
STEPPED_QUERY = f"{BOS}<|user|>{PROMPT}<|end|><|assistant|>{STEPPED}<|end|>"


def prompt_response(prompt: str, response: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


# What transformers is asked, per kind: name -> item (reward_testing.tiny_models.reference_scores).
REFERENCE_ITEMS = {
    "sequence": {
        "conversation": {"messages": CONVERSATION, "chat_template": SPEC_TEMPLATE},
        "prompt_response": {"messages": prompt_response(PROMPT, RESPONSE), "chat_template": SPEC_TEMPLATE},
        "query": {"text": SPEC_QUERY},
        # verl's /classify: the RM's rendering with the BOS stripped; vLLM adds the model's own
        "verl": {"text": SPEC_QUERY.removeprefix(BOS), "add_special_tokens": True},
    },
    "token": {
        "conversation": {"messages": CONVERSATION},
        "prompt_response": {"messages": prompt_response(PROMPT, RESPONSE)},
        "query": {"text": OWN_QUERY},
    },
    "process": {
        "steps": {"messages": prompt_response(PROMPT, STEPPED)},
        "tagged": {"messages": TAGGED},
        "query": {"text": STEPPED_QUERY},
    },
}


# Past the tiny models' 1024 positions: vLLM's max_model_len for them (model.maxModelLen unset).
OVER_LONG = " ".join(["reward"] * 3000)


def assert_one_failure(answer: dict, index: int) -> None:
    """The item at ``index`` answered as a failure with vLLM's reason (over the context), no number in its place."""
    assert answer["rewards"][index] is None
    [failure] = answer["failures"]
    assert (failure["index"], failure["reason"], failure["retry"]) == (index, "too_long", False), failure
    assert "maximum context length" in failure["message"]


def finished_text(request: int, item: int, steps: bool = False) -> str:
    """A finished text for item ``item`` of request ``request`` (a process model's: two steps, each tagged)."""
    words = WORD_LIST.split()
    text = " ".join(words[(request * 7 + item * 13 + i * 5) % len(words)] for i in range(4 + (request + item) % 9))
    return f"{text}{STEP_TAG}{text} again{STEP_TAG}" if steps else text


def coalesced_with_a_bad_item(
    gateway: str, references: Callable[[list[str]], list[dict[str, Any]]], steps: bool = False
) -> dict[str, float]:
    """64 concurrent /v1/rewards requests of 1-4 finished texts to a coalescing gateway, request 17 carrying an
    item over the model's context between two good ones: that item alone fails, in its own request's answer,
    and every other item is scored at ``references``' numbers (transformers'). The figures: the largest
    |diff|, the items scored, and the vLLM calls they took."""
    queries = [[finished_text(i, j, steps) for j in range(1 + i % 4)] for i in range(64)]
    bad = OVER_LONG + (STEP_TAG if steps else "")
    queries[17] = [finished_text(1, 0, steps), bad, finished_text(1, 2, steps)]

    def ask(query: list[str]) -> httpx.Response:
        return httpx.post(f"{gateway}/v1/rewards", json={"items": [{"text": t} for t in query]}, timeout=600)

    with ThreadPoolExecutor(len(queries)) as pool:
        answers = list(pool.map(ask, queries))
    good = sorted({text for query in queries for text in query if text != bad})
    reference = dict(zip(good, references(good), strict=True))
    diffs = []
    for index, (query, answer) in enumerate(zip(queries, answers, strict=True)):
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if index == 17:
            assert_one_failure(body, 1)
        else:
            assert "failures" not in body, body
        scored = zip(query, body["rewards"], strict=True)
        diffs += [abs(reward - reference[text]["reward"]) for text, reward in scored if text != bad]
    metrics = httpx.get(f"{gateway}/metrics").text
    assert sample_sum(metrics, "reward_gateway_item_failures_total") == 1
    calls = sample_sum(metrics, "reward_gateway_upstream_batch_items_count")
    assert max(diffs) <= TOLERANCE, max(diffs)
    return {"max_diff": max(diffs), "scored": len(diffs), "calls": calls}
