"""The TRL and verl adapters in front of a judge (model.kind: judge): the same calls as for a score head,
each item's reference from the trainer's own place for it (a TRL dataset column, verl's ground_truth), and
the judge's verdicts as rewards. Against the real gateway process and the fake vLLM."""

from __future__ import annotations

import asyncio
import json

import pytest
from reward_gateway_client.trl import GatewayReward
from reward_gateway_client.verl import compute_score

from reward_testing.fake_vllm import conversation_text, judge_reward

TEMPLATE = "Q: {{ prompt }} A: {{ response }}{% if reference %} R: {{ reference }}{% endif %}"
LABELS = {"Yes": 1.0, "No": 0.0}
JUDGE = {"prompt": TEMPLATE, "labels": [{"token": t, "value": v} for t, v in LABELS.items()]}


def judged(prompt: str, response: str, reference: str | None) -> float:
    """What the judge answers for an item: the fake's label probabilities after the judge's prompt."""
    content = f"Q: {prompt} A: {response}" + (f" R: {reference}" if reference else "")
    return judge_reward(conversation_text([{"role": "user", "content": content}]) + "<assistant>", LABELS)[0]


@pytest.fixture
def judge(gateway):
    return gateway(model_kind="judge", judge=json.dumps(JUDGE))


def test_trl_reads_the_reference_from_its_dataset_column(judge, backend):
    reward = GatewayReward(judge.url, reference_column="solution")
    prompts = [[{"role": "user", "content": "2+2?"}]] * 2 + ["standard: 3+3?"] * 2
    completions = [[{"role": "assistant", "content": c}] for c in ("4", "5")] + [" 6", " 7"]
    solutions = ["4", "4", "6", "6"]
    rewards = reward(prompts=prompts, completions=completions, completion_ids=None, solution=solutions)
    expected = [judged("2+2?", "4", "4"), judged("2+2?", "5", "4"), judged("standard: 3+3?", " 6", "6")]
    expected.append(judged("standard: 3+3?", " 7", "6"))
    assert rewards == pytest.approx(expected, abs=1e-12)
    with pytest.raises(KeyError, match="reference_column 'answer' is not among"):
        GatewayReward(judge.url, reference_column="answer")(prompts=prompts, completions=completions, solution=[])


def test_verl_sends_its_ground_truth_as_the_reference(judge, backend):
    async def run() -> list[float]:
        calls = [
            compute_score(
                data_source="gsm8k",
                solution_str=answer,
                ground_truth="4",
                extra_info={"prompt": [{"role": "user", "content": "2+2?"}]},
                url=judge.url,
            )
            for answer in ("4", "five")
        ]
        return await asyncio.gather(*calls)

    assert asyncio.run(run()) == pytest.approx([judged("2+2?", "4", "4"), judged("2+2?", "five", "4")], abs=1e-12)
    assert judge.requests("rewards", 200) == 1
