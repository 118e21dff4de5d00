"""OpenRLHF's own remote reward client gets the served model's rewards: transformers' numbers for
the queries it sends.

drivers/openrlhf_remote_rm.py runs, under the OpenRLHF venv, the ``SingleTurnAgentExecutor`` that
OpenRLHF's trainer builds from ``--reward.remote_url`` (the docs' snippet ``openrlhf``, pointed at the
RewardModel's URL): per sample (``execute()``, all at once, as its rollout calls it) and batched
(every query in one request). The queries are what OpenRLHF builds: the prompt rendered with the
tokenizer's chat template by its dataset code, plus the response, decoded with special tokens kept.
"""

from __future__ import annotations

import re

from samples import SAMPLES
from summary import TOLERANCE, max_diff, report
from trainer_venvs import run_driver, snippet


def remote_url(status_url: str) -> str:
    """The docs' --reward.remote_url, for this RewardModel."""
    (value,) = re.findall(r"--reward\.remote_url (\S+)", snippet("openrlhf"))
    return value.replace("$STATUS_URL", status_url.rstrip("/"))


def test_openrlhf_remote_reward_client_reads_the_models_rewards(served, transformers_scores):
    ran = run_driver("openrlhf", "openrlhf_remote_rm", {"remote_url": remote_url(served.url),
                                                        "tokenizer": str(served.model.path), "samples": SAMPLES},
                     served.wrap)  # fmt: skip
    samples = ran["samples"]
    # scored as OpenRLHF's own serve_rm.py scores a query: the text as sent, no special tokens added
    want = transformers_scores([{"text": sample["query"], "add_special_tokens": False} for sample in samples])
    for sample in samples:
        assert isinstance(sample["reward"], list) and len(sample["reward"]) == 1, sample  # never None
        assert sample["scores"] == sample["reward"] and sample["extra_logs"] == {}, sample
    per_sample = max_diff([sample["reward"][0] for sample in samples], want)
    (batched,) = ran["batched"]  # one URL: one request with every query
    batch = max_diff(batched["rewards"], want)
    calls = f"{len(samples)} per-sample calls and 1 batched call of {len(samples)}"
    report(f"OpenRLHF {ran['version']} SingleTurnAgentExecutor on {served.where}: {calls}, "
           f"max |diff| vs transformers {max(per_sample, batch):.2e}")  # fmt: skip
    assert per_sample <= TOLERANCE and batch <= TOLERANCE
