"""The rewards a trainer gets through the gateway equal transformers' numbers for the same tokens,
with a real vLLM (the pinned CPU build) serving tiny random-weight models of each kind.

Everything is started as the operator renders it: a RewardModel of each kind is rendered
(``reward_operator.render``), vLLM runs the predictor's command line (the runtime's args, then the
rendered ones; only ``--model`` points at the tiny model's folder, plus eager mode and a small KV
cache for the CPU), and the gateway runs the transformer's rendered environment and args. The tokens
vLLM scored are read from its request log (``--enable-log-requests`` with ``VLLM_LOGGING_LEVEL=DEBUG``,
set through the spec like any user would) and must be the HF tokenizer's: the template applied once,
one BOS.

One vLLM per kind for the module (about 3 GB and 20-35 s each); without the vLLM venv the module
skips, or fails where REWARD_OPERATOR_REQUIRE_VLLM=1 (CI).
"""

from __future__ import annotations

import ast
import re
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

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
    REFERENCE_ITEMS,
    RESPONSE,
    SPEC_QUERY,
    SPEC_TEMPLATE,
    STEPPED_QUERY,
    STEPS,
    TAGGED,
    assert_close,
    assert_one_failure,
    assert_same_ids,
    coalesced_with_a_bad_item,
)
from reward_testing.tiny_models import TinyModel, reference_scores, reference_scores_of, tar_model
from reward_testing.vllm_server import VllmServer, started_vllm, wait_healthy


def reward_model(kind: str, model: TinyModel, mode: str = "upstream", template: str | None = None) -> dict:
    spec: dict[str, Any] = {
        # float32 as the weights are (vLLM's CPU build would downcast them to float16 otherwise)
        "model": {
            "uri": "hf://tiny/reward-model",
            "kind": kind,
            "dtype": "float32",
            "extraArgs": ["--enable-log-requests"],
        },
        "resources": {"gpus": 0},
        "gateway": {"chatTemplateMode": mode},
        "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
    }
    if kind == "process":
        spec["model"]["stepTagId"] = model.step_tag_id
    if template is not None:
        spec["model"]["chatTemplate"] = template
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": f"tiny-{kind}", "namespace": "test", "uid": "00000000-0000-4000-8000-000000000001"},
        "spec": spec,
    }


class Served:
    """A tiny model behind a real vLLM and one gateway per chat template mode, as rendered."""

    def __init__(self, model: TinyModel, vllm: VllmServer, gateways: dict[str, str], references: dict[str, dict]):
        self.model, self.vllm, self.gateways, self.references = model, vllm, gateways, references
        self._read = 0

    def reference(self, *names: str) -> list[dict]:
        """transformers' answers for these items of REFERENCE_ITEMS."""
        return [self.references[name] for name in names]

    def scored_ids(self) -> list[list[int]]:
        """The prompt token ids of the requests vLLM received since the last look."""
        text = self.vllm.log_text()
        new, self._read = text[self._read :], len(text)
        # the scoring calls (classify, pooling), not the gateway's /tokenize of its BOS
        found = re.findall(r"Request (?:classify|pooling)-\S+ details: .*prompt_token_ids: (\[[\d, ]*\])", new)
        return [ast.literal_eval(ids) for ids in found]


def local_paths(values: list[str], template_file: Path) -> list[str]:
    """The ConfigMap's mount path, where a pod has it, replaced by the test's file."""
    return [value.replace(rendered_template.PATH, str(template_file)) for value in values]


# kind -> (the gateway's template modes, model.chatTemplate): the sequence model with a template of the
# spec's own through both modes; the others with the tokenizer's (vLLM applies it).
SERVED = {
    "sequence": (("upstream", "gateway"), SPEC_TEMPLATE),
    "token": (("upstream",), None),
    "process": (("upstream",), None),
}


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory) -> Iterator[dict[str, Served]]:
    """Each kind's tiny model behind a real vLLM (the three load side by side) and its gateways."""
    with ExitStack() as stack:
        started = {}
        for kind, (modes, template) in SERVED.items():
            model, workdir = tiny_models[kind], tmp_path_factory.mktemp(kind)
            template_file = workdir / "chat_template.jinja"
            isvcs = {}
            for mode in modes:  # the modes differ in the gateway only: one vLLM serves them all
                rendered = render_reward_model(reward_model(kind, model, mode, template))
                for child in rendered:
                    if rendered_template.FILE_NAME in child.get("data", {}):  # model.chatTemplate, mounted in a pod
                        template_file.write_text(child["data"][rendered_template.FILE_NAME])
                (isvcs[mode],) = [child for child in rendered if child["kind"] == "InferenceService"]
                predictor = isvcs[mode]["spec"]["predictor"]["model"]
                predictor["args"] = local_paths(predictor["args"], template_file)
            vllm = stack.enter_context(started_vllm(isvcs[modes[0]], model.path, workdir / "vllm"))
            started[kind] = (model, vllm, isvcs, template_file, workdir)
        # transformers' numbers while the vLLMs load
        answers = reference_scores_of(
            {kind: (tiny_models[kind], list(items.values())) for kind, items in REFERENCE_ITEMS.items()}
        )
        served = {}
        for kind, (model, vllm, isvcs, template_file, workdir) in started.items():
            wait_healthy(vllm)
            gateways = {}
            for mode, isvc in isvcs.items():
                env, args = rendered_gateway(isvc)
                env = dict(zip(env, local_paths(list(env.values()), template_file), strict=True))
                log = workdir / f"gateway-{mode}.log"
                gateways[mode] = stack.enter_context(local_gateway(env, args, vllm.url, log))
            # the first mode's gateway again, coalescing concurrent requests' calls (spec.gateway.scheduling)
            env, args = rendered_gateway(isvcs[modes[0]])
            env = dict(zip(env, local_paths(list(env.values()), template_file), strict=True))
            env |= {"REWARD_GATEWAY_COALESCE": "true", "REWARD_GATEWAY_COALESCE_MAX_ITEMS": "16"}
            log = workdir / "gateway-coalesce.log"
            gateways["coalesce"] = stack.enter_context(local_gateway(env, args, vllm.url, log))
            references = dict(zip(REFERENCE_ITEMS[kind], answers[kind], strict=True))
            served[kind] = Served(model, vllm, gateways, references)
        yield served


@pytest.fixture
def sequence(served) -> Served:
    return served["sequence"]


@pytest.fixture
def token(served) -> Served:
    return served["token"]


@pytest.fixture
def process(served) -> Served:
    return served["process"]


def assert_scored(served: Served, references: list[dict]) -> None:
    """vLLM scored exactly the HF tokenizer's ids for these items (in any order), each with one BOS."""
    assert_same_ids(served.scored_ids(), references, served.model.bos_token_id)


@pytest.mark.parametrize("mode", ["upstream", "gateway"])
def test_sequence_rewards_equal_transformers(sequence, mode):
    """A template of the spec's own, applied once by vLLM (upstream) or by the gateway, one BOS."""
    sequence.scored_ids()
    body = {"items": [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]}
    rewards = post_ok(sequence.gateways[mode], "/v1/rewards", body)["rewards"]
    references = sequence.reference("conversation", "prompt_response")
    assert_close(rewards, [reference["reward"] for reference in references])
    assert_scored(sequence, references)
    # the spec's template, not the tokenizer's: its markers are in what was scored
    detokenized = httpx.post(f"{sequence.vllm.url}/detokenize", json={"tokens": references[1]["ids"]}).json()
    assert "### assistant:" in detokenized["prompt"]


def test_sequence_get_reward_and_classify_equal_transformers(sequence):
    """OpenRLHF's finished text scored as given; verl's BOS-less text gets the model's BOS from vLLM."""
    url = sequence.gateways["upstream"]
    sequence.scored_ids()
    answer = post_ok(url, "/get_reward", {"query": [SPEC_QUERY], "prompts": [PROMPT], "labels": [""]})
    verl = REFERENCE_ITEMS["sequence"]["verl"]["text"]
    classify = post_ok(url, "/classify", {"model": "/mnt/models/checkpoint", "input": verl, "use_activation": False})
    query, verl_reference = sequence.reference("query", "verl")
    assert query["ids"] == verl_reference["ids"]  # the two trainers' texts are one token sequence
    assert_close(answer["rewards"] + [classify["data"][-1]["probs"][-1]], [query["reward"], verl_reference["reward"]])
    assert_scored(sequence, [query, verl_reference])


def test_token_rewards_equal_transformers(token):
    """The last token's raw value, the tokenizer's template applied by vLLM."""
    url = token.gateways["upstream"]
    token.scored_ids()
    items = [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]
    rewards = post_ok(url, "/v1/rewards", {"items": items})["rewards"]
    answer = post_ok(url, "/get_reward", {"query": [OWN_QUERY]})
    references = token.reference("conversation", "prompt_response", "query")
    assert references[1]["ids"] == references[2]["ids"]
    assert_close(rewards + answer["rewards"], [reference["reward"] for reference in references])
    assert_scored(token, references)


def test_process_step_scores_equal_transformers(process):
    """p_positive at each step tag, the weakest step as the reward (the default aggregate)."""
    url = process.gateways["upstream"]
    process.scored_ids()
    answer = post_ok(url, "/v1/rewards", {"items": [{"prompt": PROMPT, "steps": STEPS}, {"messages": TAGGED}]})
    openrlhf = post_ok(url, "/get_reward", {"query": [STEPPED_QUERY]})
    references = process.reference("steps", "tagged", "query")
    assert [len(reference["step_scores"]) for reference in references] == [3, 2, 3]
    for got, reference in zip(answer["step_scores"], references, strict=False):
        assert_close(got, reference["step_scores"])
    assert_close(answer["rewards"] + openrlhf["rewards"], [reference["reward"] for reference in references])
    assert_scored(process, references)


TOO_LONG = {"prompt": PROMPT, "response": OVER_LONG}
FOUR_ITEMS = {
    "sequence": (
        [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}, TOO_LONG, {"text": SPEC_QUERY}],
        ("conversation", "prompt_response", "query"),
    ),
    "token": (
        [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}, TOO_LONG, {"text": OWN_QUERY}],
        ("conversation", "prompt_response", "query"),
    ),
    "process": (
        [{"prompt": PROMPT, "steps": STEPS}, {"messages": TAGGED}, {"prompt": PROMPT, "steps": [OVER_LONG]},
         {"text": STEPPED_QUERY}],
        ("steps", "tagged", "query"),
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("sequence", "upstream"), ("sequence", "gateway"), ("token", "upstream"), ("process", "upstream")],
)
def test_four_items_one_over_max_model_len_answer_three_at_transformers_numbers_and_one_failure(served, kind, mode):
    """One answer: the three good items scored (one vLLM call each where vLLM templates; one call for the group
    where the gateway does, refused whole by vLLM and halved down to the bad text), the bad one a failure."""
    model = served[kind]
    items, names = FOUR_ITEMS[kind]
    model.scored_ids()
    answer = post_ok(model.gateways[mode], "/v1/rewards", {"items": [{**item, "group": "g"} for item in items]})
    assert_one_failure(answer, 2)
    references = model.reference(*names)
    good = answer["rewards"][:2] + answer["rewards"][3:]
    assert_close(good, [reference["reward"] for reference in references])
    if kind == "process":
        assert answer["step_scores"][2] is None
        for got, reference in zip(answer["step_scores"][:2] + answer["step_scores"][3:], references, strict=True):
            assert_close(got, reference["step_scores"])
    assert_scored(model, references)  # what vLLM scored: the three good items, each once
    diff = max(abs(g - r["reward"]) for g, r in zip(good, references, strict=True))
    print(f"\n[per-item] {kind} ({mode}): 3 of 4 scored, max |diff| vs transformers {diff:.2e}; item 2: too_long")


@pytest.mark.parametrize("kind", ["sequence", "token", "process"])
def test_through_coalescing_64_requests_one_with_a_bad_item_answer_every_good_item_at_transformers_numbers(
    served, kind
):
    """64 concurrent requests of 1-4 finished texts, merged into fewer vLLM calls; one request carries an item over
    max_model_len among good ones. vLLM refuses a merged call whole: it is halved down to that text, which alone
    fails, in its own request's answer; every other item of every request is scored."""
    model = served[kind]

    def references(texts: list[str]) -> list[dict]:
        return reference_scores(model.model, [{"text": text} for text in texts])

    figures = coalesced_with_a_bad_item(model.gateways["coalesce"], references, steps=kind == "process")
    print(f"\n[per-item] {kind} coalesced: 64 requests in {figures['calls']:.0f} vLLM calls, {figures['scored']} "
          f"items scored (max |diff| {figures['max_diff']:.2e} vs transformers), 1 failed alone")  # fmt: skip


def test_a_model_folder_tars_to_the_same_bytes_with_its_files_at_the_top(tmp_path):
    """What the storage initializer unpacks into /mnt/models: the folder's files, readable by any user."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "model.safetensors").chmod(0o600)
    first = tar_model(folder, tmp_path / "a.tar.gz").read_bytes()
    (folder / "config.json").touch()  # a newer mtime changes nothing
    assert tar_model(folder, tmp_path / "b.tar.gz").read_bytes() == first
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert [(m.name, m.mode) for m in tar.getmembers()] == [("config.json", 0o644), ("model.safetensors", 0o644)]
