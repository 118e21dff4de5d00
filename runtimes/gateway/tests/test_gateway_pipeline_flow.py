"""An RLHFPipeline's flows through real gateway processes, each started with the environment the
operator renders for its role (the full golden pipeline's), the graph's steps called in the
order and with the bodies KServe's router uses (render/inferencegraph.py): a Sequence step
with ``$response`` gets the previous step's answer, an Ensemble answers ``{"<step>": <answer>}``.
The router itself is KServe's (its own tests); the steps' contract is what is tested here.
"""

from __future__ import annotations

import httpx
import pytest

from reward_testing.fake_vllm import completion_text, conversation_text, logit, text_tokens, token_logprob
from reward_testing.gateway_fixtures import rendered_gateway
from reward_testing.paths import golden_children
from reward_testing.ports import free_port


def rendered_env(role: str) -> tuple[dict[str, str], list[str]]:
    """The full golden pipeline's environment and args for a role's gateway."""
    for child in golden_children("pipeline/full"):
        if child["kind"] == "InferenceService" and child["metadata"]["labels"]["app.kubernetes.io/component"] == role:
            return rendered_gateway(child)
    raise AssertionError(f"no {role} in the golden render")


@pytest.fixture
def pipeline(run_gateway, start_gateway, backend, candidate_backend):
    """The roles' gateways as real processes on the fake vLLM, and the two reward models' gateways."""
    urls = {}
    for role in ("actor", "reference", "critic"):
        env, args = rendered_env(role)
        port = free_port()
        env.update({"REWARD_GATEWAY_UPSTREAM_URL": backend.url, "REWARD_GATEWAY_PORT": str(port)})
        env["REWARD_GATEWAY_MEMORY_LIMIT_BYTES"] = str(2 * 2**30)  # the downward API's, in a pod
        name = env["REWARD_GATEWAY_MODEL_NAME"]
        urls[role], _ = run_gateway(args, env, port, name)
    candidate_backend.scale = 2.0  # harmless scores on another scale than helpful's
    urls["reward-helpful"] = str(start_gateway(model_name="helpful").base_url)
    urls["reward-harmless"] = str(start_gateway(upstream=candidate_backend.url, model_name="harmless").base_url)
    return urls


def step(url: str, route: str, body: dict) -> dict:
    answer = httpx.post(f"{url}/v1/pipeline/{route}", json=body, timeout=30)
    assert answer.status_code == 200, f"{route}: {answer.text}"
    return answer.json()


def score_flow(urls: dict[str, str], request: dict) -> dict:
    """The score node: the score-parts Ensemble, then combine with its answer."""
    parts = {"input": step(urls["actor"], "input", request)}
    for reward in ("reward-helpful", "reward-harmless"):
        parts[reward] = step(urls[reward], "reward", request)
    parts["critic"] = step(urls["critic"], "values", request)
    parts["reference"] = step(urls["reference"], "logprobs", request)
    return step(urls["actor"], "combine", parts)


def pair(prompt: str, response: str) -> str:
    return conversation_text([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}])


def test_generate_and_score_flow(pipeline, backend):
    generated = step(pipeline["actor"], "generate", {"prompts": ["Tell me", "Ask me"], "max_tokens": 3})
    assert generated["responses"] == [completion_text("Tell me", 0, 3), completion_text("Ask me", 0, 3)]
    result = score_flow(pipeline, generated)  # the score node gets the generate step's answer
    helpful = [logit(pair(p, r)) for p, r in zip(generated["prompts"], generated["responses"], strict=True)]
    harmless = [2.0 * value for value in helpful]
    assert result["parts"] == {"helpful": pytest.approx(helpful), "harmless": pytest.approx(harmless)}
    # harmless is running-normalised: with this first batch of two, -1 and 1 in the order of their size.
    normalised = [-1.0, 1.0] if harmless[0] < harmless[1] else [1.0, -1.0]
    assert result["normalised"] == {"harmless": pytest.approx(normalised)}
    expected = [0.7 * h + 0.3 * z for h, z in zip(helpful, normalised, strict=True)]
    assert result["rewards"] == pytest.approx(expected)
    assert result["logprobs"] == [
        pytest.approx([token_logprob(token) for token in text_tokens(response)]) for response in generated["responses"]
    ]
    assert [len(row) for row in result["values"]] == [len(text_tokens(r)) for r in generated["responses"]]
    # each role's vLLM was asked under its served name
    models = {(path, body["model"]) for path, body in backend.calls}
    assert {model for path, model in models if path == "/v1/completions"} == {"policy", "ppo-full-reference"}
    assert {model for path, model in models if path == "/pooling"} == {"ppo-full-critic"}


def test_best_of_n_flow(pipeline):
    candidates = step(pipeline["actor"], "candidates", {"best_of_n": True, "prompts": ["Tell me", "Ask me"]})
    assert len(candidates["responses"]) == 16  # the golden render's bestOfN: 8 per prompt
    parts = {"input": step(pipeline["actor"], "input", candidates)}
    for reward in ("reward-helpful", "reward-harmless"):
        parts[reward] = step(pipeline[reward], "reward", candidates)
    results = step(pipeline["actor"], "select", parts)["results"]
    assert [result["prompt"] for result in results] == ["Tell me", "Ask me"]
    for result in results:
        rewards = [candidate["reward"] for candidate in result["candidates"]]
        assert len(rewards) == 8
        assert result["best"]["index"] == rewards.index(max(rewards))
        assert result["best"]["response"] == result["candidates"][result["best"]["index"]]["response"]
