"""A judge's rewards through the gateway equal transformers' numbers for the same tokens, with a real vLLM
(the pinned CPU build) serving a tiny random-weight judge (a causal LM whose tokenizer keeps Yes, No and
1..9 whole).

Everything as the operator renders it: RewardModels of kind judge that differ only in spec.judge (so one
vLLM, on the vllm-generate-cpu runtime's command line, serves them all), each with its gateway run from its
rendered environment. Label probabilities must equal transformers' softmax over the whole vocabulary at the
verdict position, renormalised over the labels, within 1e-4, on every route; the tokens vLLM saw (its
request log) must be transformers' ``apply_chat_template(..., add_generation_prompt=True)``: the judge's
template once, one BOS. A structured verdict always parses under vLLM's structured output and is the same
on a repeat; one cut short by maxTokens, or outside the judge's range, is that item's failure (no_verdict),
never a number, and one over the judge's context fails alone: the rest of its request is judged. A label
the judge's tokenizer splits stops the gateway, naming it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from reward_operator.render import render_reward_model
from reward_testing.gateway_process import LOCAL_MEMORY_LIMIT_BYTES, local_gateway, post_ok, rendered_gateway
from reward_testing.judge_cases import JUDGED_ITEMS, JUDGES, judge_references, judge_reward_model
from reward_testing.ports import free_port
from reward_testing.scoring_cases import assert_close, assert_same_ids
from reward_testing.tiny_models import TinyModel, make_tiny_models
from reward_testing.vllm_server import VllmServer, started_vllm, wait_healthy

RUNTIME = "vllm-generate-cpu"


class Judged:
    """The tiny judge behind one real vLLM, and a gateway per judge of JUDGES."""

    def __init__(self, model: TinyModel, vllm: VllmServer, gateways: dict[str, str]):
        self.model, self.vllm, self.gateways = model, vllm, gateways
        self._read = 0

    def seen_ids(self) -> list[list[int]]:
        """The prompt token ids of the chat completions vLLM received since the last look."""
        text = self.vllm.log_text()
        new, self._read = text[self._read :], len(text)
        found = re.findall(r"Request chatcmpl-\S+ details: .*?prompt_token_ids: (\[[\d, ]*\])", new)
        return [ast.literal_eval(ids) for ids in found]

    def reference(self, judge: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return judge_references(self.model, JUDGES[judge], items)


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Iterator[Judged]:
    model = make_tiny_models(tmp_path_factory.mktemp("judge-model"), ("judge",))["judge"]
    workdir = tmp_path_factory.mktemp("judge")
    rendered = {name: render_reward_model(judge_reward_model(name)) for name in JUDGES}
    isvcs = {name: next(c for c in children if c["kind"] == "InferenceService") for name, children in rendered.items()}
    predictors = {json.dumps(isvc["spec"]["predictor"]) for isvc in isvcs.values()}
    assert len(predictors) == 1, "the judges differ in their gateways only"
    with ExitStack() as stack:
        vllm = stack.enter_context(
            started_vllm(next(iter(isvcs.values())), model.path, workdir / "vllm", runtime=RUNTIME)
        )
        wait_healthy(vllm)
        gateways = {
            name: stack.enter_context(local_gateway(*rendered_gateway(isvc), vllm.url, workdir / f"gateway-{name}.log"))
            for name, isvc in isvcs.items()
            if name != "split_label"
        }
        yield Judged(model, vllm, gateways)


def assert_seen(judged: Judged, references: list[dict[str, Any]]) -> None:
    """vLLM saw transformers' ids for these items (any order): the judge's template once, one BOS."""
    assert_same_ids(judged.seen_ids(), references, judged.model.bos_token_id)


@pytest.mark.parametrize("judge", ["yes_no", "scale"])
def test_label_probabilities_equal_transformers_on_every_route(judged, judge):
    url = judged.gateways[judge]
    judged.seen_ids()
    items = JUDGED_ITEMS
    references = judged.reference(judge, items)
    rewards = post_ok(url, "/v1/rewards", {"items": items})["rewards"]
    predict = post_ok(url, "/v1/models/tiny-judge:predict", {"instances": items[:1]})["predictions"]
    # OpenRLHF: the query is prompt + response, its prompts say where the response starts, its labels are references
    openrlhf_item = items[0]
    query = {"query": [openrlhf_item["prompt"] + openrlhf_item["response"]], "prompts": [openrlhf_item["prompt"]]}
    query["labels"] = [openrlhf_item["reference"]]
    openrlhf = post_ok(url, "/get_reward", query)["rewards"]
    want = [reference["reward"] for reference in references]
    assert_close(rewards + predict + openrlhf, [*want, want[0], want[0]])
    assert_seen(judged, [*references, references[0], references[0]])


def test_the_labels_share_of_probability_is_exported(judged):
    url = judged.gateways["yes_no"]
    (reference,) = judged.reference("yes_no", JUDGED_ITEMS[:1])
    before = _share_sum(url)
    post_ok(url, "/v1/rewards", {"items": JUDGED_ITEMS[:1]})
    assert abs(_share_sum(url) - before - reference["label_share"]) < 1e-6


def _share_sum(url: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(r'^reward_gateway_judge_label_share_sum\{model="tiny-judge"\} (\S+)$', metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("judge", ["json", "choice"])
def test_a_structured_verdict_parses_is_in_range_and_the_same_on_a_repeat(judged, judge):
    url = judged.gateways[judge]
    first = post_ok(url, "/v1/rewards", {"items": JUDGED_ITEMS})["rewards"]
    again = post_ok(url, "/v1/rewards", {"items": list(reversed(JUDGED_ITEMS))})["rewards"]
    assert first == list(reversed(again))
    structured = JUDGES[judge]["structured"]
    allowed = [choice["value"] for choice in structured.get("choices", [])]
    for reward in first:
        if allowed:
            assert reward in allowed
        else:
            assert structured["minimum"] <= reward <= structured["maximum"] and reward == int(reward)


def test_a_verdict_cut_short_by_max_tokens_is_each_items_failure_never_a_number(judged):
    answer = post_ok(judged.gateways["cut"], "/v1/rewards", {"items": JUDGED_ITEMS})
    assert answer["rewards"] == [None] * len(JUDGED_ITEMS)
    for index, failure in enumerate(answer["failures"]):
        assert (failure["index"], failure["reason"], failure["retry"]) == (index, "no_verdict", False)
        assert "cut short at maxTokens (2 tokens)" in failure["message"], failure


def test_eight_items_of_which_one_fails_answer_seven_rewards_at_transformers_numbers_and_one_failure(judged):
    """One item's judge prompt is over the judge's context (1024 positions): vLLM refuses it alone, and the seven
    others are judged at transformers' numbers in the same request."""
    items = [{"prompt": f"question {i} is the river green", "response": f" answer {i}", "group": "g"} for i in range(8)]
    items[3] = {**items[3], "response": " water" * 1100}
    references = judged.reference("yes_no", [item for i, item in enumerate(items) if i != 3])
    answer = post_ok(judged.gateways["yes_no"], "/v1/rewards", {"items": items})
    assert [(f["index"], f["reason"], f["retry"]) for f in answer["failures"]] == [(3, "too_long", False)]
    assert "maximum context length" in answer["failures"][0]["message"]
    assert answer["rewards"][3] is None
    assert_close([r for i, r in enumerate(answer["rewards"]) if i != 3], [r["reward"] for r in references])


def test_eight_structured_verdicts_of_which_one_is_out_of_range_answer_seven_rewards_and_one_failure(judged, tmp_path):
    """vLLM's structured output keeps each verdict inside the JSON schema (1..5), compact: sixteen items judged
    once all parse. The judge's own range may be narrower, and a verdict outside it is that item's failure: the
    item with the lowest verdict and seven above it, in one request to the same judge with its minimum just over
    that verdict, answer the seven verdicts and one no_verdict failure, never a number."""
    candidates = [{"prompt": f"question {i} is the river green", "response": f" answer {i}"} for i in range(16)]
    first = post_ok(judged.gateways["json"], "/v1/rewards", {"items": candidates})
    assert not first.get("failures"), first  # compact JSON: no verdict padded past maxTokens
    verdicts = first["rewards"]
    low = min(verdicts)
    above = [index for index, verdict in enumerate(verdicts) if verdict > low]
    assert len(above) >= 7, f"the tiny judge's verdicts leave fewer than 7 items above {low}: {verdicts}"
    chosen = above[:7]
    chosen.insert(3, verdicts.index(low))
    narrow = judge_reward_model("json")
    narrow["spec"]["judge"]["structured"]["minimum"] = low + 1
    (isvc,) = [c for c in render_reward_model(narrow) if c["kind"] == "InferenceService"]
    with local_gateway(*rendered_gateway(isvc), judged.vllm.url, tmp_path / "gateway.log") as url:
        answer = post_ok(url, "/v1/rewards", {"items": [candidates[index] for index in chosen]})
    assert [(f["index"], f["reason"], f["retry"]) for f in answer["failures"]] == [(3, "no_verdict", False)], answer
    assert f"the verdict {low:g} is outside [{low + 1:g}, 5]" in answer["failures"][0]["message"], answer
    assert answer["rewards"] == [None if position == 3 else verdicts[index] for position, index in enumerate(chosen)]
    print(f"\n8 structured verdicts, 1 out of the judge's range: {answer['failures'][0]}")


def test_a_label_the_judges_tokenizer_splits_stops_the_gateway_naming_it(judged, tmp_path):
    (isvc,) = [c for c in render_reward_model(judge_reward_model("split_label")) if c["kind"] == "InferenceService"]
    env, args = rendered_gateway(isvc)
    port = free_port()
    env |= {"REWARD_GATEWAY_UPSTREAM_URL": judged.vllm.url, "REWARD_GATEWAY_PORT": str(port)}
    env |= {"REWARD_GATEWAY_MEMORY_LIMIT_BYTES": str(LOCAL_MEMORY_LIMIT_BYTES), "REWARD_GATEWAY_DRAIN_SECONDS": "0"}
    clean = {key: value for key, value in os.environ.items() if not key.startswith("REWARD_GATEWAY_")}
    run = subprocess.run(
        [sys.executable, "-m", "reward_gateway", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr[-3000:]
    assert "judge label '10' is 2 tokens in the judge's tokenizer" in run.stderr, run.stderr[-3000:]
