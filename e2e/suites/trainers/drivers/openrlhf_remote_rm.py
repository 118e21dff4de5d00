"""OpenRLHF's own remote reward client (``openrlhf.utils.agent.SingleTurnAgentExecutor``, what its
trainer builds from ``--reward.remote_url``), run under the OpenRLHF venv.

Request: ``{"remote_url": the flag's value, "tokenizer": folder, "samples": [{"messages", "response"}],
"max_length"?: OpenRLHF's --max_len (default 256), "batched"?: false to leave the batched call out}``.
Per sample, as OpenRLHF's rollout runs it: the prompt rendered by ``PromptDataset``'s
``preprocess_data`` with the tokenizer's chat template, then ``execute()``, all samples at once on one
event loop. Its generation engine is vLLM, which this venv has not (and OpenRLHF's trainer needs a
GPU for): a scripted engine stands in for it and "generates" the sample's response tokens (and the
EOS); everything after generation is OpenRLHF's: the query decoded from prompt and response ids with
special tokens kept, the POST, the retries, the parse. Batched: the same executor's
``_fetch_rewards_via_http`` with every query in one request (the body OpenRLHF <= 0.9.0 sent).
Answer: the version, and per sample the query sent and the reward OpenRLHF read; the batch's rewards.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers
from common import answer, request
from openrlhf.datasets.prompts_dataset import preprocess_data
from openrlhf.utils.agent import SingleTurnAgentExecutor

MAX_LENGTH = 256


class ScriptedEngine:
    """In place of OpenRLHF's vLLM engine: ``generate`` returns the next scripted response's tokens."""

    def __init__(self, responses: dict[tuple[int, ...], list[int]]):
        self.responses = responses

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        token_ids = self.responses[tuple(prompt_token_ids)]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, finish_reason="stop", logprobs=None)])


async def per_sample(executor, tokenizer, samples, max_length: int) -> list[dict]:
    prompts, engine_script = [], {}
    for sample in samples:
        prompt, label = preprocess_data({"input": sample["messages"]}, input_key="input",
                                        apply_chat_template=tokenizer.apply_chat_template)  # fmt: skip
        prompt_ids = tokenizer(text=prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(text=sample["response"], add_special_tokens=False)["input_ids"]
        engine_script[tuple(prompt_ids)] = [*response_ids, tokenizer.eos_token_id]
        prompts.append((prompt, label))
    engine = ScriptedEngine(engine_script)
    params = SimpleNamespace(max_tokens=max_length // 2, logprobs=None)
    outputs = await asyncio.gather(
        *(executor.execute(prompt, label, params, max_length, tokenizer, engine) for prompt, label in prompts)
    )
    return [
        {"query": tokenizer.decode(out["observation_tokens"], skip_special_tokens=False), "prompt": out["prompt"],
         "reward": out["reward"], "scores": out["scores"], "extra_logs": out["extra_logs"]}
        for out in outputs
    ]  # fmt: skip


def main() -> None:
    asked = request()
    tokenizer = transformers.AutoTokenizer.from_pretrained(asked["tokenizer"])
    # train_ppo_ray.py: args.reward.remote_url.split(","), handed to the executor as is
    executor = SingleTurnAgentExecutor(asked["remote_url"].split(","))
    samples = asyncio.run(per_sample(executor, tokenizer, asked["samples"], asked.get("max_length", MAX_LENGTH)))
    queries = [sample["query"] for sample in samples]
    batched = None
    if asked.get("batched", True):
        batched = asyncio.run(
            executor._fetch_rewards_via_http(queries, [s["prompt"] for s in samples], [""] * len(queries))
        )
    answer({"trainer": "openrlhf", "version": importlib.metadata.version("openrlhf"), "samples": samples,
            "batched": batched})  # fmt: skip


if __name__ == "__main__":
    main()
