"""What a running operator's /metrics says, read the way the e2e tests and chaos tests need it."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families


def reward_model_reconciles(metrics_url: str) -> float:
    """reward_operator_reconcile_total for RewardModels, every result, since the process started."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('reward_operator_reconcile_total{kind="RewardModel"')
    )


def metric_sum(text: str, name: str, where: Callable[[dict[str, str]], bool] = lambda labels: True) -> float:
    """The sum of the samples of counter ``name`` (without its _total) whose labels pass ``where``, in a
    Prometheus text exposition (an operator's /metrics, the API server's)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if sample.name == f"{name}_total" and where(sample.labels)
    )
