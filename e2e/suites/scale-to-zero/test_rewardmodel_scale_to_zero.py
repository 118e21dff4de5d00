"""Scale to zero through the operator's own objects, with KEDA running (scale to zero between bursts).

A Standard-mode RewardModel with ``serving.minReplicas: 0`` on a control plane where
KServe's manager, KEDA's operator and metrics API server and reward-operator run.
Where each piece comes from:

- the InferenceService, the scaler's headless Service and the ScaledObject: the
  operator's, applied to the API server. The predictor's and the gateway's
  Deployments: KServe's controller's, made from that InferenceService. The HPA for
  1..N: KEDA's, made from that ScaledObject;
- the gateway: the container KServe put in the transformer's Deployment (command,
  arguments and environment, read back from the API server), run as a process on the
  host, since kwok runs no containers. It listens on a loopback address of its own at
  the ports the operator rendered. KEDA's operator reaches it at the ScaledObject's
  ``scalerAddress`` (``<name>-gateway-scaler.<namespace>.svc.cluster.local:9090``)
  through the control plane's hosts file (testenv/addons/keda.py), as the gateway reaches
  its peers through the same name;
- the predictor: a fake vLLM on the host, standing in for the predictor's container. It
  listens only while KServe's predictor Deployment has a Ready pod (kwok's), so no
  request is answered before KEDA has woken the predictor.

The one setting changed in the gateway's environment is the predictor's URL (the fake's
port on the host, where a pod would have the predictor Service's name).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import httpx
import pytest
import yaml
from kubernetes import client, config

from reward_operator.render import render_reward_model
from reward_testing.fake_vllm import FakeVllm, logit, serve_in_thread
from reward_testing.gateway_process import gateway_process, pod_env
from reward_testing.paths import REPO
from reward_testing.ports import free_port, loopback_address_with
from reward_testing.waiting import wait_until
from testenv.addons import keda
from testenv.helpers import deployment_replicas, get_json

NAME = "skywork-rm"
SAMPLE = REPO / "manifests" / "samples" / "rewardmodel-sequence-standard.yaml"
GROUP = 8  # items per GRPO group
MAX_REPLICAS = 3
SCALE_DOWN_DELAY_S = 5


def _reward_model(namespace: str) -> dict:
    manifest = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["serving"] = {
        "mode": "Standard",
        "minReplicas": 0,
        "maxReplicas": MAX_REPLICAS,
        "scaleDownDelay": f"{SCALE_DOWN_DELAY_S}s",
    }
    return manifest


def _rendered(manifest: dict, kind: str) -> dict:
    """What the operator renders of ``kind`` for this manifest (its own render function, offline)."""
    offline = {**manifest, "metadata": {**manifest["metadata"], "uid": "00000000-0000-4000-8000-000000000000"}}
    (child,) = [child for child in render_reward_model(offline) if child["kind"] == kind]
    return child


class Gate:
    """In front of the fake vLLM: closed, it takes scoring calls and holds them (a predictor busy
    with a long batch) until opened; the gateway's in-flight count stays up meanwhile."""

    SCORING = ("/classify", "/pooling")

    def __init__(self, app):
        self.app = app
        self._open = True
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._open = False

    def open(self) -> None:
        with self._lock:
            self._open, waiting, self._waiting = True, self._waiting, []
        for loop, event in waiting:
            loop.call_soon_threadsafe(event.set)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] in self.SCORING:
            event = asyncio.Event()
            with self._lock:
                closed = not self._open
                if closed:
                    self._waiting.append((asyncio.get_running_loop(), event))
            if closed:
                await event.wait()
        await self.app(scope, receive, send)


@dataclass
class PredictorStandIn:
    """The predictor's container, on the host: a fake vLLM that listens while KServe's predictor
    Deployment has a Ready pod and not otherwise. Keeps the Deployment's (spec.replicas,
    readyReplicas) as it changed, with the time each change was seen (read every 0.1 s)."""

    apps: client.AppsV1Api
    namespace: str
    deployment: str
    port: int = field(default_factory=free_port)
    history: list[tuple[float, int, int]] = field(default_factory=list)
    up_at: float | None = None  # when the fake last began to start listening; None while it is down
    starts: int = 0

    def __post_init__(self) -> None:
        self.gate = Gate(FakeVllm().app)
        # Cleared: the container's start lasts until it is set again. vLLM's cold start (minutes)
        # outlasts a burst's arrival; on a loaded test machine a kwok pod's need not.
        self.started = threading.Event()
        self.started.set()
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _read(self) -> tuple[int, int]:
        return deployment_replicas(self.apps, self.namespace, self.deployment)

    def _follow(self) -> None:
        with ExitStack() as serving:
            while not self._stop.wait(0.1):
                seen, (spec, ready) = time.monotonic(), self._read()
                if ready >= 1 and self.up_at is None and self.started.is_set():
                    # taken before it listens: the held requests may be answered before this thread
                    # runs again (once by 9 ms), and none can be answered before it starts
                    starting = time.monotonic()
                    serving.enter_context(serve_in_thread(self.gate, port=self.port))
                    self.up_at, self.starts = starting, self.starts + 1
                elif ready == 0 and self.up_at is not None:
                    serving.close()
                    self.up_at = None
                # after the fake followed it: whoever sees the change sees the fake up or down
                if not self.history or self.history[-1][1:] != (spec, ready):
                    self.history.append((seen, spec, ready))

    def now(self) -> tuple[int, int]:
        return self.history[-1][1:] if self.history else (-1, 0)

    def when(self, since: float, replicas: int) -> float:
        """When spec.replicas was first seen at ``replicas`` after ``since``."""
        return next(at for at, spec, _ in self.history if at >= since and spec == replicas)

    def wait(self, what: str, predicate, timeout: float) -> None:
        assert self._thread.is_alive(), "the predictor stand-in stopped following the Deployment"
        wait_until(f"{what} (history: {self.history[-6:]})", lambda: predicate(*self.now()), timeout=timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def predictor(keda_cluster, keda_namespace) -> Iterator[PredictorStandIn]:
    api = config.new_client_from_config(config_file=keda_cluster.kubeconfig)
    stand_in = PredictorStandIn(client.AppsV1Api(api), keda_namespace, f"{NAME}-predictor")
    try:
        yield stand_in
    finally:
        stand_in.stop()
        api.close()


def _gateway_env(container: dict, upstream_url: str, address: str) -> dict[str, str]:
    """The transformer container's environment for a process on the host, as the kubelet fills it in, the
    predictor's URL set to the stand-in's, listening on ``address``."""
    return pod_env(container) | {"REWARD_GATEWAY_UPSTREAM_URL": upstream_url, "REWARD_GATEWAY_LISTEN_ADDRESS": address}


def _env(container: dict, name: str) -> str:
    return next((v.get("value", "") for v in container.get("env") or [] if v["name"] == name), "")


def _body(prefix: str, groups: int) -> dict:
    items = [{"text": f"{prefix} {g} {k}", "group": f"{prefix}{g}"} for g in range(groups) for k in range(GROUP)]
    return {"items": items}


def _send(pool: ThreadPoolExecutor, http: httpx.Client, url: str, bodies: list[dict]) -> list[Future]:
    """Every request at once: one thread each, on one client made beforehand (a client per request
    would load a TLS context each, and a burst would trickle in over seconds)."""

    def post(body: dict) -> tuple[httpx.Response, float]:
        response = http.post(f"{url}/v1/rewards", json=body)
        return response, time.monotonic()

    return [pool.submit(post, body) for body in bodies]


def _answered_in_full(futures: list[Future], bodies: list[dict], timeout: float) -> list[float]:
    """Every request answered 200 with the fake's raw logit for each item, in order; returns
    when each answer came. A request that failed or never came back fails the test."""
    done = []
    for future, body in zip(futures, bodies, strict=True):
        response, at = future.result(timeout=timeout)
        assert response.status_code == 200, response.text
        assert response.json()["rewards"] == [logit(item["text"]) for item in body["items"]]
        done.append(at)
    return done


def _hpa_reading(cluster, namespace: str) -> dict | None:
    """What KEDA's HPA last read of the gateway's metric through KEDA's metrics API."""
    hpa = get_json(cluster, "hpa", f"keda-hpa-{NAME}-predictor", "-n", namespace) or {}
    for metric in hpa.get("status", {}).get("currentMetrics") or []:
        external = metric.get("external") or {}
        if external.get("metric", {}).get("name") == "s0-inflight-items" and external.get("current"):
            return external["current"]
    return None


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    found = re.search(rf'^{name}\{{model="{NAME}"\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_rewardmodel_at_zero_wakes_on_a_burst_scales_on_load_and_sleeps_again(
    keda_cluster, keda_namespace, keda_operator, predictor, tmp_path
):
    """Idle -> 0 (KEDA); a burst sent to the gateway at zero is held, the gateway's push makes
    KEDA scale the predictor 0 -> 1 at once, and every request is answered in full once the
    predictor is up; held load above the target takes it to maxReplicas (KEDA's HPA, reading
    the gateway's in-flight items through KEDA's metrics API); idle again, back to 0."""
    cluster, namespace = keda_cluster, keda_namespace
    if cluster.hosts is None:
        pytest.skip("runs gateways on the host: needs the local control plane's hosts file for KEDA")
    manifest = _reward_model(namespace)

    # Where KEDA will dial: the operator's rendering, resolved to a loopback address of the gateway's own.
    scaler_address = _rendered(manifest, "ScaledObject")["spec"]["triggers"][0]["metadata"]["scalerAddress"]
    host, port = scaler_address.rsplit(":", 1)
    assert host == f"{NAME}-gateway-scaler.{namespace}.svc.cluster.local", scaler_address
    address = loopback_address_with(int(port))
    names = [host, host.removesuffix(".cluster.local")]
    with ExitStack() as cleanup:
        cleanup.enter_context(cluster.hosts.names(address, names))
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
        applied = wait_until(
            "the operator's ScaledObject",
            lambda: get_json(cluster, "scaledobject", f"{NAME}-predictor", "-n", namespace),
            timeout=120,
        )
        assert applied["spec"]["triggers"][0]["metadata"]["scalerAddress"] == scaler_address
        assert applied["spec"]["cooldownPeriod"] == SCALE_DOWN_DELAY_S
        polling = applied["spec"]["pollingInterval"]

        # The gateway: the container KServe's controller put in the transformer's Deployment.
        transformer = wait_until(
            "KServe's transformer Deployment",
            lambda: get_json(cluster, "deployment", f"{NAME}-transformer", "-n", namespace),
            timeout=120,
        )
        (container,) = transformer["spec"]["template"]["spec"]["containers"]
        # The transformer's container as a process on the host, its names resolved through the hosts file.
        assert container["command"] == ["python", "-m", "reward_gateway"], container["command"]
        http_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
        log = tmp_path / "gateway.log"
        cleanup.enter_context(
            gateway_process(
                container.get("args", []), _gateway_env(container, predictor.url, address), http_port, NAME, log,
                host=address, wrap=lambda command: keda.with_private_hosts(command, cluster.hosts.path),
            )
        )  # fmt: skip
        url = f"http://{address}:{http_port}"
        # KEDA resolved the in-cluster name through the hosts file and holds the push stream open
        wait_until(
            "KEDA's operator holding the gateway's StreamIsActive open",
            lambda: f"KEDA holds StreamIsActive open for {namespace}/{NAME}-predictor" in log.read_text(),
            timeout=120,
        )
        started = time.monotonic()
        predictor.wait("the predictor idle at 0 replicas (KEDA)", lambda spec, ready: spec == 0 and ready == 0, 120)
        assert predictor.up_at is None
        print(f"\nidle -> 0: predictor at 0 replicas {time.monotonic() - started:.1f}s after KEDA reached the gateway")

        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        with ThreadPoolExecutor(max_workers=64) as pool, httpx.Client(timeout=200, limits=limits) as http:
            # A burst at zero: 32 requests, GRPO groups of 8 (256 items: the target, one replica).
            bodies = [_body(f"burst{n}", 1) for n in range(32)]
            predictor.started.clear()
            sent = time.monotonic()
            futures = _send(pool, http, url, bodies)
            predictor.wait("KEDA's scale-up decision", lambda spec, ready: spec >= 1, timeout=polling)
            decided = predictor.when(sent, 1)
            wait_until(
                "the whole burst held by the gateway",
                lambda: _metric(url, "reward_gateway_held_requests") == len(bodies),
                timeout=60,
            )
            predictor.started.set()
            predictor.wait("the predictor's pod Ready and the stand-in up", lambda spec, ready: ready >= 1, 60)
            done = _answered_in_full(futures, bodies, timeout=120)
            up = predictor.up_at
            assert up is not None and min(done) >= up, "a request was answered before the predictor was up"
            held = _metric(url, "reward_gateway_hold_duration_seconds_count")
            print(
                f"burst of {len(bodies)} requests at zero: scale-up decision (spec.replicas 0 -> 1) "
                f"{decided - sent:.2f}s after the first request (polling {polling} s); predictor up "
                f"{up - sent:.1f}s after it; all {len(done)} answered in full {max(done) - sent:.1f}s "
                f"after it ({held:.0f} held by the gateway), 0 failed, 0 lost"
            )
            assert held == len(bodies), f"{held} of {len(bodies)} requests held"
            assert decided - sent < polling / 2, "woken by KEDA's poll, not by the gateway's push"

            # Load above target: 3 requests of 256 items in flight, held by a busy predictor.
            predictor.gate.close()
            bodies = [_body(f"load{n}", 32) for n in range(MAX_REPLICAS)]
            loaded = time.monotonic()
            futures = _send(pool, http, url, bodies)
            predictor.wait(
                f"{MAX_REPLICAS} replicas (the HPA on the gateway's in-flight items)",
                lambda spec, ready: spec == MAX_REPLICAS and ready == MAX_REPLICAS,
                timeout=120,
            )
            scaled = predictor.when(loaded, MAX_REPLICAS)
            assert not [f for f in futures if f.done()], "answered while the predictor held them"
            read = wait_until("the HPA's reading of the gateway's metric", lambda: _hpa_reading(cluster, namespace), 30)
            predictor.gate.open()
            done = _answered_in_full(futures, bodies, timeout=120)
            print(
                f"{MAX_REPLICAS * 32 * GROUP} items in flight (target 256 per replica) -> {MAX_REPLICAS} replicas "
                f"{scaled - loaded:.1f}s after the load began (KEDA's HPA read s0-inflight-items: {read}); "
                f"all {len(done)} answered in full once the predictor released them"
            )

        # Idle again: the gateway's IsActive turns false, KEDA scales to 0 after the cooldown.
        idle = max(done)
        predictor.wait("the predictor back at 0 replicas", lambda spec, ready: spec == 0, timeout=2 * polling + 90)
        print(
            f"idle -> 0 replicas {predictor.when(idle, 0) - idle:.1f}s after the last answer "
            f"(gateway active {_env(container, 'REWARD_GATEWAY_SCALER_ACTIVE_SECONDS')} s after a "
            f"request, polling {polling} s, cooldown {SCALE_DOWN_DELAY_S} s); predictor stand-in started "
            f"{predictor.starts} times"
        )
        predictor.wait("the stand-in down", lambda spec, ready: ready == 0, timeout=60)
