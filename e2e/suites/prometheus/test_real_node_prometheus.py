"""Prometheus for real: the chart's monitoring objects, through prometheus-operator, scraping the real node.

The operator runs as a pod from its chart (``testenv.operator_pod``, as the operator-pod suite installs it, with
the chart's ServiceMonitor, PodMonitor and PrometheusRule switched on). prometheus-operator, built from its Go
module, turns them into the configuration and rule files of a Prometheus it runs on the real node
(``testenv.addons.prometheus``). A tiny CPU RewardModel serves and is scored; then, through Prometheus's HTTP
API:

1. every target of the chart's monitors is up: the operator pod, the gateway pod and vLLM;
2. the chart's alert rules are loaded and evaluate without an error, none firing on a healthy model;
3. each query of the Grafana dashboard answers; the panels a plain scoring run feeds have series, and the
   empty ones are named (what feeds them: a rollout, an error, a cold start);
4. a RewardModel whose vLLM crash-loops (its model names an architecture vLLM does not have) fires
   ``RewardModelNotReady`` (its ``for`` set to 20 s through the chart's ``prometheusRule.alerts``), and the alert
   clears once the RewardModel names a good model and turns Ready;
5. a rollout whose candidate has other weights (in shadow: the trainer gets the stable model's scores, the
   gateway compares) fires ``RewardCanaryAgreementLow`` once 200 pairs are compared (its ``for`` set to 10 s), and
   the alert clears once spec.canary is removed and the gateways no longer export the candidate; meanwhile
   the dashboard's Rollout row, which a plain scoring run leaves empty, answers (its empty panels named).

`make prometheus-real` runs it; not in `make test`: the Prometheus and prometheus-operator builds (about 15
CPU-minutes cold) and the vLLM image. Figures are printed, never asserted.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from reward_testing import dashboard
from reward_testing.paths import REPO
from reward_testing.scoring_cases import CONVERSATION, PROMPT, RESPONSE
from reward_testing.tiny_models import make_tiny_models, tar_model
from reward_testing.waiting import wait_until
from testenv import node
from testenv.addons import prometheus
from testenv.canary import OTHER_SEED, Traffic, canary_model
from testenv.helpers import condition, get_json, predictor_pod, wait_for_ready
from testenv.served import finished, reward_model, rewards, serve

MODEL = "watched"
# Panels a scoring run with coalescing on does not feed, and what would: each named in the output too.
FED_BY_OTHER_EVENTS = {
    "Reconcile errors": "a failed reconcile",
    "Objects not Ready": "an object not Ready or behind its generation",
    "5xx ratio": "a 5xx answer",
    "Upstream errors and in-flight requests": "an upstream error (the in-flight gauge answers)",
    "Held requests (scale from zero)": "a predictor at zero",
    "Hold duration (cold start seen by trainers)": "a request held through a cold start",
    # the scheduler queues a client's parts only while vLLM is busy with as many calls as it may have
    "Queued items by client (scheduling)": "requests waiting behind a busy vLLM (coalescing on)",
    "Queue wait by client (p99)": "requests waiting behind a busy vLLM (coalescing on)",
    # a RewardBatch's figures (e2e/suites/batch scores one; this suite serves a trainer's calls)
    "Batch rows by outcome": "a RewardBatch with a finished shard",
    "Batch shards": "a RewardBatch's Job",
    "Batch rows per second": "a RewardBatch with a finished shard",
}
ROLLOUT_ROW = "Rollout"  # every panel under it: a rollout in progress (the canary suites)
# Every panel under it: a judge's verdicts (model.kind judge). A cluster that serves no judge shows them empty, as
# Grafana's "No data": this suite scores a score-head model, whose gateway must export no judge series (a leak
# would fill them with a score-head model's numbers); the judges' metrics and labels are checked against the
# gateway's exports offline (e2e/tests/offline/test_monitoring.py), their values in the judge suite.
JUDGE_ROW = "Judges"


@pytest.fixture(scope="module")
def prometheus_operator(plane) -> None:
    """prometheus-operator, its CRDs (before the chart's install renders its monitors) and its images on the real
    node: the session's control plane runs it (TESTENV_PROMETHEUS=1)."""
    if not plane.running("prometheus"):
        pytest.fail("the test bed runs no prometheus-operator: TESTENV_PROMETHEUS=1 (make prometheus-real sets it)")


@pytest.fixture(scope="module")
def chart_values(prometheus_operator) -> dict:
    """The chart's monitoring objects switched on, scraped every 5 s."""
    every = prometheus.INTERVAL
    return {
        "metrics": {
            "serviceMonitor": {"enabled": True, "interval": every},
            "podMonitor": {"enabled": True, "interval": every},
        },
        # the crash-loop test's alert fires after 20 s of its condition instead of 15 min,
        # and the canary's after 10 s instead of 10 min
        "prometheusRule": {"enabled": True, "alerts": {"RewardModelNotReady": {"for": "20s"},
                                                       "RewardCanaryAgreementLow": {"for": "10s"}}},
    }  # fmt: skip


@pytest.fixture(scope="module")
def prometheus_api(cluster, release) -> Iterator[prometheus.Api]:
    """The Prometheus that prometheus-operator (on the test bed) runs on the real node."""
    started = time.monotonic()
    namespace = f"monitoring-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    objects = prometheus.objects(namespace)
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in objects))
    try:
        api = prometheus.wait_for_api(cluster, namespace)
        print(f"[prometheus] the Prometheus pod Ready {time.monotonic() - started:.0f}s after its object")
        yield api
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", input="\n---\n".join(yaml.safe_dump(o) for o in objects),
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def scored(cluster, release, models_namespace, model_uris, storage_initializer_restricted) -> Iterator[str]:
    """A tiny CPU RewardModel, coalescing on (the scheduler's panels), scored a few times; its namespace."""
    spec = reward_model(MODEL, "sequence", model_uris["sequence"], gateway={"scheduling": {"coalesce": True}})
    try:
        served_model = serve(cluster, models_namespace, spec)
        url = served_model["status"]["url"]
        body = {"items": [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]}
        for _ in range(5):
            answer = rewards(cluster, models_namespace, url, "/v1/rewards", body)
            assert len(answer["rewards"]) == 2, answer
        yield models_namespace
    finally:
        finished(cluster, models_namespace, MODEL)


def scrape_pools(api: prometheus.Api) -> dict[str, list[dict]]:
    pools: dict[str, list[dict]] = {}
    for target in api.targets():
        pools.setdefault(target["scrapePool"], []).append(target)
    return pools


def test_prometheus_scrapes_the_operator_pod_the_gateway_and_vllm(cluster, release, prometheus_api, scored) -> None:
    def every_target_up() -> dict | None:
        pools = scrape_pools(prometheus_api)
        operator = [
            t for name, ts in pools.items() if name.startswith(f"serviceMonitor/{release.namespace}/") for t in ts
        ]
        models = [t for name, ts in pools.items() if name.startswith(f"podMonitor/{release.namespace}/") for t in ts]
        ours = [t for t in models if t["labels"].get("namespace") == scored]
        containers = {t["labels"].get("container") for t in ours}
        if operator and len(ours) >= 2 and all(t["health"] == "up" for t in operator + ours):
            return {"operator": operator, "models": ours, "containers": containers, "pools": sorted(pools)}
        return None

    started = time.monotonic()
    found = wait_until("every target of the chart's monitors up", every_target_up, timeout=120, interval=2)
    # the model's pods, the predictor's vLLM and the gateway, by the label the operator sets on both
    assert {t["labels"].get("rewardmodel") for t in found["models"]} == {MODEL}, found["models"]
    assert "kserve-container" in found["containers"], found["containers"]
    # up, and each scraped what it exports
    # the scoring run's series, once a scrape after it is in (every 5 s; the second run asserted too early)
    for query in (
        f'reward_operator_objects{{namespace="{release.namespace}"}}',
        f'reward_gateway_requests_total{{namespace="{scored}", model="{MODEL}"}}',
        f'vllm:prompt_tokens_total{{namespace="{scored}", model_name="{MODEL}"}}',
    ):
        wait_until(f"a series of {query}", lambda query=query: prometheus_api.query(query), timeout=60, interval=2)
    print(f"\n[prometheus] targets up {time.monotonic() - started:.1f}s after the scoring run: operator "
          f"{[t['labels'].get('pod') for t in found['operator']]}, {MODEL}'s "
          f"{sorted((t['labels'].get('pod'), t['labels'].get('container')) for t in found['models'])}; "
          f"scrape pools {found['pools']}")  # fmt: skip


def test_the_charts_alert_rules_are_loaded_and_evaluate(prometheus_api, scored) -> None:
    rule = yaml.safe_load((REPO / "manifests" / "prometheus" / "prometheusrule.yaml").read_text())
    wanted = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}

    def loaded_and_evaluated() -> list[dict] | None:
        rules = [r for group in prometheus_api.rule_groups() for r in group["rules"]]
        ours = [r for r in rules if r["name"] in wanted]
        # an evaluation time of the year 0001 is Prometheus's "never evaluated"
        evaluated = all(not r.get("lastEvaluation", "0001").startswith("0001") for r in ours)
        return ours if {r["name"] for r in ours} == wanted and evaluated else None

    ours = wait_until("the chart's rules loaded and evaluated once", loaded_and_evaluated, timeout=120, interval=2)
    broken = {r["name"]: r.get("lastError") for r in ours if r["health"] != "ok"}
    assert not broken, broken

    # a model that took longer than an alert's `for` to start (RewardModelNotReady's 20 s here) fired while
    # it started: the alert resolves at the first evaluation that sees it Ready
    def none_firing() -> bool:
        return not [
            a for a in prometheus_api.alerts() if a["labels"].get("alertname") in wanted and a["state"] == "firing"
        ]

    wait_until("no alert of the chart's firing on a healthy model", none_firing, timeout=120, interval=2)
    print(f"\n[prometheus] {len(ours)} alert rules of the chart loaded by prometheus-operator, each evaluated, "
          f"health ok, none firing on a healthy model: {sorted(wanted)}")  # fmt: skip


def rows_of_panels() -> dict[str, str]:
    """Each dashboard panel's row, by the panel's title."""
    row_of: dict[str, str] = {}
    row = ""
    for panel in json.loads(dashboard.DASHBOARD.read_text())["panels"]:
        row = panel["title"] if panel["type"] == "row" else row
        row_of.setdefault(panel["title"], row)
    return row_of


def panel_series(api: prometheus.Api, namespace: str, model: str) -> dict[str, int]:
    """How many series each panel's queries answer, Grafana's filters set to one model."""
    values = {**dashboard.ALL_VALUES, "$namespace": namespace, "$model": model}
    counts: dict[str, int] = {}
    for title, expr in dashboard.panel_queries():
        counts[title] = counts.get(title, 0) + len(api.query(dashboard.with_values(expr, values)))
    return counts


def test_every_dashboard_query_answers_and_the_scored_panels_have_series(prometheus_api, scored) -> None:
    row_of = rows_of_panels()
    values = {**dashboard.ALL_VALUES, "$namespace": scored, "$model": MODEL}

    def series_per_panel() -> dict[str, int]:
        return panel_series(prometheus_api, scored, MODEL)

    def fed_and_empty(counts: dict[str, int]) -> list[str]:
        unfed = (ROLLOUT_ROW, JUDGE_ROW)
        return [t for t, n in counts.items() if not n and t not in FED_BY_OTHER_EVENTS and row_of[t] not in unfed]

    def answers() -> dict[str, int] | None:
        counts = series_per_panel()
        return None if fed_and_empty(counts) else counts

    try:
        counts = wait_until("a series in every panel a scoring run feeds", answers, timeout=120, interval=5)
    except AssertionError:
        empty = fed_and_empty(series_per_panel())
        raw = {
            m: prometheus_api.query(f'{m}{{namespace="{scored}"}}')
            for m in (
                "reward_gateway_score_positive_sum_total",
                "reward_gateway_score_negative_sum_total",
                "reward_gateway_score_count",
            )
        }
        raise AssertionError(f"panels with no series after a scoring run: {empty}; the score's series: {raw}") from None
    for query in dashboard.variable_queries():  # label_values(metric{...}, label) as Grafana asks: its series
        metric = query.removeprefix("label_values(").rsplit(",", 1)[0]
        assert prometheus_api.query(dashboard.with_values(metric, values)), query
    judged = {t: n for t, n in counts.items() if row_of[t] == JUDGE_ROW and n}
    assert not judged, f"a score-head model fed the judges' panels: {judged}"
    empty = {t: FED_BY_OTHER_EVENTS.get(t, f"a {row_of[t].lower()} row's event") for t, n in counts.items() if not n}
    print(f"\n[prometheus] dashboard: {sum(1 for n in counts.values() if n)} of {len(counts)} panels with series "
          f"after the scoring run; empty: {empty}")  # fmt: skip


def alert_state(api: prometheus.Api, alertname: str, namespace: str, name: str, by: str = "name") -> str:
    """``firing``, ``pending`` or ``inactive`` (no alert) for one object's alert (``by``: the label naming it:
    ``name`` for the operator's alerts, ``model`` for the gateway's)."""
    for alert in api.alerts():
        labels = alert["labels"]
        if (labels.get("alertname"), labels.get("namespace"), labels.get(by)) == (alertname, namespace, name):
            return alert["state"]
    return "inactive"


def wait_for_alert(api: prometheus.Api, alertname: str, namespace: str, name: str, state: str, by: str = "name",
                   timeout: float = 300) -> None:  # fmt: skip
    """Until one object's alert is in ``state`` (``firing``, or ``inactive``: cleared), Prometheus asked every 2 s."""
    word = "cleared" if state == "inactive" else state
    wait_until(f"{alertname} {word}", lambda: alert_state(api, alertname, namespace, name, by) == state,
               timeout=timeout, interval=2)  # fmt: skip


def test_a_crash_looping_vllm_fires_its_alert_which_clears_once_healthy(
    cluster, plane, prometheus_api, scored, model_uris, tiny_models, tmp_path
) -> None:
    finished(cluster, scored, MODEL)  # the node's 2 cores: the scored model makes room (the panels are checked)
    # a model whose config names an architecture vLLM has not: downloaded fine, vLLM exits at start, again and again
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models["sequence"].path, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchRewardModel"]}))
    tar_model(broken, node.storage_dir(plane.directory) / "broken.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], "broken.tar.gz")
    name, alert = "crashing", "RewardModelNotReady"
    started = time.monotonic()
    # small enough that the fixed revision's pods schedule beside the crash-looping ones (a rolling update)
    small = reward_model(name, "sequence", uri, resources={"cpu": "600m", "memory": "3Gi"},
                         gateway={"resources": {"cpu": "100m", "memory": "512Mi"}})  # fmt: skip
    cluster.kubectl("apply", "-n", scored, "-f", "-", input=json.dumps(small))
    try:

        def restarts() -> int:
            pod = predictor_pod(cluster, scored, name) or {"status": {}}
            statuses = pod["status"].get("containerStatuses", [])
            return sum(s.get("restartCount", 0) for s in statuses if s["name"] == "kserve-container")

        restarted = wait_until("vLLM's container restarted", restarts, timeout=600, interval=2)
        crashed = time.monotonic() - started
        wait_for_alert(prometheus_api, alert, scored, name, "firing")
        fired = time.monotonic() - started
        assert condition(get_json(cluster, "rewardmodel", name, "-n", scored))["status"] != "True"

        # healthy again: the good model, Ready, and the alert resolves
        patch = {"spec": {"model": {"uri": model_uris["sequence"]}}}
        cluster.kubectl("patch", "rewardmodel", name, "-n", scored, "--type=merge", "-p", json.dumps(patch))
        wait_for_ready(cluster, scored, name, timeout=900)
        ready = time.monotonic() - started
        wait_for_alert(prometheus_api, alert, scored, name, "inactive", timeout=120)
        cleared = time.monotonic() - started
    finally:
        finished(cluster, scored, name)
    print(f"\n[prometheus] crash loop: vLLM restarted {crashed:.0f}s after the apply ({restarted} restart(s) seen), "
          f"{alert} firing at {fired:.0f}s (for: 20s); the good model Ready at {ready:.0f}s, the alert cleared at "
          f"{cleared:.0f}s")  # fmt: skip


CANARY = "judged"


def test_a_disagreeing_candidate_fires_its_alert_which_clears_when_the_rollout_ends(
    cluster, plane, prometheus_api, scored, model_uris, tmp_path_factory
) -> None:
    finished(cluster, scored, MODEL)  # the node's 2 cores: two vLLMs of 600m each and the gateway
    storage, port = node.storage_dir(plane.directory), plane.state.ports[node.STORAGE]
    other = make_tiny_models(tmp_path_factory.mktemp("other-weights"), ("sequence",), seed=OTHER_SEED)
    tar_model(other["sequence"], storage / "sequence-other.tar.gz")
    candidate = node.storage_url(node.host_address(), port, "sequence-other.tar.gz")
    alert = "RewardCanaryAgreementLow"
    # shadow, and a gate that judges only after far more pairs than the alert's 200: the rollout goes on comparing
    spec = canary_model(CANARY, model_uris["sequence"], candidate, minPairs=100000)
    started = time.monotonic()
    try:
        served_model = serve(cluster, scored, spec)
        ready = time.monotonic() - started
        with Traffic(cluster, scored, served_model["status"]["url"], "alert") as traffic:
            traffic.resume()
            sent = time.monotonic()
            wait_for_alert(prometheus_api, alert, scored, CANARY, "firing", by="model", timeout=600)
            fired = time.monotonic() - sent
            traffic.pause()
        # the dashboard's Rollout row, which a plain scoring run leaves empty
        row_of = rows_of_panels()
        rollout = {t: n for t, n in panel_series(prometheus_api, scored, CANARY).items() if row_of[t] == ROLLOUT_ROW}
        assert rollout["Agreement"], rollout
        (labels,) = [a["labels"] for a in prometheus_api.alerts() if a["labels"].get("alertname") == alert]
        answered = [a for a in traffic.answers if a.status == 200]
        assert answered and {a.role for a in answered} == {"stable"}, traffic.answers[-3:]  # shadow: stable's

        # the rollout ends (spec.canary removed, as a Git revert would): the gateways roll without the candidate
        cluster.kubectl("patch", "rewardmodel", CANARY, "-n", scored, "--type=json",
                        "-p", json.dumps([{"op": "remove", "path": "/spec/canary"}]))  # fmt: skip
        removed = time.monotonic()
        wait_for_alert(prometheus_api, alert, scored, CANARY, "inactive", by="model")
        cleared = time.monotonic() - removed
    finally:
        finished(cluster, scored, CANARY)
    print(f"\n[prometheus] canary: stable and candidate Ready {ready:.0f}s after the apply; {alert} firing "
          f"{fired:.0f}s after the traffic began ({len(traffic.answers)} requests of 2 groups of 4, for: 10s; "
          f"candidate {labels.get('candidate')}); spec.canary removed: cleared {cleared:.0f}s later; the Rollout "
          f"row: {sum(1 for n in rollout.values() if n)} of {len(rollout)} panels with series, empty: "
          f"{[t for t, n in rollout.items() if not n]}")  # fmt: skip
