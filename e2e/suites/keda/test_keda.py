"""KEDA for real (scale to zero on the gateway's load): a ScaledObject scales a Deployment 0 -> 1 -> N -> 0.

KEDA's operator and external metrics API server run against the local control
plane (``keda_cluster``: see ``testenv/addons/keda.py``), and the trigger is KEDA's
``external`` scaler: a gRPC server on a loopback port speaking KEDA's
``externalscaler.ExternalScaler`` service (IsActive, StreamIsActive,
GetMetricSpec, GetMetrics). In the first two tests it is a stand-in whose
activity and metric the test turns up and down; in the last it is the reward
gateway itself (``python -m reward_gateway``, run on the host), woken by a request
it holds for a predictor at zero. Each waits on the Deployment's
``spec.replicas``, which only KEDA (0 <-> 1) and the HPA it owns (1 <-> N) change.
kwok runs the pods, so nothing here waits on a container.

The messages and the service's method handlers are the gateway's own
(``reward_gateway.scale.scaler``, built from a descriptor written out after KEDA's
``pkg/scalers/externalscaler/externalscaler.proto``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from reward_gateway.scale.scaler import MESSAGES, method_handlers
from reward_testing.fake_vllm import FakeVllm, logit, serve_in_thread
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until
from testenv.helpers import condition, get_json

METRIC = "inflight"  # the stand-in's metric


@dataclass
class ExternalScaler:
    """KEDA's external scaler, served over plaintext gRPC on a loopback port.

    ``active`` is what IsActive answers (and StreamIsActive pushes on each change);
    ``value`` is the metric GetMetrics reports against a target of ``target`` per
    replica, so the HPA wants ceil(value / target) replicas."""

    active: bool = False
    value: float = 0.0
    target: float = 1.0
    calls: Counter = field(default_factory=Counter)
    refs: list[dict] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    address: str = ""

    def set(self, active: bool, value: float) -> float:
        """Change what the scaler reports; returns when (time.monotonic())."""
        with self.changed:
            self.active, self.value = active, value
            self.changed.notify_all()
        return time.monotonic()

    def seen(self, method: str, ref) -> None:
        with self.changed:
            self.calls[method] += 1
            self.refs.append({"name": ref.name, "namespace": ref.namespace, "metadata": dict(ref.scalerMetadata)})
            del self.refs[:-20]


@pytest.fixture
def external_scaler() -> Iterator[ExternalScaler]:
    scaler = ExternalScaler()

    def is_active(ref, context):
        scaler.seen("IsActive", ref)
        return MESSAGES["IsActiveResponse"](result=scaler.active)

    def stream_is_active(ref, context):
        scaler.seen("StreamIsActive", ref)
        last = None
        while context.is_active():
            with scaler.changed:
                if scaler.active == last:
                    scaler.changed.wait(timeout=0.5)
                    continue
                last = scaler.active
            yield MESSAGES["IsActiveResponse"](result=last)

    def get_metric_spec(ref, context):
        scaler.seen("GetMetricSpec", ref)
        spec = MESSAGES["MetricSpec"](metricName=METRIC, targetSizeFloat=scaler.target)
        return MESSAGES["GetMetricSpecResponse"](metricSpecs=[spec])

    def get_metrics(request, context):
        scaler.seen("GetMetrics", request.scaledObjectRef)
        value = MESSAGES["MetricValue"](metricName=request.metricName, metricValueFloat=scaler.value)
        return MESSAGES["GetMetricsResponse"](metricValues=[value])

    # StreamMetricSpec (optional in KEDA's proto) is left out: gRPC answers Unimplemented,
    # and KEDA then keeps reading GetMetricSpec.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    behaviours = {
        "IsActive": is_active,
        "StreamIsActive": stream_is_active,
        "GetMetricSpec": get_metric_spec,
        "GetMetrics": get_metrics,
    }
    server.add_generic_rpc_handlers([method_handlers(behaviours)])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    scaler.address = f"127.0.0.1:{port}"
    try:
        yield scaler
    finally:
        server.stop(grace=0)


def _deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # kwok's fake nodes run it: no image is pulled
                    "nodeSelector": {"type": "kwok"},
                    "containers": [{"name": "predictor", "image": "predictor:fake"}],
                },
            },
        },
    }


def _scaled_object(name: str, target: str, trigger: dict, polling: int, cooldown: int) -> dict:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"name": target},
            "minReplicaCount": 0,
            "maxReplicaCount": 3,
            "pollingInterval": polling,
            "cooldownPeriod": cooldown,
            "advanced": {
                # scale down as soon as the metric drops (the HPA's default waits 5 minutes)
                "horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}},
            },
            "triggers": [trigger],
        },
    }


def _apply(cluster, namespace: str, *documents: dict) -> None:
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=e2e", "-n", namespace, "-f", "-",
        input=yaml.safe_dump_all(documents),
    )  # fmt: skip


def _replicas(cluster, namespace: str, name: str) -> tuple[int, int]:
    """(spec.replicas, status.readyReplicas) of the Deployment."""
    deployment = get_json(cluster, "deployment", name, "-n", namespace) or {}
    return deployment.get("spec", {}).get("replicas", -1), deployment.get("status", {}).get("readyReplicas", 0)


def _wait_replicas(cluster, namespace: str, name: str, wanted: int, timeout: float, ready: bool = True) -> float:
    """Wait until KEDA or its HPA set spec.replicas to ``wanted`` (and, with ``ready``, kwok has
    that many pods Ready); returns when spec.replicas got there (time.monotonic())."""
    decided: list[float] = []

    def reached() -> bool:
        spec, ready_count = _replicas(cluster, namespace, name)
        if spec == wanted and not decided:
            decided.append(time.monotonic())
        return bool(decided) and spec == wanted and (not ready or ready_count == wanted)

    wait_until(f"deployment/{name} at {wanted} replicas", reached, timeout=timeout, interval=0.2)
    return decided[0]


def _events(cluster, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.name={name}"
    result = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", selector, "-o", "json")
    listed = json.loads(result.stdout)["items"]
    return [f"{event.get('reason')}: {event.get('message')}" for event in listed]


def test_external_scaler_scales_a_deployment_from_zero_to_n_and_back(keda_cluster, keda_namespace, external_scaler):
    """Polled ``external`` trigger: idle -> 0, active -> 1 (KEDA), load -> 3 (the HPA through
    KEDA's metrics API), idle again -> 1 -> 0 after the cooldown."""
    cluster, namespace = keda_cluster, keda_namespace
    started = time.monotonic()
    trigger = {
        "type": "external",
        "metadata": {"scalerAddress": external_scaler.address, "rewardModel": "rm"},
    }
    _apply(cluster, namespace, _deployment("predictor", 1), _scaled_object("predictor", "predictor", trigger, 1, 2))

    def ready() -> bool:
        scaled = get_json(cluster, "scaledobject", "predictor", "-n", namespace)
        return (condition(scaled, "Ready") or {}).get("status") == "True"

    wait_until("ScaledObject Ready", ready, timeout=60)
    hpa = get_json(cluster, "hpa", "keda-hpa-predictor", "-n", namespace)
    assert hpa is not None, "KEDA made no HPA for the ScaledObject"
    assert hpa["spec"]["minReplicas"] == 1 and hpa["spec"]["maxReplicas"] == 3

    # idle: KEDA itself takes the Deployment to zero (no cooldown before the first activity)
    _wait_replicas(cluster, namespace, "predictor", 0, timeout=60)
    print(f"\nidle -> 0 replicas {time.monotonic() - started:.1f}s after the ScaledObject was applied")

    # active: KEDA scales 0 -> 1 through the scale subresource at its next poll
    activated = external_scaler.set(active=True, value=1)
    decided = _wait_replicas(cluster, namespace, "predictor", 1, timeout=60)
    print(f"active -> 1 replica: scale-up decision {decided - activated:.1f}s after activation (polling 1 s)")

    # load: 3 per 1 target -> the HPA wants 3, reading the metric through KEDA's adapter
    loaded = external_scaler.set(active=True, value=3)
    decided = _wait_replicas(cluster, namespace, "predictor", 3, timeout=90)
    print(f"load 3x target -> 3 replicas {decided - loaded:.1f}s after the metric rose (HPA sync 2 s)")

    def hpa_read_the_metric() -> dict | None:
        # the HPA's own record of what it read through external.metrics.k8s.io
        status = (get_json(cluster, "hpa", "keda-hpa-predictor", "-n", namespace) or {}).get("status", {})
        for metric in status.get("currentMetrics") or []:
            external = metric.get("external") or {}
            if external.get("metric", {}).get("name") == f"s0-{METRIC}" and external.get("current"):
                return external["current"]
        return None

    # 3 per replica while it had one, 1 once it has three: either proves the path
    current = wait_until("the HPA's current value of s0-inflight", hpa_read_the_metric, timeout=30)
    assert current.get("averageValue") in ("3", "1"), current
    print(f"the HPA read s0-{METRIC} through KEDA's metrics API: {current}")

    # idle again: the HPA goes back to its minimum (1), then KEDA to 0 after the 2 s cooldown
    idled = external_scaler.set(active=False, value=0)
    decided = _wait_replicas(cluster, namespace, "predictor", 0, timeout=120, ready=False)
    print(f"idle -> 0 replicas {decided - idled:.1f}s after the metric dropped (cooldown 2 s)")

    # KEDA passed the ScaledObject's identity and the trigger's metadata to the scaler
    seen = external_scaler.refs[-1]
    assert seen["name"] == "predictor" and seen["namespace"] == namespace
    assert seen["metadata"]["rewardModel"] == "rm"
    print(f"scaler calls: {dict(external_scaler.calls)}")
    scaled_events = [event for event in _events(cluster, namespace, "predictor") if "Scaled" in event]
    print("KEDA events: " + "; ".join(scaled_events[-3:]))


def test_external_push_wakes_a_sleeping_deployment_at_once(keda_cluster, keda_namespace, external_scaler):
    """``external-push``: KEDA holds StreamIsActive open and scales 0 -> 1 on the first ``true``,
    without waiting for its poll (60 s here). This is the path for the gateway's first held
    request. Deactivation is not pushed: KEDA ignores ``false`` on the stream and scales down
    through its polling (IsActive) after the cooldown."""
    cluster, namespace = keda_cluster, keda_namespace
    polling = 60
    trigger = {"type": "external-push", "metadata": {"scalerAddress": external_scaler.address}}
    _apply(cluster, namespace, _deployment("sleeper", 1), _scaled_object("sleeper", "sleeper", trigger, polling, 2))
    _wait_replicas(cluster, namespace, "sleeper", 0, timeout=60)
    wait_until("KEDA holding StreamIsActive open", lambda: external_scaler.calls["StreamIsActive"] > 0, timeout=30)

    activated = external_scaler.set(active=True, value=1)
    decided = _wait_replicas(cluster, namespace, "sleeper", 1, timeout=polling / 2)
    print(f"\npushed activation -> 1 replica: scale-up decision {decided - activated:.2f}s later (polling {polling} s)")


def test_the_gateway_wakes_its_predictor_and_scales_it_on_held_load(keda_cluster, keda_namespace, run_gateway):
    """The real gateway as KEDA's ``external-push`` scaler. A Deployment standing for the
    predictor idles to zero. A request sent to the gateway is held (the predictor's port
    refuses connections), the gateway pushes ``true`` and KEDA scales 0 -> 1 at once
    (polling 30 s). Two more requests are held: 24 items in flight against a target of 8
    per replica, and the HPA reading the gateway's ``inflight-items`` through KEDA's
    metrics API takes it to 3. Then a fake vLLM comes up on the predictor's port and
    every held request is answered in full; idle again, the HPA goes back to 1 and
    KEDA's poll, finding the gateway inactive, to 0."""
    cluster, namespace = keda_cluster, keda_namespace
    polling, per_request = 30, 8
    predictor_port, gateway_port, scaler_port = free_port(), free_port(), free_port()
    env = {
        "REWARD_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{predictor_port}",
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(gateway_port),
        "REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS": "140",
        "REWARD_GATEWAY_SCALER_PORT": str(scaler_port),
        "REWARD_GATEWAY_SCALER_TARGET": str(per_request),
        "REWARD_GATEWAY_SCALER_ACTIVE_SECONDS": "1",
    }
    url, log = run_gateway([], env, gateway_port, "rm")
    trigger = {"type": "external-push", "metadata": {"scalerAddress": f"127.0.0.1:{scaler_port}", "rewardModel": "rm"}}
    scaled_object = _scaled_object("rm", "rm-predictor", trigger, polling, cooldown=2)
    _apply(cluster, namespace, _deployment("rm-predictor", 1), scaled_object)
    _wait_replicas(cluster, namespace, "rm-predictor", 0, timeout=60)
    wait_until("KEDA holding the gateway's StreamIsActive open", lambda: "KEDA holds" in log.read_text(), timeout=30)
    scaled = get_json(cluster, "scaledobject", "rm", "-n", namespace)
    assert "s0-inflight-items" in scaled["status"].get("externalMetricNames", []), scaled["status"]

    answers: dict[str, httpx.Response] = {}

    def send(group: str) -> threading.Thread:
        body = {"items": [{"text": f"{group}{n}", "group": group} for n in range(per_request)]}

        def post() -> None:
            answers[group] = httpx.post(f"{url}/v1/rewards", json=body, timeout=150)

        thread = threading.Thread(target=post, daemon=True)
        thread.start()
        return thread

    sent = time.monotonic()
    senders = [send("a")]
    decided = _wait_replicas(cluster, namespace, "rm-predictor", 1, timeout=polling / 2)
    print(f"\nfirst held request -> scale-up decision {decided - sent:.2f}s (polling {polling} s)")

    loaded = time.monotonic()
    senders += [send("b"), send("c")]
    decided = _wait_replicas(cluster, namespace, "rm-predictor", 3, timeout=60)
    print(f"{3 * per_request} items held, target {per_request} -> 3 replicas {decided - loaded:.1f}s later")
    assert not answers, f"answered before the predictor was up: {answers}"

    with serve_in_thread(FakeVllm().app, port=predictor_port):
        for sender in senders:
            sender.join(timeout=30)
        for group in "abc":
            answer = answers[group]
            assert answer.status_code == 200, answer.text
            assert answer.json()["rewards"] == [logit(f"{group}{n}") for n in range(per_request)]
        print(f"3 held requests answered in full {time.monotonic() - sent:.1f}s after the first was sent")
        metrics = httpx.get(f"{url}/metrics").text
        assert 'reward_gateway_hold_duration_seconds_count{model="rm"} 3.0' in metrics
        assert 'reward_gateway_held_requests{model="rm"} 0.0' in metrics

    idle = time.monotonic()
    decided = _wait_replicas(cluster, namespace, "rm-predictor", 0, timeout=polling + 60, ready=False)
    print(f"idle -> 0 replicas {decided - idle:.1f}s after the answers (polling {polling} s, cooldown 2 s)")


def test_a_request_held_by_another_gateway_replica_wakes_the_predictor(keda_cluster, keda_namespace, run_gateway):
    """Two gateway replicas that know each other (REWARD_GATEWAY_SCALER_PEERS); KEDA's
    trigger reaches only the first, as it reaches one pod of a Service. A request held by
    the second wakes the predictor all the same: the first relays its peer's ``true`` on
    KEDA's stream, and answers for both when KEDA and its HPA ask."""
    cluster, namespace = keda_cluster, keda_namespace
    polling = 30
    predictor_port = free_port()
    scaler_ports = [free_port(), free_port()]
    peers = ",".join(f"127.0.0.1:{port}" for port in scaler_ports)
    replicas = []
    for scaler_port in scaler_ports:
        gateway_port = free_port()
        env = {
            "REWARD_GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{predictor_port}",
            "REWARD_GATEWAY_MODEL_NAME": "rm",
            "REWARD_GATEWAY_PORT": str(gateway_port),
            "REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS": "120",
            "REWARD_GATEWAY_SCALER_PORT": str(scaler_port),
            "REWARD_GATEWAY_SCALER_PEERS": peers,
            "REWARD_GATEWAY_SCALER_TARGET": "8",
        }
        replicas.append(run_gateway([], env, gateway_port, "rm"))
    (_, reached_log), (holding_url, _) = replicas
    trigger = {"type": "external-push", "metadata": {"scalerAddress": f"127.0.0.1:{scaler_ports[0]}"}}
    scaled_object = _scaled_object("rm", "rm-predictor", trigger, polling, cooldown=2)
    _apply(cluster, namespace, _deployment("rm-predictor", 1), scaled_object)
    _wait_replicas(cluster, namespace, "rm-predictor", 0, timeout=60)
    wait_until("KEDA holding StreamIsActive open", lambda: "KEDA holds" in reached_log.read_text(), timeout=30)

    answers: list[httpx.Response] = []
    body = {"items": [{"text": "a", "group": "g"}, {"text": "b", "group": "g"}]}
    sender = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{holding_url}/v1/rewards", json=body, timeout=150)), daemon=True
    )
    sent = time.monotonic()
    sender.start()
    decided = _wait_replicas(cluster, namespace, "rm-predictor", 1, timeout=polling / 2)
    print(f"\nrequest held by the other replica -> scale-up decision {decided - sent:.2f}s (polling {polling} s)")

    with serve_in_thread(FakeVllm().app, port=predictor_port):
        sender.join(timeout=30)
        (answer,) = answers
        assert answer.status_code == 200, answer.text
        assert answer.json()["rewards"] == [logit("a"), logit("b")]


def test_the_operators_scale_to_zero_renderings_pass_kserves_webhooks_and_kedas_schema(keda_cluster, keda_namespace):
    """Every golden case's children, ScaledObjects included, dry-run server-side where KEDA's CRDs
    are installed (the default test bed, which has none, leaves the ScaledObjects to this test)."""
    from reward_operator.render import render_reward_model
    from reward_testing.paths import GOLDEN

    scaled_objects = 0
    for path in sorted((GOLDEN / "inputs").glob("*.yaml")):
        reward_model = yaml.safe_load(path.read_text())
        reward_model["metadata"].update(namespace=keda_namespace, uid="00000000-0000-4000-8000-000000000000")
        for child in render_reward_model(reward_model):
            scaled_objects += child["kind"] == "ScaledObject"
            result = keda_cluster.kubectl(
                "apply", "--server-side", "--dry-run=server", "--field-manager=reward-operator", "-f", "-",
                input=yaml.safe_dump(child), check=False,
            )  # fmt: skip
            assert result.returncode == 0, f"{path.name}: {result.stderr}"
    assert scaled_objects >= 2


def test_the_operator_hands_a_predictor_at_zero_to_keda_and_takes_it_back(keda_cluster, keda_namespace, keda_operator):
    """A Standard-mode RewardModel with minReplicas 0, reconciled by the real operator on a cluster
    with KServe's manager and KEDA's operator: the InferenceService (autoscalerClass external) is taken
    by KServe's webhooks and controller, which makes the predictor's Deployment and no HPA of its own;
    the scaler Service and the ScaledObject are applied, owned by the RewardModel, and KEDA takes the
    predictor's Deployment as its target. Set back to minReplicas 1, both are pruned and KServe's HPA
    returns."""
    cluster, namespace, name = keda_cluster, keda_namespace, "skywork-rm"
    manifest = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text()
    )
    manifest["spec"]["serving"] = {"minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "90s"}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    owner_uid = get_json(cluster, "rewardmodel", name, "-n", namespace)["metadata"]["uid"]

    scaled = wait_until(
        "the ScaledObject", lambda: get_json(cluster, "scaledobject", f"{name}-predictor", "-n", namespace), timeout=120
    )
    assert scaled["metadata"]["ownerReferences"][0]["uid"] == owner_uid
    assert scaled["spec"]["cooldownPeriod"] == 90
    service = get_json(cluster, "service", f"{name}-gateway-scaler", "-n", namespace)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    isvc = get_json(cluster, "inferenceservice", name, "-n", namespace)
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"

    def kserve_made_the_predictor():
        return get_json(cluster, "deployment", f"{name}-predictor", "-n", namespace)

    wait_until("KServe's predictor Deployment", kserve_made_the_predictor, timeout=120)
    # KEDA read the ScaledObject and resolved its target to KServe's Deployment
    target = wait_until(
        "KEDA to take the predictor as its target",
        lambda: (
            (get_json(cluster, "scaledobject", f"{name}-predictor", "-n", namespace) or {})
            .get("status", {})
            .get("scaleTargetGVKR")
        ),
        timeout=60,
    )
    assert (target["group"], target["kind"], target["resource"]) == ("apps", "Deployment", "deployments")
    hpas = get_json(cluster, "horizontalpodautoscalers", "-n", namespace) or {"items": []}
    assert not [h["metadata"]["name"] for h in hpas["items"] if h["metadata"]["name"].startswith(name)], (
        "KServe made an HPA of its own beside KEDA's"
    )

    def ready(replicas: int):
        def check():
            obj = get_json(cluster, "rewardmodel", name, "-n", namespace) or {}
            found = condition(obj) or {}
            return obj if found.get("status") == "True" and obj["status"].get("replicas") == replicas else None

        return check

    # KServe serves the gateway with its scaler port (each of the transformer's ports named, as its
    # Service needs), and the RewardModel is Ready
    wait_until("the RewardModel Ready through KServe", ready(1), timeout=120)
    transformer = get_json(cluster, "service", f"{name}-transformer", "-n", namespace)
    assert [(port["name"], port["targetPort"]) for port in transformer["spec"]["ports"]] == [
        ("http", 8080),
        ("grpc-scaler", 9090),
    ]
    # at zero, as KEDA leaves it when idle (here its scaler is out of reach, so it leaves the count alone):
    # still Ready, since the gateway answers and wakes the predictor; replicas 0
    cluster.kubectl("scale", "deployment", f"{name}-predictor", "-n", namespace, "--replicas=0")
    cluster.kubectl("annotate", "rewardmodel", name, "-n", namespace, "touched=1")
    wait_until("the RewardModel Ready at zero replicas", ready(0), timeout=60)

    # back above zero: the scaler's children go, KServe's HPA on CPU comes back
    cluster.kubectl(
        "patch", "rewardmodel", name, "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"serving": {"minReplicas": 1, "maxReplicas": 2, "scaleDownDelay": None}}}),
    )  # fmt: skip

    def pruned():
        return (
            get_json(cluster, "scaledobject", f"{name}-predictor", "-n", namespace) is None
            and get_json(cluster, "service", f"{name}-gateway-scaler", "-n", namespace) is None
        )

    wait_until("the ScaledObject and the scaler Service pruned", pruned, timeout=60)
    isvc = get_json(cluster, "inferenceservice", name, "-n", namespace)
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
    wait_until(
        "KServe's HPA on the predictor",
        lambda: get_json(cluster, "horizontalpodautoscaler", f"{name}-predictor", "-n", namespace),
        timeout=60,
    )
