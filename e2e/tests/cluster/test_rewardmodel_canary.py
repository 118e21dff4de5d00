"""A candidate reward model rolled out beside the stable one (the canary rollout), with KServe's own controller.

The candidate's Deployment and Service are the ones KServe v0.20 makes for the
InferenceService's spec.canary[] entry; the gateway (the transformer KServe
deploys) is told that Service in its environment, and the share in the rollout's
ConfigMap, which the kubelet projects into its pods; the candidate's readiness is
KServe's word, from its pods that kwok runs. kwok runs no containers, so for the
gates the last test stands in for the gateway pod's kubelet (see GatewayStandIn):
the real gateway in front of two fake vLLMs, its share file projected from the
ConfigMap, read by the operator at the pod's IP.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
import yaml
from prometheus_client import CollectorRegistry

from reward_gateway.config.gateway import load_config
from reward_gateway.http.app import build_app
from reward_gateway.http.routes import Gateway
from reward_gateway.signals.metrics import GatewayMetrics
from reward_testing.operator_metrics import metric_sum
from reward_testing.paths import REPO
from reward_testing.projected_volume import project
from reward_testing.waiting import wait_until
from testenv.helpers import ISVC_LABEL, condition, gateway_env, get_json, predictor_pod, wait_for_condition

pytestmark = pytest.mark.usefixtures("kserve_runs")  # skipped where the cluster has no KServe

NAME = "skywork-rm"
SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
CANDIDATE_URI = "hf://Skywork/Skywork-Reward-V2-Qwen3-8B"
CANARY_DEPLOYMENT = f"{NAME}-canary-predictor"  # KServe's <isvc>-<predictor name>-predictor


def apply_with_canary(cluster, namespace: str, **canary) -> None:
    manifest = copy.deepcopy(SAMPLE)
    manifest["spec"]["canary"] = {"model": {"uri": CANDIDATE_URI, "maxModelLen": 32768}, **canary}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def reward_model(cluster, namespace: str) -> dict:
    return get_json(cluster, "rewardmodel", NAME, "-n", namespace) or {}


def rollout(cluster, namespace: str) -> dict:
    return (reward_model(cluster, namespace).get("status") or {}).get("canary") or {}


def canary_settings(cluster, namespace: str) -> dict[str, str]:
    """The gateway's REWARD_GATEWAY_CANARY_* variables (as CANARY_*) in KServe's transformer Deployment."""
    return gateway_env(cluster, namespace, NAME, only="CANARY_")


def gateway_share(cluster, namespace: str) -> str | None:
    """The share in the rollout's ConfigMap: what the gateways run, once the kubelet has projected it."""
    found = get_json(cluster, "configmap", f"{NAME}-rollout", "-n", namespace)
    return None if found is None else found["data"]["percent"]


def warnings(cluster, namespace: str, reason: str) -> list[dict]:
    selector = f"involvedObject.kind=RewardModel,involvedObject.name={NAME},type=Warning,reason={reason}"
    listed = get_json(cluster, "events", "-n", namespace, "--field-selector", selector)
    return (listed or {}).get("items", [])


def test_the_candidate_runs_as_kserves_canary_predictor_behind_the_gateway(cluster, namespace, operator):
    apply_with_canary(cluster, namespace)

    deployment = wait_until(
        "KServe's canary Deployment", lambda: get_json(cluster, "deployment", CANARY_DEPLOYMENT, "-n", namespace)
    )
    service = wait_until(
        "KServe's canary Service", lambda: get_json(cluster, "service", CANARY_DEPLOYMENT, "-n", namespace)
    )
    pod = deployment["spec"]["template"]["spec"]
    (vllm,) = [c for c in pod["containers"] if c["name"] == "kserve-container"]
    assert "--max-model-len=32768" in vllm["args"], vllm["args"]
    # KServe's storage initializer (injected into the pods by its webhook) downloads the candidate's
    # weights into the candidate's pods, and the stable model's into the stable ones
    candidate_pod, stable_pod = (
        wait_until(f"{deployment_name}'s pod", lambda d=deployment_name: predictor_pod(cluster, namespace, NAME, d))
        for deployment_name in (CANARY_DEPLOYMENT, f"{NAME}-predictor")
    )
    assert CANDIDATE_URI in json.dumps(candidate_pod["spec"]["initContainers"])
    assert SAMPLE["spec"]["model"]["uri"] in json.dumps(stable_pod["spec"]["initContainers"])
    assert CANDIDATE_URI not in json.dumps(stable_pod["spec"]["initContainers"])
    assert deployment["spec"]["replicas"] == 1
    # the Service selects the candidate's pods, and not the stable ones
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items(), (
        service["spec"]["selector"],
        template_labels,
    )
    stable_labels = get_json(cluster, "deployment", f"{NAME}-predictor", "-n", namespace)["spec"]["template"][
        "metadata"
    ]
    assert not service["spec"]["selector"].items() <= stable_labels["labels"].items()

    # the stable predictor keeps its own args
    stable = get_json(cluster, "deployment", f"{NAME}-predictor", "-n", namespace)
    assert "--max-model-len=16384" in stable["spec"]["template"]["spec"]["containers"][0]["args"]

    # the gateway KServe deploys is pointed at that very Service
    env = wait_until("the gateway's canary settings", lambda: canary_settings(cluster, namespace) or None)
    assert env["CANARY_URL"] == f"http://{CANARY_DEPLOYMENT}.{namespace}.svc.cluster.local"
    assert env["CANARY_MODE"] == "shadow" and "CANARY_PERCENT" not in env
    assert env["CANARY_PERCENT_FILE"] == "/etc/reward-rollout/percent"
    assert gateway_share(cluster, namespace) == "0"

    # KServe reports the candidate available once kwok runs its pod: shadowing starts
    wait_for_condition(cluster, namespace, NAME, "CanaryReady", "True", "CandidateReady")
    wait_for_condition(cluster, namespace, NAME, "CanaryProgressing", "True", "Shadowing")
    status = rollout(cluster, namespace)
    assert status["phase"] == "Shadowing" and status["percent"] == 0
    assert status["candidate"] == env["CANARY_NAME"]
    header, row = cluster.kubectl("get", "rewardmodel", NAME, "-n", namespace).stdout.splitlines()
    column = header.index("CANARY")
    assert row[column:].split()[0] == "0", (header, row)


def test_a_split_starts_at_its_first_step_and_rolls_back_once_when_the_candidate_fails(cluster, namespace, operator):
    apply_with_canary(cluster, namespace, mode="split", steps=[10, 50, 100], interval="30s")
    wait_for_condition(cluster, namespace, NAME, "CanaryProgressing", "True", "StepRunning")
    assert rollout(cluster, namespace)["percent"] == 10
    wait_until(
        "the gateway told 10%",
        lambda: gateway_share(cluster, namespace) == "10",
    )

    # the candidate's pod stops being Ready (as a vLLM that hangs would): KServe reports the canary
    # unavailable, and the operator takes its share away
    candidate_pod = wait_until(
        "the candidate's pod", lambda: predictor_pod(cluster, namespace, NAME, CANARY_DEPLOYMENT)
    )
    unready = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "ContainersReady",
                                                                                 "status": "False"}]}}  # fmt: skip
    cluster.kubectl(
        "patch", "pod", candidate_pod["metadata"]["name"], "-n", namespace, "--subresource=status",
        "-p", json.dumps(unready),
    )  # fmt: skip
    progressing = wait_for_condition(cluster, namespace, NAME, "CanaryProgressing", "False", "RolledBack")
    assert "not Ready" in progressing["message"] and "from 10%" in progressing["message"]
    assert condition(reward_model(cluster, namespace), "CanaryReady")["status"] == "False"
    assert rollout(cluster, namespace)["percent"] == 0
    wait_until(
        "the gateway told 0%",
        lambda: gateway_share(cluster, namespace) == "0",
    )

    # several more looks at the rollout (its timer runs every 2 s here): still one Warning event
    seen = operator.reconciles()
    wait_until("three more reconciles", lambda: operator.reconciles() >= seen + 3, timeout=60)
    assert len(warnings(cluster, namespace, "RolledBack")) == 1
    assert rollout(cluster, namespace)["percent"] == 0


def test_promotion_in_git_leaves_one_model_serving(cluster, namespace, operator):
    apply_with_canary(cluster, namespace)
    wait_for_condition(cluster, namespace, NAME, "CanaryProgressing", "True", "Shadowing")
    # the commit that promotes: the candidate becomes spec.model, spec.canary goes
    promoted = copy.deepcopy(SAMPLE)
    promoted["spec"]["model"].update(uri=CANDIDATE_URI, maxModelLen=32768)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(promoted))

    wait_until(
        "KServe's cleanup of the canary Deployment",
        lambda: get_json(cluster, "deployment", CANARY_DEPLOYMENT, "-n", namespace) is None,
        timeout=120,
    )
    wait_until(
        "the canary Service gone", lambda: get_json(cluster, "service", CANARY_DEPLOYMENT, "-n", namespace) is None
    )

    def promoted_and_ready():
        obj = reward_model(cluster, namespace)
        ready = condition(obj) or {}
        done = ready.get("status") == "True" and ready.get("observedGeneration") == obj["metadata"]["generation"]
        return obj if done else None

    obj = wait_until("Ready on the promoted model", promoted_and_ready, timeout=120)
    assert "canary" not in obj["status"]
    assert {c["type"] for c in obj["status"]["conditions"]} == {"Ready"}
    stable = get_json(cluster, "deployment", f"{NAME}-predictor", "-n", namespace)
    assert "--max-model-len=32768" in stable["spec"]["template"]["spec"]["containers"][0]["args"]
    assert canary_settings(cluster, namespace) == {}, "the gateway serves one model again"
    wait_until("the rollout's ConfigMap pruned", lambda: gateway_share(cluster, namespace) is None)
    predictors = get_json(cluster, "deployments", "-n", namespace, "-l", f"{ISVC_LABEL}={NAME},component=predictor")
    assert [d["metadata"]["name"] for d in predictors["items"]] == [f"{NAME}-predictor"]


# ---- the gates, with the real gateway in front of two fake vLLMs ---------------------------------------


@dataclass(frozen=True)
class StepWitness:
    """What a rollout step must leave as it was, and the counters of what it applied."""

    pods: dict[str, int]  # the gateway pods' uid -> restarts
    isvc_generation: int
    gateway_starts: int  # how often the stand-in gateway (the pod's process) was started
    isvc_applies: float  # the API server's APPLY requests on InferenceServices, every client
    full_reconciles: float  # the operator's reconciles of RewardModels that rendered and applied every child
    # the operator's other reconciles of RewardModels that may apply the InferenceService: a child-only one
    # applies it when the stored one lost our fields, and one that failed (an API error, a refused child) after
    # its apply is retried, and the retry applies it again
    other_reconciles: float


def step_witness(cluster, namespace: str, operator, stand_in) -> StepWitness:
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={NAME},component=transformer") or {}
    isvc = get_json(cluster, "inferenceservice", NAME, "-n", namespace)
    return StepWitness(
        pods={
            p["metadata"]["uid"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", []))
            for p in pods.get("items", [])
        },
        isvc_generation=isvc["metadata"]["generation"],
        gateway_starts=stand_in.starts,
        isvc_applies=metric_sum(
            cluster.kubectl("get", "--raw", "/metrics").stdout,
            "apiserver_request",
            lambda labels: labels.get("verb") == "APPLY" and labels.get("resource") == "inferenceservices",
        ),
        full_reconciles=metric_sum(
            operator.metrics(),
            "reward_operator_reconcile",
            lambda labels: (
                labels["kind"] == "RewardModel"
                and labels["scope"] == "full"
                and labels["result"] in ("ready", "progressing")
            ),
        ),
        other_reconciles=metric_sum(
            operator.metrics(),
            "reward_operator_reconcile",
            lambda labels: (
                labels["kind"] == "RewardModel"
                and (labels["scope"] == "child" or labels["result"] in ("error", "apply_failed"))
            ),
        ),
    )


#
# kwok runs no containers, so this test stands in for the kubelet of the gateway's pod: it runs the real
# gateway (reward_gateway, in this process) with the environment KServe put in the transformer
# Deployment's pod template, its two upstreams swapped for two fake vLLMs, on a loopback address
# (127.0.0.0/8 is all loopback) at the gateway's port, and writes that address into the pod's status as
# its IP. The operator then reads GET /canary from it as it would from a real pod.

GATEWAY_PORT = 8080  # render/gateway.py: the gateway's containerPort, where the operator reads /canary


class GatewayStandIn:
    def __init__(self, cluster, namespace: str, stable_url: str, candidate_url: str, volume: Path):
        self.cluster, self.namespace = cluster, namespace
        self.upstreams = {"REWARD_GATEWAY_UPSTREAM_URL": stable_url, "REWARD_GATEWAY_CANARY_URL": candidate_url}
        self.running: tuple[tuple, object, object] | None = None  # (env, server, thread)
        self.address = None
        self.hosts = iter(f"127.0.0.{n}" for n in range(60, 120))
        self.volume, self.projected = volume, None  # the pod's rollout volume, and the share written there
        self.starts = 0

    def _project_share(self) -> None:
        """What the kubelet does for the pod's configMap volume: the ConfigMap's share, swapped in atomically."""
        share = gateway_share(self.cluster, self.namespace)
        if share is not None and share != self.projected:
            project(self.volume, share)
            self.projected = share

    def _template_env(self) -> tuple[tuple[str, str], ...] | None:
        deployment = get_json(self.cluster, "deployment", f"{NAME}-transformer", "-n", self.namespace)
        if deployment is None:
            return None
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return tuple(sorted((e["name"], e["value"]) for e in container.get("env", []) if "value" in e))

    def _start(self, env: tuple[tuple[str, str], ...]) -> None:
        self.stop()
        settings = {**dict(env), **self.upstreams}
        if "REWARD_GATEWAY_CANARY_PERCENT_FILE" in settings:  # the pod's mount, here
            settings["REWARD_GATEWAY_CANARY_PERCENT_FILE"] = str(self.volume / "percent")
        gateway = Gateway(load_config(settings), GatewayMetrics(CollectorRegistry()))
        host = next(self.hosts)
        server = uvicorn.Server(uvicorn.Config(build_app(gateway), host=host, port=GATEWAY_PORT, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(f"the stand-in gateway on {host}", lambda: server.started or not thread.is_alive(), interval=0.05)
        assert thread.is_alive(), f"the stand-in gateway could not listen on {host}:{GATEWAY_PORT}"
        self.running, self.address = (env, server, thread), host
        self.starts += 1

    def stop(self) -> None:
        if self.running is not None:
            _, server, thread = self.running
            server.should_exit = True
            thread.join(timeout=10)
            self.running = None

    def tick(self) -> None:
        """Follow the pod template (a new one rolls the pods) and the rollout's ConfigMap (projected into the
        running pods), and give the template's pods our address."""
        env = self._template_env()
        if env is None or not any(name == "REWARD_GATEWAY_CANARY_URL" for name, _ in env):
            return
        self._project_share()
        if self.running is None or self.running[0] != env:
            self._start(env)
        pods = get_json(self.cluster, "pods", "-n", self.namespace, "-l", f"{ISVC_LABEL}={NAME},component=transformer")
        for pod in (pods or {}).get("items", []):
            (container,) = pod["spec"]["containers"]
            pod_env = tuple(sorted((e["name"], e["value"]) for e in container.get("env", []) if "value" in e))
            if pod_env != env or pod["status"].get("podIP") == self.address:
                continue
            ip = {"status": {"podIP": self.address, "podIPs": [{"ip": self.address}]}}
            # check=False: a pod of an older template may be gone by now (a rolling update); the next tick
            # sees the pods as they are
            self.cluster.kubectl(
                "patch", "pod", pod["metadata"]["name"], "-n", self.namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps(ip), check=False,
            )  # fmt: skip

    def score(self, rounds: int = 8) -> None:
        """Requests of GRPO-like groups (4 completions of one prompt each)."""
        if self.address is None:
            return
        for r in range(rounds):
            items = [{"text": f"prompt {r} completion {i}", "group": f"g{r}"} for i in range(4)]
            request = urllib.request.Request(
                f"http://{self.address}:{GATEWAY_PORT}/v1/rewards",
                data=json.dumps({"items": items}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200


@pytest.fixture
def stand_in(cluster, namespace, backend, candidate_backend, tmp_path):
    volume = tmp_path / "rollout"
    volume.mkdir()
    gateway = GatewayStandIn(cluster, namespace, backend.url, candidate_backend.url, volume)
    yield gateway
    gateway.stop()


def test_the_share_steps_up_while_the_candidate_agrees_and_rolls_back_when_it_disagrees(
    cluster, namespace, operator, stand_in, candidate_backend
):
    candidate_backend.scale = 2.0  # another scale, the same order: it agrees on every pair
    apply_with_canary(cluster, namespace, mode="split", steps=[50, 100], interval="30s", minPairs=20, minRequests=5)

    def share_reached(percent: int):
        def reached():
            stand_in.tick()
            stand_in.score()
            return rollout(cluster, namespace) if rollout(cluster, namespace).get("percent") == percent else None

        return reached

    wait_until("the first step (50%)", share_reached(50), timeout=120)
    before = step_witness(cluster, namespace, operator, stand_in)
    at_100 = wait_until("the second step (100%) after the interval", share_reached(100), timeout=180)
    after = step_witness(cluster, namespace, operator, stand_in)
    assert at_100["agreement"] == 1.0 and at_100.get("errorRatio", 0) == 0
    assert not warnings(cluster, namespace, "RolledBack")
    # the step moved the share in the ConfigMap alone: the InferenceService and the gateway pods are as they
    # were (same pods, no restarts; the stand-in gateway process is the same one, its counters kept)
    assert after.pods == before.pods and after.isvc_generation == before.isvc_generation
    assert after.gateway_starts == before.gateway_starts == 1
    applies = after.isvc_applies - before.isvc_applies
    full = after.full_reconciles - before.full_reconciles
    other = after.other_reconciles - before.other_reconciles
    print(f"\n50% -> 100%: {applies:.0f} applies of InferenceServices (the API server's count), {full:.0f} full "
          f"reconciles of RewardModels and {other:.0f} child-only or failed ones (the operator's); the gateway pods "
          f"{sorted(after.pods)}")  # fmt: skip
    # every full reconcile applies its InferenceService once; a step's reconcile no longer applies it twice (one
    # reconcile may straddle either look at the counters; see StepWitness.other_reconciles for the others that
    # may apply it). The unit test counts the stepping reconcile's applies exactly (FakeCluster).
    assert full - 1 <= applies <= full + other + 1, (applies, full, other)

    candidate_backend.scale = -1.0  # the candidate now orders every pair the other way
    wait_until("the rollback to 0%", share_reached(0), timeout=120)
    progressing = condition(reward_model(cluster, namespace), "CanaryProgressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "RolledBack")
    assert "pairs as the stable model does" in progressing["message"], progressing["message"]
    seen = operator.reconciles()
    wait_until("three more reconciles", lambda: operator.reconciles() >= seen + 3, timeout=60)
    assert len(warnings(cluster, namespace, "RolledBack")) == 1
