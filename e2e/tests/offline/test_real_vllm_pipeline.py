"""An RLHFPipeline's reference and critic answer transformers' numbers, with a real vLLM (the pinned CPU
build) behind each role's gateway, both started as the operator renders them.

A tiny random-weight causal LM (LlamaForCausalLM) is the reference, served by the ``vllm-generate``
runtime's command line and the reference's rendered args; a tiny value model (Qwen2ForRewardModel: a
value per token, an architecture vLLM pools per token natively) is the critic, on the pooling runtime
with the critic's rendered args. Each gateway runs its role's rendered environment
(``/v1/pipeline/logprobs``, ``/v1/pipeline/values``). The numbers must be transformers' for the same
text: each response token's log-softmax under the tokens before it, and each response token's value,
cut where the prompt's tokens end (the prompt tokenized with its BOS).

The whole pipeline, through KServe's router as a pod and with the actor generating, runs on the test bed's
real node (test_real_node_pipeline.py, ``make pipeline-real``). Two vLLMs here (about 3 GB each); without
the vLLM venv the module skips, or fails where REWARD_OPERATOR_REQUIRE_VLLM=1 (CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from reward_operator.render import render_rlhf_pipeline
from reward_testing.gateway_process import local_gateway, post_ok, rendered_gateway
from reward_testing.pipeline_cases import PROMPTS, RESPONSES, expected_rows, largest_diff, pipeline_models
from reward_testing.tiny_models import TinyModel
from reward_testing.vllm_server import started_vllm, wait_healthy

# The bound on the reference's log-probabilities and the critic's values (float32 on both sides: 9e-6 and
# 2e-5 seen)
TOLERANCE = 1e-4

PIPELINE = {
    "apiVersion": "serving.rlhf.dev/v1alpha1",
    "kind": "RLHFPipeline",
    "metadata": {"name": "tiny", "namespace": "test", "uid": "00000000-0000-4000-8000-000000000002"},
    "spec": {
        "actor": {"model": {"uri": "hf://tiny/causal", "dtype": "float32"}, "resources": {"gpus": 0}},
        "critic": {"model": {"uri": "hf://tiny/critic", "dtype": "float32"}, "resources": {"gpus": 0}},
        "rewards": [{"name": "tiny-rm"}],
        "flows": {"score": {}},
    },
}
# role -> (the tiny model it serves, the CPU runtime whose command line and environment KServe puts first)
ROLES = {"reference": ("causal", "vllm-generate-cpu"), "critic": ("critic", "vllm-reward-cpu")}
# vLLM's CPU image has no C++ compiler (torch.compile's inductor needs one): neither has vLLM here
NO_COMPILER = {"CXX": "no-cxx-compiler-in-the-image"}


@dataclass(frozen=True)
class Served:
    gateways: dict[str, str]  # role -> its gateway's URL
    models: dict[str, TinyModel]  # kind -> the model


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """The reference's and the critic's gateways, each in front of its own vLLM."""
    models = pipeline_models(tmp_path_factory.mktemp("pipeline-models"))
    isvcs = {
        child["metadata"]["name"].removeprefix("tiny-"): child
        for child in render_rlhf_pipeline(PIPELINE, with_graph=False)
    }
    with ExitStack() as stack:
        servers = {}
        for role, (kind, runtime) in ROLES.items():
            workdir = tmp_path_factory.mktemp(role)
            servers[role] = stack.enter_context(
                started_vllm(isvcs[role], models[kind].path, workdir / "vllm", NO_COMPILER, runtime=runtime)
            )
        urls = {}
        for role, server in servers.items():
            wait_healthy(server)
            log = tmp_path_factory.mktemp(f"{role}-gateway") / "gateway.log"
            urls[role] = stack.enter_context(local_gateway(*rendered_gateway(isvcs[role]), server.url, log))
        yield Served(urls, models)


ITEMS = {"prompts": PROMPTS, "responses": RESPONSES}


# role -> (its route, the answer's field, the tiny model whose transformers numbers it must equal)
ANSWERS = {"reference": ("logprobs", "logprobs", "causal"), "critic": ("values", "values", "critic")}


@pytest.mark.parametrize("role", ANSWERS)
def test_the_reference_and_the_critic_answer_transformers_numbers_for_the_response_tokens(served, role):
    """The reference: each response token's log-softmax under the tokens before it; the critic: its value."""
    route, field, kind = ANSWERS[role]
    answer = post_ok(served.gateways[role], f"/v1/pipeline/{route}", ITEMS)
    expected = expected_rows(served.models[kind], PROMPTS, RESPONSES, field)
    worst = largest_diff(answer[field], expected)
    print(f"\n{role} {field}: {sum(map(len, expected))} response tokens, largest |diff| {worst:.2e}")
    assert worst <= TOLERANCE
