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


def test_a_sample_over_the_models_context_gets_openrlhfs_own_none_and_the_others_their_rewards(
    served, transformers_scores
):
    """OpenRLHF reads rewards into a tensor and has no missing reward but a failed request: the gateway fails the
    over-long sample's request with its reason (400, too_long), OpenRLHF's executor retries it as it retries
    anything (5 tries) and leaves its reward None, never a number; the other samples, sent at the same time,
    get the model's rewards. (A max_len of 4096, longer than the reward model's 1024 positions.)"""
    over_long = {"messages": [{"role": "user", "content": "say reward many times"}], "response": "reward " * 1200}
    samples = [*SAMPLES, over_long]
    ran = run_driver("openrlhf", "openrlhf_remote_rm", {"remote_url": remote_url(served.url), "batched": False,
                                                        "tokenizer": str(served.model.path), "samples": samples,
                                                        "max_length": 4096}, served.wrap)  # fmt: skip
    *good, bad = ran["samples"]
    assert bad["reward"] is None and bad["scores"] is None, bad  # OpenRLHF's own "no reward"
    want = transformers_scores([{"text": sample["query"], "add_special_tokens": False} for sample in good])
    diff = max_diff([sample["reward"][0] for sample in good], want)
    report(f"OpenRLHF {ran['version']} SingleTurnAgentExecutor on {served.where} with one sample over the model's "
           f"context: its reward None after OpenRLHF's own retries (the gateway: 400 too_long), the other "
           f"{len(good)} scored, max |diff| vs transformers {diff:.2e}")  # fmt: skip
    assert diff <= TOLERANCE
