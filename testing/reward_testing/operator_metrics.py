"""What a running operator's /metrics says, read the way the e2e tests and chaos tests need it."""

from __future__ import annotations

import urllib.request


def reward_model_reconciles(metrics_url: str) -> float:
    """reward_operator_reconcile_total for RewardModels, every result, since the process started."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('reward_operator_reconcile_total{kind="RewardModel"')
    )
