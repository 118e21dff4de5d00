"""The Grafana dashboard's queries, read from its JSON: for promtool's parse and a real Prometheus's answers."""

from __future__ import annotations

import json
from pathlib import Path

from reward_testing.paths import REPO

DASHBOARD = REPO / "manifests" / "grafana" / "reward-operator.json"
# Grafana's variables as a query over everything sees them
ALL_VALUES = {"$__rate_interval": "5m", "$namespace": ".*", "$model": ".*"}


def panel_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL) for each query of each panel, in the dashboard's order."""
    dashboard = json.loads(path.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def variable_queries(path: Path = DASHBOARD) -> list[str]:
    """The template variables' queries (Grafana's ``label_values(...)``)."""
    dashboard = json.loads(path.read_text())
    return [var["query"]["query"] for var in dashboard["templating"]["list"] if var["type"] == "query"]


def with_values(expr: str, values: dict[str, str] = ALL_VALUES) -> str:
    """``expr`` with Grafana's variables replaced by ``values``."""
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    return expr
