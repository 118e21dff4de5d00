"""What an RLHFPipeline's reference and critic must answer: transformers' numbers for the response tokens.

The roles' gateways (reward_gateway.pipeline.routes) score ``prompt + response`` with the BOS vLLM adds, and cut
each row where the prompt's own tokens (with that BOS) end; ``expected_rows`` does the same with the
model's tokenizer and transformers' forward pass (tiny_model_maker: a causal model's ``logprobs``, a
token model's ``values``). Shared by the local test (test_real_vllm_pipeline.py) and the real node's
(test_real_node_pipeline.py).
"""

from __future__ import annotations

from pathlib import Path

from reward_testing.tiny_models import TinyModel, make_tiny_models, reference_scores

# The critic's weights: a token model (Qwen2ForRewardModel, a value per token, what vLLM pools per token
# natively; vLLM 0.32 loads LlamaForTokenClassification as a sequence classifier, which fails on the head's
# weights), not the token reward model's own
CRITIC_SEED = 6

# Words of the tiny tokenizer's corpus, so the texts are a few tokens each; the responses start with a
# space, as generated text does.
PROMPTS = ["what is two plus three?", "find the sum of four and seven", "check the final answer"]
RESPONSES = [" the answer is five.", " maybe the total is ten, i think", " it is correct!"]


def pipeline_models(dest: Path) -> dict[str, TinyModel]:
    """``causal``: the actor's and the reference's model; ``critic``: the value model."""
    causal = make_tiny_models(dest / "actor", ("causal",))["causal"]
    critic = make_tiny_models(dest / "critic", ("token",), seed=CRITIC_SEED)["token"]
    return {"causal": causal, "critic": critic}


def expected_rows(model: TinyModel, prompts: list[str], responses: list[str], field: str) -> list[list[float]]:
    """transformers' ``field`` (``logprobs`` or ``values``) of each response's tokens."""
    texts = [{"text": p + r, "add_special_tokens": True} for p, r in zip(prompts, responses, strict=True)]
    heads = [{"text": p, "add_special_tokens": True} for p in prompts]
    answers = reference_scores(model, texts + heads)
    whole, prompt_only = answers[: len(texts)], answers[len(texts) :]
    rows = [a[field][len(p["ids"]) :] for a, p in zip(whole, prompt_only, strict=True)]
    # a token model's values are one list of labels per token: the critic's one label
    return [[v[-1] if isinstance(v, list) else v for v in row] for row in rows]


def largest_diff(got: list[list[float]], want: list[list[float]]) -> float:
    """The largest |got - want| over rows that must have the same lengths (a row per response)."""
    assert [len(row) for row in got] == [len(row) for row in want], (got, want)
    pairs = (pair for g, w in zip(got, want, strict=True) for pair in zip(g, w, strict=True))
    return max((abs(a - b) for a, b in pairs), default=0.0)
