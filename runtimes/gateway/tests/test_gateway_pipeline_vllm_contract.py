"""The pipeline roles' calls to vLLM, checked by the pinned vLLM's own request models, and the fake's
answers to them by its response models: a field vLLM does not know (it would drop it silently) or a
shape the fake has and vLLM has not fails here. Skipped without `make vllm-venv` (required in CI)."""

from __future__ import annotations

import json
from pathlib import Path

from reward_testing.vllm import require_vllm, run_in_vllm

REWARDS = json.dumps([{"step": "reward-a", "weight": 1, "normalise": "running"}])
ITEMS = {"prompts": ["Say hi to", "Count to"], "responses": [" the world", " three"]}


def test_the_roles_requests_are_vllms_and_the_fakes_answers_too(start_gateway, backend):
    require_vllm()  # skip (or fail in CI) before starting anything
    actor = start_gateway(pipeline_role="actor", pipeline_rewards=REWARDS, pipeline_best_of_n="2")
    sampling = {"max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "seed": 3}
    assert actor.post("/v1/pipeline/generate", json={"prompts": ["a", "b"], **sampling}).status_code == 200
    assert actor.post("/v1/pipeline/candidates", json={"best_of_n": True, "prompts": ["a"]}).status_code == 200
    assert start_gateway(pipeline_role="reference").post("/v1/pipeline/logprobs", json=ITEMS).status_code == 200
    assert start_gateway(pipeline_role="critic").post("/v1/pipeline/values", json=ITEMS).status_code == 200
    requests = [[path, body] for path, body in backend.calls]
    assert {path for path, _ in requests} == {"/v1/completions", "/tokenize", "/pooling"}
    # The fake's answers to those very requests, as the gateway read them. Its /pooling answer is
    # the scoring routes' (it has no `usage`, which nothing reads): checked by their own tests.
    answers = [[path, _fake_answer(backend, path, body)] for path, body in requests if path != "/pooling"]

    script = Path(__file__).with_name("vllm_validate_bodies.py")
    results, _ = run_in_vllm(script, {"requests": requests, "answers": answers})
    for (path, body), result in zip(requests, results["requests"], strict=True):
        assert result["ok"], f"vLLM refuses {path} {body}: {result['error']}"
        assert result["ignored"] == [], f"vLLM ignores {result['ignored']} of {path} {body}"
    for (path, _), result in zip(answers, results["answers"], strict=True):
        assert result["ok"], f"the fake's {path} answer is not vLLM's: {result['error']}"


def _fake_answer(fake, path: str, body: dict) -> dict:
    """What the fake answers ``body`` on ``path`` (its calls are recorded again and dropped)."""
    import asyncio

    async def ask() -> dict:
        if path == "/tokenize":
            return fake._tokenize(body)
        return (await fake._completions(body, None))[1]

    calls = len(fake.calls)
    answer = asyncio.run(ask())
    del fake.calls[calls:]
    return answer
