"""Alert rules and the Grafana dashboard: checked by the real promtool, and every
metric they use cross-checked against what the operator, the gateway and the
pinned vLLM export (manifests/prometheus/metrics-contract.yaml)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from reward_testing import dashboard
from reward_testing.paths import REPO
from reward_testing.vllm import missing_vllm, vllm_package_dir
from testenv import builds

PROMETHEUS = REPO / "manifests" / "prometheus"
DASHBOARD = dashboard.DASHBOARD
CONTRACT = yaml.safe_load((PROMETHEUS / "metrics-contract.yaml").read_text())
RULE = yaml.safe_load((PROMETHEUS / "prometheusrule.yaml").read_text())

REQUIRED_ALERTS = {
    "RewardOperatorDown",
    "RewardOperatorReconcileErrors",
    "RewardModelNotReady",
    "RewardModelGenerationLag",
    "RewardGateway5xxRatioHigh",
    "RewardGatewayItemFailureRatioHigh",
    "RewardScoreDrift",
    "RewardGatewayHoldRefused",
    "RewardCanaryAgreementLow",
    "RewardCanaryCandidateErrors",
    "RewardJudgeLabelShareLow",
}


@pytest.fixture(scope="session")
def promtool() -> Path:
    return builds.build() / "promtool"  # build() raises if it cannot provide it


@pytest.fixture
def rules_dir(tmp_path) -> Path:
    """The PrometheusRule's groups as a plain rule file, next to the promtool unit tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}, sort_keys=False))
    for test_file in (PROMETHEUS / "tests").glob("*.yaml"):
        (tmp_path / test_file.name).write_text(test_file.read_text())
    return tmp_path


def test_promtool_check_rules(promtool, rules_dir):
    result = subprocess.run([promtool, "check", "rules", rules_dir / "rules.yaml"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in RULE['spec']['groups'])} rules found" in result.stdout


def test_promtool_unit_tests(promtool, rules_dir):
    tests = sorted(rules_dir.glob("*.test.yaml"))
    assert tests
    result = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


# (alert, text in its expression, replacement): each change must make the unit tests fail, so they really assert
MUTATIONS = [
    ("RewardGateway5xxRatioHigh", "> 0.05", "> 0.5"),
    ("RewardGatewayHoldRefused", ") > 0", ") > 5"),
    ("RewardGatewayItemFailureRatioHigh", ") > 0.05", ") > 0.5"),
    ("RewardGatewayItemFailureRatioHigh", "[10m])) > 0.1", "[10m])) > 0.001"),  # too little traffic pages no one
    ("RewardCanaryAgreementLow", ") < 0.8", ") < 0.7"),  # the threshold
    ("RewardCanaryAgreementLow", ">= 200", ">= 100"),  # the least pairs a rollout must have compared
    ("RewardCanaryAgreementLow", "+ 0.5 * sum", "+ 1 * sum"),  # a candidate tie is half an agreement
    ("RewardCanaryAgreementLow", "by (namespace, model, candidate)", "by (namespace, model, candidate, pod)"),  # pooled
    ("RewardCanaryAgreementLow", "(reward_gateway_canary_concordant_pairs_total)\n",
     "(last_over_time(reward_gateway_canary_concordant_pairs_total[15m]))\n"),  # clears when the rollout ends
    ("RewardCanaryCandidateErrors", "> 0.05", "> 0.5"),
    ("RewardCanaryCandidateErrors", '{role="candidate",result="error"}', '{result="error"}'),  # the candidate's only
    ("RewardCanaryCandidateErrors", ">= 50", ">= 5"),
    ("RewardCanaryCandidateErrors", '(reward_gateway_canary_requests_total{role="candidate"})\n',
     '(last_over_time(reward_gateway_canary_requests_total{role="candidate"}[10m]))\n'),  # clears when it ends
    ("RewardJudgeLabelShareLow", ") < 0.5", ") < 0.2"),
    ("RewardJudgeLabelShareLow", "> 0.05", "> 0.5"),  # judge-a judges 10 a minute, 0.17 a second
    ("RewardJudgeLabelShareLow", "> 0.05", "> 0.01"),  # judge-c's one a minute is too little to judge by
    ("RewardJudgeLabelShareLow", "by (namespace, model)", "by (namespace, model, pod)"),  # pooled over replicas
    ("RewardScoreDrift", "- sum by (namespace, model) (rate(reward_gateway_score_negative_sum_total[1h]))",
     "+ sum by (namespace, model) (rate(reward_gateway_score_negative_sum_total[1h]))"),  # negative scores subtract
]  # fmt: skip


@pytest.mark.parametrize(("alert", "old", "new"), MUTATIONS, ids=[f"{m[0]}:{m[1]}" for m in MUTATIONS])
def test_promtool_unit_tests_can_fail(promtool, rules_dir, alert, old, new):
    groups = yaml.safe_load(yaml.safe_dump(RULE["spec"]["groups"]))
    rule = next(rule for group in groups for rule in group["rules"] if rule.get("alert") == alert)
    assert old in rule["expr"]
    rule["expr"] = rule["expr"].replace(old, new)
    (rules_dir / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = sorted(rules_dir.glob("*.test.yaml"))
    result = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True, cwd=rules_dir)
    assert result.returncode != 0


def test_every_required_alert_is_defined_and_unit_tested():
    alerts = {rule["alert"] for group in RULE["spec"]["groups"] for rule in group["rules"] if "alert" in rule}
    assert alerts >= REQUIRED_ALERTS
    tested = {
        case["alertname"]
        for test_file in (PROMETHEUS / "tests").glob("*.test.yaml")
        for test in yaml.safe_load(test_file.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    }
    assert tested >= alerts


# ---- metric names ------------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_WORD = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])")
_NOT_METRICS = {
    "sum", "avg", "max", "min", "count", "rate", "irate", "increase", "abs", "absent", "histogram_quantile",
    "and", "or", "unless", "offset", "bool", "label_values", "clamp_min", "clamp_max", "time", "vector", "sqrt",
}  # fmt: skip


def metrics_in(expr: str) -> set[str]:
    """The metric names a PromQL expression (or Grafana variable query) names."""
    expr = _SELECTOR.sub(" ", _STRINGS.sub(" ", expr))
    expr = _RANGE.sub(" ", _GROUPING.sub(" ", expr))
    # the label argument of label_values(metric, label)
    expr = re.sub(r",\s*\w+\s*\)", ")", expr)
    return {word for word in _WORD.findall(expr) if word not in _NOT_METRICS and not re.fullmatch(r"\d+\w*", word)}


def selectors_in(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names it matches on) for each `metric{...}` in an expression."""
    return [
        (match[1], set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", match[2])))
        for match in re.finditer(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", expr)
    ]


def base_name(sample: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        name = sample.removesuffix(suffix)
        if name != sample and CONTRACT["metrics"].get(name, {}).get("type") == "histogram":
            return name
    return sample


def dashboard_exprs() -> list[str]:
    return [expr for _, expr in dashboard.panel_queries()] + dashboard.variable_queries()


def rule_exprs() -> list[str]:
    return [rule["expr"] for group in RULE["spec"]["groups"] for rule in group["rules"]]


def test_expression_parser_finds_metric_names():
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(vllm:e2e_request_latency_seconds_bucket{model_name=~"$m"}'
        '[$__rate_interval]))) / sum(rate(reward_gateway_score_count[1d] offset 1h)) and absent(up{job="x"} == 1)'
    )
    assert metrics_in(expr) == {"vllm:e2e_request_latency_seconds_bucket", "reward_gateway_score_count", "up"}
    assert metrics_in('label_values(reward_gateway_requests_total{namespace=~"$namespace"}, model)') == {
        "reward_gateway_requests_total"
    }


@pytest.mark.parametrize("where", ["dashboard", "alerts"])
def test_every_metric_used_is_in_the_contract(where):
    exprs = dashboard_exprs() if where == "dashboard" else rule_exprs()
    used = {base_name(name) for expr in exprs for name in metrics_in(expr)}
    assert used, "no metric found: the parser is broken"
    unknown = used - set(CONTRACT["metrics"])
    assert not unknown, f"{where} uses metrics nobody exports: {sorted(unknown)}"
    for expr in exprs:
        for metric, labels in selectors_in(expr):
            allowed = set(CONTRACT["metrics"][base_name(metric)]["labels"]) | set(CONTRACT["target_labels"]) | {"le"}
            assert labels <= allowed, f"{metric} has no labels {sorted(labels - allowed)} ({expr})"


def test_dashboard_queries_are_promql(promtool, tmp_path):
    # promtool parses each panel's query, Grafana's variables given values, as a recording rule
    rules = []
    for number, expr in enumerate(map(dashboard.with_values, dashboard_exprs())):
        if not expr.startswith("label_values("):
            rules.append({"record": f"dashboard:query_{number}", "expr": expr})
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", tmp_path / "dashboard.yaml"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_dashboard_panels_do_not_overlap():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    cells = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for y in range(grid["y"], grid["y"] + grid["h"]):
            for x in range(grid["x"], grid["x"] + grid["w"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[x, y]}"
                cells[x, y] = panel["title"]
    assert len({panel["id"] for panel in panels}) == len(panels)


def test_dashboard_covers_operator_gateway_and_vllm():
    board = json.loads(DASHBOARD.read_text())
    rows = [panel["title"] for panel in board["panels"] if panel["type"] == "row"]
    assert rows == ["Operator", "Reward gateway", "Rollout", "Judges", "vLLM"]
    assert {var["name"] for var in board["templating"]["list"]} >= {"datasource", "namespace", "model"}
    used = {base_name(name) for expr in dashboard_exprs() for name in metrics_in(expr)}
    for source in ("operator", "gateway", "vllm"):
        listed = {name for name, spec in CONTRACT["metrics"].items() if spec["source"] == source}
        assert listed <= used, f"dashboard shows no panel for {sorted(listed - used)}"
    # model-level panels follow the namespace and model filters
    for expr in dashboard_exprs():
        if "reward_gateway_" in expr and "label_values" not in expr:
            assert 'namespace=~"$namespace"' in expr and 'model=~"$model"' in expr, expr
        if "vllm:" in expr:
            assert 'namespace=~"$namespace"' in expr and 'model_name=~"$model"' in expr, expr


# ---- the contract against the exporters ----------------------------------------


def _contract_params(source: str) -> list:
    params = []
    for name, spec in CONTRACT["metrics"].items():
        if spec["source"] != source:
            continue
        params.append(pytest.param(name, spec, id=name))
    return params


def _declared_metrics(holder) -> dict[str, tuple[str, set[str]]]:
    """Exposed name -> (type, label names) of the metric objects an object or module holds (or holds in a dict).

    Children exist only once used; the declared label names are on the metric objects.
    """
    metrics = []
    for value in vars(holder).values():
        metrics += value.values() if isinstance(value, dict) else [value]
    return {
        metric._name + ("_total" if metric._type == "counter" else ""): (metric._type, set(metric._labelnames))
        for metric in metrics
        if hasattr(metric, "_labelnames") and hasattr(metric, "_type")
    }


def _used(holder, value: float) -> None:
    """Gives every metric an object holds a child, and one observation of the value: what a scrape then shows."""
    metrics = []
    for held in vars(holder).values():
        metrics += held.values() if isinstance(held, dict) else [held]
    for metric in metrics:
        if not (hasattr(metric, "_labelnames") and hasattr(metric, "_type")):
            continue
        child = metric.labels(*("x" for _ in metric._labelnames)) if metric._labelnames else metric
        if metric._type == "counter":
            child.inc(abs(value))
        elif metric._type == "gauge":
            child.set(value)
        else:
            child.observe(value)


def _gateway_registry():
    """(registry, declared) of the gateway's metrics (reward_gateway.signals.metrics,
    reward_gateway.rollout.canary_metrics), every one used once with a negative value, and the rollout window's
    gauges, computed at scrape time: one stable/candidate pair with ordered pairs and both roles' calls shows them."""
    from prometheus_client import CollectorRegistry

    from reward_gateway.rollout.canary_metrics import CanaryMetrics
    from reward_gateway.signals.metrics import GatewayMetrics

    registry = CollectorRegistry()
    gateway, canary = GatewayMetrics(registry), CanaryMetrics(registry, half_life_s=None)
    declared = _declared_metrics(gateway) | _declared_metrics(canary)
    for holder in (gateway, canary):
        _used(holder, -0.5)
    tracker = canary.tracker("rm", "rm-candidate-0123abcd")
    tracker.observe([0.1, 0.2, 0.3, 0.3], [0.3, 0.2, 0.1, 0.4], ["g", "g", "g", "g"])
    for role in ("stable", "candidate"):
        tracker.record_request(role, True, 0.1)
    return registry, declared


def _exported_by_the_gateway() -> dict[str, tuple[str, set[str]]]:
    registry, declared = _gateway_registry()
    window = {
        family.name: (family.type, {label for sample in family.samples for label in sample.labels})
        for family in registry.collect()
        if family.type == "gauge" and family.name not in declared
    }
    return declared | window


def _operator_registry():
    """The operator's registry, one object managed."""
    from prometheus_client import CollectorRegistry

    from reward_operator.metrics import BatchFigures, OperatorMetrics

    registry = CollectorRegistry()
    metrics = OperatorMetrics(["RewardModel"], registry)
    # counters, the histogram and the per-object series exist once used
    metrics.reconciles.labels(kind="RewardModel", result="ready", scope="full").inc()
    metrics.errors.labels(kind="RewardModel").inc()
    metrics.duration.labels(kind="RewardModel").observe(0.1)
    metrics.objects.record_ready("RewardModel", "ns", "rm", "True")
    metrics.objects.record_generation_lag("RewardModel", "ns", "rm", 2, 2)
    figures = BatchFigures({"total": 10, "scored": 9, "failed": 1, "scored_twice": 0}, {"succeeded": 1}, 5.0)
    metrics.objects.record_batch("RewardBatch", "ns", "rwb", figures)
    return registry


def _exported_by_the_operator() -> dict[str, tuple[str, set[str]]]:
    """Metric name -> (type, label names) of what the operator's registry exposes."""
    exported = {}
    for family in _operator_registry().collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {label for sample in family.samples for label in sample.labels if label != "le"}
        exported[name] = (family.type, labels)
    return exported


@pytest.mark.parametrize("where", ["dashboard", "alerts"])
def test_every_series_a_query_names_is_exported(where):
    # a listed histogram is not enough: prometheus-client leaves out a histogram's _sum when its buckets go below
    # zero, and a query of that _sum has no data on any Prometheus (the mean score did, until make prometheus-real)
    exposed = {
        sample.name
        for registry in (_gateway_registry()[0], _operator_registry())
        for family in registry.collect()
        for sample in family.samples
    }
    exprs = dashboard_exprs() if where == "dashboard" else rule_exprs()
    ours = {
        name
        for expr in exprs
        for name in metrics_in(expr)
        if CONTRACT["metrics"][base_name(name)]["source"] in ("gateway", "operator")
    }
    assert ours, "no metric of the gateway or the operator found: the parser is broken"
    assert ours - exposed == set(), f"{where} query series nobody exports: {sorted(ours - exposed)}"


@pytest.mark.parametrize(("name", "spec"), _contract_params("operator"))
def test_operator_exports(name, spec):
    exported = _exported_by_the_operator()
    assert name in exported, f"reward_operator.metrics exports no {name}"
    assert exported[name] == (spec["type"], set(spec["labels"]))


@pytest.mark.parametrize(("name", "spec"), _contract_params("gateway"))
def test_gateway_exports(name, spec):
    declared = _exported_by_the_gateway()
    assert name in declared, (
        f"reward_gateway.signals.metrics and reward_gateway.rollout.canary_metrics export no {name}"
    )
    assert declared[name] == (spec["type"], set(spec["labels"]))


def _vllm_loggers() -> str | None:
    package = vllm_package_dir()
    if package is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return None
        package = Path(next(iter(spec.submodule_search_locations)))
    path = package / "v1" / "metrics" / "loggers.py"
    return path.read_text() if path.is_file() else None


@pytest.mark.parametrize(("name", "spec"), _contract_params("vllm"))
def test_vllm_exports(name, spec):
    source = _vllm_loggers()
    if source is None:
        missing_vllm()
    # loggers.py declares name=..., then the counter class adds _total
    declared = name.removesuffix("_total") if spec["type"] == "counter" else name
    found = re.search(rf'_(counter|gauge|histogram)_cls\(\s*name="{re.escape(declared)}"', source)
    assert found, f"vLLM declares no {declared}"
    assert found[1] == spec["type"]


def test_contract_lists_every_gateway_metric():
    # the other way round: a metric the gateway adds is listed (and so needs a panel) before it ships
    listed = {name for name, spec in CONTRACT["metrics"].items() if spec["source"] == "gateway"}
    assert set(_exported_by_the_gateway()) - listed == set()
