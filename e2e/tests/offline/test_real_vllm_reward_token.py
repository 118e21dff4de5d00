"""A token reward model scored at its reward token (InternLM2-Reward's ``get_score``), through the gateway
and a real vLLM (the pinned CPU build) serving a tiny random-weight ``InternLM2ForRewardModel``.

InternLM2-Reward's own scorer templates the conversation, appends ``config.reward_token_id`` and reads
the value there; vLLM appends nothing. A RewardModel with ``model.rewardTokenId`` is rendered
(``reward_operator.render``; ``--trust-remote-code`` through ``model.extraArgs``, as the checkpoint's
config class is its own code), vLLM runs the predictor's command line and the gateway the transformer's
environment, in both chat template modes. The gateway's reward must equal the model's own scorer's: the
last value of vLLM's ``/pooling`` called directly with [the template applied once, one BOS, the reward
token], and transformers' LlamaModel over the same weights (InternLM2's decoder is Llama's under other
names); vLLM's request log shows the ids it scored end with exactly one reward token.

One vLLM for the module (about 3 GB); without the vLLM venv the module skips, or fails where
REWARD_OPERATOR_REQUIRE_VLLM=1 (CI).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from reward_operator.render import chat_template as rendered_template
from reward_operator.render import render_reward_model
from reward_testing.gateway_process import local_gateway, post_ok, rendered_gateway
from reward_testing.scoring_cases import (
    CONVERSATION,
    OVER_LONG,
    OWN_QUERY,
    PROMPT,
    RESPONSE,
    TOLERANCE,
    assert_close,
    assert_one_failure,
    coalesced_with_a_bad_item,
    prompt_response,
)
from reward_testing.tiny_model_maker import CHAT_TEMPLATE, REWARD_TOKEN
from reward_testing.tiny_models import TinyModel, make_tiny_models, reference_scores
from reward_testing.vllm_server import VllmServer, started_vllm, wait_healthy

MODES = ("upstream", "gateway")
# transformers' answers (the model's own scorer) for these items, by name
REFERENCE_ITEMS = {
    "conversation": {"messages": CONVERSATION},
    "prompt_response": {"messages": prompt_response(PROMPT, RESPONSE)},
    "query": {"text": OWN_QUERY},
}


def reward_model(model: TinyModel, mode: str) -> dict:
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "tiny-internlm2", "namespace": "test", "uid": "00000000-0000-4000-8000-000000000002"},
        "spec": {
            "model": {
                "uri": "hf://tiny/internlm2-reward",
                "kind": "token",
                "rewardTokenId": model.reward_token_id,
                # the tokenizer's own template, as the spec's: the gateway mode needs it as a file
                "chatTemplate": CHAT_TEMPLATE,
                "dtype": "float32",
                "extraArgs": ["--trust-remote-code", "--enable-log-requests"],
            },
            "resources": {"gpus": 0},
            "gateway": {"chatTemplateMode": mode},
            "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
        },
    }


class Served:
    def __init__(self, model: TinyModel, vllm: VllmServer, gateways: dict[str, str], references: dict[str, dict]):
        self.model, self.vllm, self.gateways, self.references = model, vllm, gateways, references
        self._read = 0

    def scored_ids(self) -> list[list[int]]:
        """The prompt token ids of the scoring requests vLLM received since the last look."""
        text = self.vllm.log_text()
        new, self._read = text[self._read :], len(text)
        found = re.findall(r"Request pooling-\S+ details: .*prompt_token_ids: (\[[\d, ]*\])", new)
        return [ast.literal_eval(ids) for ids in found]

    def pooled_last(self, ids: list[int]) -> float:
        """vLLM's /pooling called directly with these ids: the last position's value."""
        body = {"model": "tiny-internlm2", "input": [ids], "task": "token_classify", "use_activation": False}
        response = httpx.post(f"{self.vllm.url}/pooling", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()["data"][0]["data"][-1][-1]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("internlm2")
    model = make_tiny_models(workdir / "models", ("internlm2",))["internlm2"]
    assert model.architecture == "InternLM2ForRewardModel" and model.kind == "token"
    template_file = workdir / "chat_template.jinja"
    isvcs = {}
    for mode in MODES:
        rendered = render_reward_model(reward_model(model, mode))
        for child in rendered:
            if rendered_template.FILE_NAME in child.get("data", {}):
                template_file.write_text(child["data"][rendered_template.FILE_NAME])
        (isvcs[mode],) = [child for child in rendered if child["kind"] == "InferenceService"]
        predictor = isvcs[mode]["spec"]["predictor"]["model"]
        predictor["args"] = [arg.replace(rendered_template.PATH, str(template_file)) for arg in predictor["args"]]
    with ExitStack() as stack:
        vllm = stack.enter_context(started_vllm(isvcs["upstream"], model.path, workdir / "vllm"))
        answers = reference_scores(model, list(REFERENCE_ITEMS.values()))  # while vLLM loads
        wait_healthy(vllm)
        gateways = {}
        for mode, isvc in isvcs.items():
            env, args = rendered_gateway(isvc)
            assert env["REWARD_GATEWAY_REWARD_TOKEN_ID"] == str(model.reward_token_id)
            env = {name: value.replace(rendered_template.PATH, str(template_file)) for name, value in env.items()}
            gateways[mode] = stack.enter_context(local_gateway(env, args, vllm.url, workdir / f"gateway-{mode}.log"))
        # the upstream mode's gateway again, coalescing concurrent requests' calls (spec.gateway.scheduling)
        env, args = rendered_gateway(isvcs["upstream"])
        env |= {"REWARD_GATEWAY_COALESCE": "true", "REWARD_GATEWAY_COALESCE_MAX_ITEMS": "16"}
        gateways["coalesce"] = stack.enter_context(local_gateway(env, args, vllm.url, workdir / "gateway-coalesce.log"))
        yield Served(model, vllm, gateways, dict(zip(REFERENCE_ITEMS, answers, strict=True)))


def assert_one_bos_one_reward_token(served: Served, ids: list[int]) -> None:
    reward, bos = served.model.reward_token_id, served.model.bos_token_id
    assert ids[-1] == reward and ids.count(reward) == 1, ids
    assert ids[0] == bos and ids.count(bos) == 1, ids


@pytest.mark.parametrize("mode", MODES)
def test_rewards_are_the_model_scorers_value_at_one_appended_reward_token(served, mode):
    """Messages and prompt/response, templated by vLLM (upstream) or the gateway: the reward token appended
    once, the reward its value, as InternLM2-Reward's get_score computes it."""
    served.scored_ids()
    items = [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]
    rewards = post_ok(served.gateways[mode], "/v1/rewards", {"items": items})["rewards"]
    references = [served.references["conversation"], served.references["prompt_response"]]
    assert_close(rewards, [reference["reward"] for reference in references])
    scored = served.scored_ids()
    assert sorted(scored) == sorted(reference["ids"] for reference in references)
    for ids in scored:
        assert_one_bos_one_reward_token(served, ids)
    # vLLM's own /pooling over the same ids, called directly, has the gateway's number at the last position
    assert_close([served.pooled_last(reference["ids"]) for reference in references], rewards)


def test_finished_text_gets_the_reward_token_once_even_when_it_already_ends_with_it(served):
    """OpenRLHF's finished text: the token appended; a text already ending with it keeps its one."""
    url = served.gateways["upstream"]
    served.scored_ids()
    plain = post_ok(url, "/get_reward", {"query": [OWN_QUERY]})["rewards"]
    ending = post_ok(url, "/get_reward", {"query": [OWN_QUERY + REWARD_TOKEN]})["rewards"]
    reference = served.references["query"]
    assert reference["ids"] == served.references["prompt_response"]["ids"]
    assert_close(plain + ending, [reference["reward"]] * 2)
    scored = served.scored_ids()
    assert scored == [reference["ids"], reference["ids"]]
    for ids in scored:
        assert_one_bos_one_reward_token(served, ids)


def test_without_the_reward_token_the_last_value_is_another_number(served):
    """Why the token matters: the conversation's own last token scores differently, so a gateway that
    sent the conversation as templated would answer a wrong reward without any error."""
    reference = served.references["conversation"]
    without = served.pooled_last(reference["ids"][:-1])
    assert abs(without - reference["reward"]) > TOLERANCE
    assert abs(without - reference["values"][-2][0]) <= TOLERANCE  # causal: the earlier values are the same


@pytest.mark.parametrize("mode", MODES)
def test_four_items_one_over_max_model_len_answer_three_at_the_scorers_numbers_and_one_failure(served, mode):
    served.scored_ids()
    items = [
        {"messages": CONVERSATION},
        {"prompt": PROMPT, "response": RESPONSE},
        {"prompt": PROMPT, "response": OVER_LONG},
        {"text": OWN_QUERY},
    ]
    answer = post_ok(served.gateways[mode], "/v1/rewards", {"items": [{**item, "group": "g"} for item in items]})
    assert_one_failure(answer, 2)
    references = [served.references[name] for name in ("conversation", "prompt_response", "query")]
    good = answer["rewards"][:2] + answer["rewards"][3:]
    assert_close(good, [reference["reward"] for reference in references])
    assert sorted(served.scored_ids()) == sorted(reference["ids"] for reference in references)  # the bad one unsent
    diff = max(abs(g - r["reward"]) for g, r in zip(good, references, strict=True))
    print(f"\n[per-item] token at a reward token ({mode}): 3 of 4 scored, max |diff| vs the model's scorer "
          f"{diff:.2e}; item 2: too_long, not sent to /pooling")  # fmt: skip


def test_through_coalescing_64_requests_one_with_a_bad_item_answer_every_good_item_at_the_scorers_numbers(served):
    def references(texts: list[str]) -> list[dict]:
        return reference_scores(served.model, [{"text": text} for text in texts])

    figures = coalesced_with_a_bad_item(served.gateways["coalesce"], references)
    print(f"\n[per-item] token at a reward token, coalesced: 64 requests in {figures['calls']:.0f} vLLM calls, "
          f"{figures['scored']} items scored (max |diff| vs the model's scorer {figures['max_diff']:.2e}), 1 failed "
          "alone (too_long)")  # fmt: skip
