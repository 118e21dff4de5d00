"""Wake from zero for real: a RewardModel at zero pods on the test bed's real node, woken by a burst.

Nothing stands in (test_rewardmodel_scale_to_zero.py runs the same objects with a fake vLLM on the
host): the operator renders a Standard-mode RewardModel with ``serving.minReplicas: 0`` (its
ScaledObject, the gateway's scaler Service), KServe's controller makes the predictor and gateway
Deployments, KEDA's operator scales the predictor between 0 and 1, and containerd on the real node
runs KServe's storage initializer (which downloads the tiny model from the test bed's storage
server), the pinned vLLM's CPU build and the reward gateway, from images built here.

The host has no cluster DNS. KEDA's operator runs on the host with a private /etc/hosts
(``testenv.addons.keda``), so the scaler Service's names (``scalerAddress``, headless) are pointed there at
the gateway pod's IP, which the host reaches over the node's bridge. The test sends its requests to
``status.url``'s Service by its ClusterIP (kube-proxy's rules on the host), with the URL's host name
in the Host header; OpenRLHF's driver dials ``status.url`` itself, through a private /etc/hosts that
names that ClusterIP (as e2e/suites/trainers does).

1. A burst of 64 requests at zero (per-sample ``/get_reward`` as OpenRLHF sends, GRPO groups on
   ``/v1/rewards`` as verl sends): the gateway holds them, pushes to KEDA, KEDA scales the predictor
   up, and every request is answered with transformers' rewards. The timeline is printed: the
   scale-up decision, the pod's start, vLLM's own ready time (its log), the first and last answer.
   Then idle, back to zero.
2. OpenRLHF's own ``SingleTurnAgentExecutor`` from zero, with the gateway's hold
   (``spec.gateway.scaleFromZeroTimeoutSeconds``) set shorter than the cold start just measured: its
   retry loop (5 tries, 1 s apart) meets the gateway's 503s and ends with the right rewards.
3. The same model cached on the node (``spec.cache``: KServe's LocalModel download Job on the real
   node), woken from zero again: no storage initializer in the pod, the same rewards, and its cold
   start (pod created -> vLLM's ready line) against part 1's with the download, as a ratio.

`make wake-real` runs it (TESTENV_KEDA=1: KEDA in the session's control plane beside the real
node); not in `make test`: two cold starts of vLLM on the node's 2 cores, and the vLLM image's
import into containerd, take several minutes. Performance is printed, never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from reward_operator.api.kserve import cluster_local_url, transformer_name
from reward_testing.paths import REPO
from reward_testing.scoring_cases import TOLERANCE
from reward_testing.tiny_models import reference_scores, tar_model
from reward_testing.waiting import wait_until
from testenv import node, served, wake
from testenv.addons import keda, localmodel
from testenv.helpers import deployment_replicas, wait_for_condition
from testenv.plane import controlplane

NAME = "wake-rm"
COOLDOWN_S = 10  # spec.serving.scaleDownDelay: KEDA's cooldown before zero
LONG_HOLD_S = 900  # part 1: the gateway holds through any cold start this machine has
WAKE_TIMEOUT_S = 900  # an image already imported; a download and vLLM's start on 2 shared cores
PREDICTOR, TRANSFORMER = "predictor", "transformer"


def _by_path(name: str, path) -> ModuleType:
    """A module of another suite's folder, loaded by its path (e2e/suites/trainers is no package)."""
    spec = importlib.util.spec_from_file_location(f"wake_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_trainer_venvs = _by_path("trainer_venvs", REPO / "e2e" / "suites" / "trainers" / "trainer_venvs.py")
_samples = _by_path("samples", REPO / "e2e" / "suites" / "trainers" / "samples.py")


@dataclass
class Deployment:
    """Follows a Deployment's (spec.replicas, readyReplicas), with when each change was seen (every 0.2 s)."""

    apps: client.AppsV1Api
    namespace: str
    name: str
    history: list[tuple[float, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _read(self) -> tuple[int, int]:
        return deployment_replicas(self.apps, self.namespace, self.name)

    def _follow(self) -> None:
        while not self._stop.wait(0.2):
            seen, now = time.time(), self._read()
            if not self.history or self.history[-1][1:] != now:
                self.history.append((seen, *now))

    def now(self) -> tuple[int, int]:
        return self.history[-1][1:] if self.history else (-1, 0)

    def when(self, since: float, predicate) -> float:
        """When a state satisfying ``predicate(spec, ready)`` was first seen after ``since``."""
        return next(at for at, spec, ready in self.history if at >= since and predicate(spec, ready))

    def wait(self, what: str, predicate, timeout: float) -> None:
        assert self._thread.is_alive(), "stopped following the Deployment"
        wait_until(f"{what} (history: {self.history[-6:]})", lambda: predicate(*self.now()), timeout=timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@dataclass
class Sleeping:
    """The served RewardModel and how the test reaches it."""

    cluster: Any
    namespace: str
    url: str  # status.url
    address: str  # its Service's ClusterIP:port
    predictor: Deployment
    keda_hosts: keda.HostsFile
    scaler_names: list[str]
    stack: ExitStack
    cold_start_s: float | None = None  # part 1's first request -> last answer
    downloaded_start_s: float | None = None  # part 1's predictor pod: created -> vLLM's ready line

    def pods(self, component: str) -> list[dict]:
        selector = f"serving.kserve.io/inferenceservice={NAME},component={component}"
        listed = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-l", selector, "-o", "json").stdout
        return [pod for pod in json.loads(listed)["items"] if not pod["metadata"].get("deletionTimestamp")]

    def gateway_pod(self) -> dict | None:
        ready = [
            pod
            for pod in self.pods(TRANSFORMER)
            if pod["status"].get("podIP")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        ]
        return ready[0] if len(ready) == 1 else None

    def point_keda_at_the_gateway(self) -> str:
        """KEDA's scaler names -> the (one, Ready) gateway pod's IP; waits until KEDA holds its stream open."""
        pod = wait_until("one Ready gateway pod", self.gateway_pod, timeout=300)
        self.stack.close()  # the former pod's address, if any
        self.stack.enter_context(self.keda_hosts.names(pod["status"]["podIP"], self.scaler_names))
        name = pod["metadata"]["name"]
        wait_until(
            f"KEDA's operator holding the gateway's StreamIsActive open ({name})",
            lambda: "KEDA holds StreamIsActive open" in self.logs(name, "kserve-container"),
            timeout=120,
            interval=2,
        )
        return pod["status"]["podIP"]

    def logs(self, pod: str, container: str, timestamps: bool = False) -> str:
        args = ["logs", "-n", self.namespace, pod, "-c", container, *(["--timestamps"] if timestamps else [])]
        return self.cluster.kubectl(*args, check=False).stdout

    def gateway_counts(self) -> dict[str, float]:
        """The gateway's answers by code, and the requests it held (its /metrics, at the pod's address)."""
        pod = self.gateway_pod()
        assert pod, "no Ready gateway pod"
        (container,) = pod["spec"]["containers"]
        port = next(p["containerPort"] for p in container["ports"] if p.get("name") == "http")
        text = httpx.get(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=10).text
        counts: dict[str, float] = {}
        for code, value in re.findall(r'^reward_gateway_requests_total\{[^}]*code="(\d+)"[^}]*\} (\S+)$', text, re.M):
            counts[code] = counts.get(code, 0.0) + float(value)
        held = re.findall(r"^reward_gateway_hold_duration_seconds_count\{[^}]*\} (\S+)$", text, re.M)
        counts["held"] = sum(float(value) for value in held)
        return counts

    def at_zero(self, what: str, timeout: float, since: float = 0.0) -> float:
        """Waits for the predictor at 0 replicas and its pods gone; returns when 0 was first seen after ``since``."""
        self.predictor.wait(what, lambda spec, ready: spec == 0 and ready == 0, timeout=timeout)
        wait_until(f"{what}: no predictor pod left", lambda: not self.pods(PREDICTOR), timeout=120, interval=1)
        return self.predictor.when(since, lambda spec, ready: spec == 0)


@pytest.fixture(scope="module")
def sleeping(keda_cluster, operator, runtimes, tiny_models, tmp_path_factory) -> Iterator[Sleeping]:
    """The tiny sequence model as a RewardModel at zero on the real node, KEDA reaching its gateway."""
    cluster = keda_cluster
    if not cluster.local or cluster.kubectl("get", f"node/{node.NAME}", check=False).returncode != 0:
        pytest.skip("needs the test bed's real node (TESTENV_NODE=0 leaves it out)")
    assert cluster.hosts is not None, "KEDA's hosts file: the local control plane with KEDA"
    plane = controlplane.ControlPlane.attach(cluster.directory)
    plane.load_images(("vllm-cpu",))
    archive = tar_model(tiny_models["sequence"], node.storage_dir(plane.directory) / "wake-sequence.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)
    namespace = f"wake-{time.time_ns() % 10**6}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(namespace)))
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s")
    spec = served.reward_model(
        NAME, "sequence", uri, 0,
        serving={"minReplicas": 0, "maxReplicas": 1, "scaleDownDelay": f"{COOLDOWN_S}s"},
        gateway={"scaleFromZeroTimeoutSeconds": LONG_HOLD_S, "requestTimeoutSeconds": 300},
    )  # fmt: skip
    api = config.new_client_from_config(config_file=cluster.kubeconfig)
    predictor = Deployment(client.AppsV1Api(api), namespace, f"{NAME}-predictor")
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(spec))
        scaled = wait_until(
            "the operator's ScaledObject",
            lambda: json.loads(cluster.kubectl("get", "scaledobject", f"{NAME}-predictor", "-n", namespace,
                                               "-o", "json", check=False).stdout or "null"),
            timeout=120,
        )  # fmt: skip
        scaler_host = scaled["spec"]["triggers"][0]["metadata"]["scalerAddress"].rsplit(":", 1)[0]
        with ExitStack() as stack:
            sleeping = Sleeping(
                cluster, namespace, "", "", predictor, cluster.hosts,
                [scaler_host, scaler_host.removesuffix(".cluster.local")], stack,
            )  # fmt: skip
            sleeping.point_keda_at_the_gateway()
            # KServe may create the predictor at one replica: its first start, then idle, then zero
            zero = sleeping.at_zero("the predictor idle at 0 replicas (KEDA)", WAKE_TIMEOUT_S + 300)
            sleeping.url, where = _url(cluster, namespace)
            host = sleeping.url.split("://", 1)[1].split("/", 1)[0]
            service = json.loads(cluster.kubectl("get", "service", host.split(".", 1)[0], "-n", namespace, "-o",
                                                 "json").stdout)  # fmt: skip
            ports = [p["port"] for p in service["spec"]["ports"]]
            port = 80 if 80 in ports else ports[0]  # the URL names no port
            sleeping.address = f"{service['spec']['clusterIP']}:{port}"
            print(f"\n{NAME} at zero pods on {node.NAME} ({time.time() - zero:.0f}s ago); {where} {sleeping.url}")
            yield sleeping
    finally:
        predictor.stop()
        api.close()
        cluster.kubectl("delete", "rewardmodel", NAME, "-n", namespace, "--wait=true", "--timeout=120s", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _url(cluster, namespace: str) -> tuple[str, str]:
    """status.url; where a RewardModel at zero has none yet (KServe sets its address once the predictor
    was Ready), the InferenceService's address, else the gateway's Service (KServe's transformer), as named."""
    rm = json.loads(cluster.kubectl("get", "rewardmodel", NAME, "-n", namespace, "-o", "json").stdout)
    if url := rm.get("status", {}).get("url"):
        return url, "status.url"
    isvc = json.loads(cluster.kubectl("get", "inferenceservice", NAME, "-n", namespace, "-o", "json").stdout)
    if url := (isvc.get("status", {}).get("address") or {}).get("url"):
        return url, "no status.url at zero; the InferenceService's address.url"
    return cluster_local_url(
        transformer_name(NAME), namespace
    ), "no status.url nor address at zero; the gateway Service"


def test_a_burst_at_zero_wakes_the_real_vllm_and_every_request_gets_the_models_reward(sleeping, tiny_models):
    calls = wake.burst_calls()
    texts = [text for _, _, scored in calls for text in scored]
    scored_by_transformers = reference_scores(tiny_models["sequence"], [{"text": text} for text in texts])
    want = dict(zip(texts, (answer["reward"] for answer in scored_by_transformers), strict=True))
    host = sleeping.url.split("://", 1)[1].split("/", 1)[0]
    before = sleeping.gateway_counts()
    limits = httpx.Limits(max_connections=len(calls), max_keepalive_connections=len(calls))
    with httpx.Client(base_url=f"http://{sleeping.address}", headers={"Host": host}, timeout=LONG_HOLD_S + 300,
                      limits=limits) as http, ThreadPoolExecutor(max_workers=len(calls)) as pool:  # fmt: skip

        def post(call: tuple[str, dict, list[str]]) -> tuple[int, Any, float]:
            try:
                response = http.post(call[0], json=call[1])
            except httpx.HTTPError as error:
                return -1, repr(error), time.time()
            return response.status_code, response.json() if response.status_code == 200 else response.text, time.time()

        assert sleeping.predictor.now() == (0, 0)
        sent = time.time()
        futures = [pool.submit(post, call) for call in calls]
        sleeping.predictor.wait("KEDA's scale-up decision", lambda spec, ready: spec >= 1, timeout=120)
        answers = [future.result(timeout=WAKE_TIMEOUT_S + LONG_HOLD_S) for future in futures]
    decided = sleeping.predictor.when(sent, lambda spec, ready: spec >= 1)
    timeline = wake.predictor_timeline(sleeping.cluster, sleeping.namespace, NAME, sent)
    pod_ready = sleeping.predictor.when(sent, lambda spec, ready: ready >= 1)
    after = sleeping.gateway_counts()

    failed = [(call[0], answer[:2]) for call, answer in zip(calls, answers, strict=True) if answer[0] != 200]
    diffs = []
    for (_, _, scored), (code, body, _) in zip(calls, answers, strict=True):
        if code == 200:
            assert len(body["rewards"]) == len(scored), body
            diffs += [abs(got - want[text]) for got, text in zip(body["rewards"], scored, strict=True)]
    done = sorted(at for code, _, at in answers if code == 200)
    events = {"scale-up decision (predictor spec.replicas 0 -> 1)": decided, **timeline,
              "predictor Ready (readyReplicas 1)": pod_ready, "first answer": done[0] if done else sent,
              "last answer": done[-1] if done else sent}  # fmt: skip
    held = after["held"] - before["held"]
    print(f"\nwake from zero on the real node: {len(calls)} requests at once ({wake.PER_SAMPLE} /get_reward of "
          f"one query, {wake.GROUPS} /v1/rewards of a group of {wake.GROUP}) at t=0")  # fmt: skip
    for what, at in sorted(events.items(), key=lambda event: event[1]):
        print(f"  {what:<52} +{at - sent:6.2f} s")
    print("  (the pod's created/started/done: Kubernetes' whole seconds; vLLM's line: its log's stamp; replicas: "
          "seen within 0.2 s)")  # fmt: skip
    lost = len(calls) - len(done) - len(failed)
    probes = pod_ready - timeline[wake.VLLM_READY_EVENT]
    gateway = events["first answer"] - pod_ready
    print(f"  vLLM's ready line -> first answer {probes + gateway:.2f} s: the kubelet's probes until the pod is Ready "
          f"{probes:.2f} s, then the Service's endpoint on the host (kube-proxy) and the gateway {gateway:.2f} s; "
          f"{len(done)} answered, {len(failed)} failed, {lost} lost, {held:.0f} held by the gateway; "
          f"max |diff| vs transformers {max(diffs, default=float('nan')):.2e}")  # fmt: skip
    assert not failed, failed
    assert lost == 0 and len(done) == len(calls)
    assert max(diffs) <= TOLERANCE
    assert held == len(calls), f"{held:.0f} of {len(calls)} requests held by the gateway"
    assert decided >= sent and min(done) >= timeline[wake.VLLM_READY_EVENT] - 1
    sleeping.cold_start_s = max(done) - sent
    sleeping.downloaded_start_s = timeline[wake.VLLM_READY_EVENT] - timeline["predictor pod created"]

    idle = max(done)
    zero = sleeping.at_zero("idle: the predictor back at 0 replicas", timeout=300, since=idle)
    print(f"  idle -> 0 replicas {zero - idle:.1f} s after the last answer (KEDA's cooldown {COOLDOWN_S} s)")


def _openrlhf_remote_url(status_url: str) -> str:
    """The docs' --reward.remote_url (snippet ``openrlhf``), for this RewardModel (as the trainers suite's
    test_trainer_openrlhf.py)."""
    (value,) = re.findall(r"--reward\.remote_url (\S+)", _trainer_venvs.snippet("openrlhf"))
    return value.replace("$STATUS_URL", status_url.rstrip("/"))


def test_openrlhfs_retry_loop_meets_the_gateways_503_while_the_model_wakes_and_ends_with_its_rewards(
    sleeping, tiny_models, tmp_path
):
    # The hold shorter than a cold start: about 2.5 holds per cold start measured above, so each of
    # OpenRLHF's first tries is answered 503 and its 5 tries (1 s apart) still outlast the wake.
    cold = sleeping.cold_start_s or 120.0
    hold = max(5, round(cold / 2.5))
    sleeping.cluster.kubectl("patch", "rewardmodel", NAME, "-n", sleeping.namespace, "--type=merge", "-p",
                             json.dumps({"spec": {"gateway": {"scaleFromZeroTimeoutSeconds": hold}}}))  # fmt: skip

    def rolled_out() -> bool:
        deployment = json.loads(sleeping.cluster.kubectl("get", "deployment", f"{NAME}-transformer", "-n",
                                                         sleeping.namespace, "-o", "json").stdout)  # fmt: skip
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        status = deployment.get("status", {})
        return (
            env.get("REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS") == str(hold)
            and status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == status.get("replicas") == status.get("readyReplicas") == 1
        )

    wait_until(f"the gateway rolled out with a {hold} s hold", rolled_out, timeout=300, interval=2)
    sleeping.point_keda_at_the_gateway()
    sleeping.at_zero("the predictor at 0 replicas before OpenRLHF's calls", timeout=WAKE_TIMEOUT_S)

    host = sleeping.url.split("://", 1)[1].split("/", 1)[0]
    hosts = keda.HostsFile.create(tmp_path / "hosts")
    samples = _samples.SAMPLES
    before = sleeping.gateway_counts()
    with hosts.names(sleeping.address.split(":")[0], [host]):
        started = time.time()
        ran = _trainer_venvs.run_driver(
            "openrlhf", "openrlhf_remote_rm",
            {"remote_url": _openrlhf_remote_url(sleeping.url), "tokenizer": str(tiny_models["sequence"].path),
             "samples": samples},
            lambda command: keda.with_private_hosts(command, hosts.path),
        )  # fmt: skip
        took = time.time() - started
    after = sleeping.gateway_counts()
    woke = sleeping.predictor.when(started, lambda spec, ready: spec >= 1) - started
    up = sleeping.predictor.when(started, lambda spec, ready: ready >= 1) - started
    refused = after.get("503", 0) - before.get("503", 0)

    outputs = ran["samples"]
    got = [sample["reward"] for sample in outputs]
    assert all(isinstance(reward, list) and len(reward) == 1 for reward in got), got  # None: it gave up
    queries = [{"text": sample["query"], "add_special_tokens": False} for sample in outputs]
    want = [answer["reward"] for answer in reference_scores(tiny_models["sequence"], queries)]
    diff = max(abs(reward[0] - w) for reward, w in zip(got, want, strict=True))
    batched = max(abs(g - w) for g, w in zip(ran["batched"][0]["rewards"], want, strict=True))
    print(f"\nOpenRLHF {ran['version']} SingleTurnAgentExecutor from zero, the gateway's hold {hold} s (cold start "
          f"{cold:.0f} s before): {len(outputs)} per-sample calls met {refused:.0f} 503s from the gateway and "
          f"ended with the model's rewards, max |diff| vs transformers {max(diff, batched):.2e} (then 1 batched "
          f"call of {len(outputs)}); from the driver's start (its imports included): predictor scaled up at "
          f"+{woke:.1f} s (its first call), Ready at +{up:.1f} s, the driver done at +{took:.1f} s")  # fmt: skip
    assert refused >= 1, "the model woke within the hold: OpenRLHF's retry loop met no 503"
    assert diff <= TOLERANCE and batched <= TOLERANCE
    sleeping.at_zero("idle: the predictor back at 0 replicas", timeout=300)


def test_the_same_model_from_the_nodes_cache_wakes_without_a_download(sleeping, tiny_models):
    """Part 3: spec.cache on the real node's group; the predictor woken from zero mounts the cache (no
    storage initializer) and answers as before; its start compared with part 1's, which downloaded."""
    cluster, namespace = sleeping.cluster, sleeping.namespace
    if sleeping.downloaded_start_s is None:
        pytest.skip("part 1 (the wake with a download) did not run")
    group = localmodel.REAL_NODE_GROUP
    if cluster.kubectl("get", f"localmodelnodegroup/{group}", check=False).returncode != 0:
        pytest.skip("needs KServe's LocalModel with the real node's group (the session's plane has it with the node)")
    # the long hold again (part 2 shortened it), in the same edit as the cache
    edit = {"spec": {"cache": {"modelSize": "1Gi", "nodeGroups": [group]},
                     "gateway": {"scaleFromZeroTimeoutSeconds": LONG_HOLD_S}}}  # fmt: skip
    cluster.kubectl("patch", "rewardmodel", NAME, "-n", namespace, "--type=merge", "-p", json.dumps(edit))
    wait_for_condition(cluster, namespace, NAME, "ModelCached", "True", "Downloaded", timeout=600)
    # KServe rolls the gateway's pods too (the InferenceService's node-group annotation reaches their template):
    # a request held by a pod on its way out would be cut with it, so the burst waits for the roll to end
    cluster.kubectl("rollout", "status", f"deployment/{NAME}-{TRANSFORMER}", "-n", namespace, "--timeout=300s")
    sleeping.point_keda_at_the_gateway()
    sleeping.at_zero("the predictor at 0 replicas with the cache", timeout=WAKE_TIMEOUT_S)

    texts = [f"cached sample {n}: the answer is {3 * n}" for n in range(8)]
    want = [answer["reward"] for answer in reference_scores(tiny_models["sequence"], [{"text": t} for t in texts])]
    host = sleeping.url.split("://", 1)[1].split("/", 1)[0]
    with httpx.Client(base_url=f"http://{sleeping.address}", headers={"Host": host}, timeout=LONG_HOLD_S + 300,
                      limits=httpx.Limits(max_connections=len(texts))) as http, \
            ThreadPoolExecutor(max_workers=len(texts)) as pool:  # fmt: skip

        def post(text: str) -> httpx.Response | httpx.HTTPError:
            try:
                return http.post("/get_reward", json={"query": [text]})
            except httpx.HTTPError as error:  # no answer at all: kept, for the failure's message
                return error

        sent = time.time()
        answers = list(pool.map(post, texts))
    took = time.time() - sent
    if not all(isinstance(answer, httpx.Response) and answer.status_code == 200 for answer in answers):
        said = [answer.text if isinstance(answer, httpx.Response) else repr(answer) for answer in answers]
        raise AssertionError(f"answered after {took:.1f} s: {said}\n{served.what_runs(cluster, namespace)}")
    got = [answer.json()["rewards"][0] for answer in answers]
    diff = max(abs(g - w) for g, w in zip(got, want, strict=True))
    (pod,) = sleeping.pods(PREDICTOR)
    assert not pod["spec"].get("initContainers"), "a storage initializer in the cached model's predictor"
    timeline = wake.predictor_timeline(sleeping.cluster, sleeping.namespace, NAME, sent)
    cached = timeline[wake.VLLM_READY_EVENT] - timeline["predictor pod created"]
    print(f"\nthe same model from the node's cache, woken from zero: predictor pod created -> vLLM's ready line "
          f"{cached:.1f} s, against {sleeping.downloaded_start_s:.1f} s with the storage initializer's download "
          f"(part 1): ratio {sleeping.downloaded_start_s / cached:.2f}; first request -> last answer {took:.1f} s; "
          f"max |diff| vs transformers {diff:.2e}")  # fmt: skip
    assert diff <= TOLERANCE
    sleeping.at_zero("idle: the predictor back at 0 replicas", timeout=300)
