"""A candidate reward model rolled out beside the stable one (issue #13), with KServe's own controller.

The candidate's Deployment and Service are the ones KServe v0.20 makes for the
InferenceService's spec.canary[] entry; the gateway (the transformer KServe
deploys) is told that Service and the share; the candidate's readiness is KServe's
word, from its pods that kwok runs. The gateways' figures need the gateway running
in the pods, which kwok does not do: the gates on figures are tested against the
policy (operator/tests/test_policy_canary.py, test_controller_canary.py) and the
gateway's own tests (two fake vLLMs, runtimes/gateway/tests/test_gateway_canary.py).
"""

from __future__ import annotations

import copy
import json
import urllib.request

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.helpers import condition, get_json

NAME = "skywork-rm"
SAMPLE = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
CANDIDATE_URI = "hf://Skywork/Skywork-Reward-V2-Qwen3-8B"
CANARY_DEPLOYMENT = f"{NAME}-canary-predictor"  # KServe's <isvc>-<predictor name>-predictor
ISVC_LABEL = "serving.kserve.io/inferenceservice"


@pytest.fixture(scope="module", autouse=True)
def kserve_runs(cluster):
    webhook = "mutatingwebhookconfiguration/inferenceservice.serving.kserve.io"
    if cluster.kubectl("get", webhook, check=False).returncode != 0:
        pytest.skip("these tests need KServe's controller and webhooks on the cluster")


def apply_with_canary(cluster, namespace: str, **canary) -> None:
    manifest = copy.deepcopy(SAMPLE)
    manifest["spec"]["canary"] = {"model": {"uri": CANDIDATE_URI, "maxModelLen": 32768}, **canary}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def reward_model(cluster, namespace: str) -> dict:
    return get_json(cluster, "rewardmodel", NAME, "-n", namespace) or {}


def rollout(cluster, namespace: str) -> dict:
    return (reward_model(cluster, namespace).get("status") or {}).get("canary") or {}


def gateway_env(cluster, namespace: str) -> dict[str, str]:
    """The REWARD_GATEWAY_CANARY_* variables of the transformer Deployment KServe made."""
    deployment = get_json(cluster, "deployment", f"{NAME}-transformer", "-n", namespace)
    if deployment is None:
        return {}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        e["name"].removeprefix("REWARD_GATEWAY_"): e.get("value", "")
        for e in container.get("env", [])
        if e["name"].startswith("REWARD_GATEWAY_CANARY_")
    }


def wait_for_condition(cluster, namespace: str, type_: str, status: str, reason: str, timeout: float = 120) -> dict:
    def reached():
        found = condition(reward_model(cluster, namespace), type_) or {}
        return found if (found.get("status"), found.get("reason")) == (status, reason) else None

    return wait_until(f"{type_}={status} ({reason})", reached, timeout=timeout)


def warnings(cluster, namespace: str, reason: str) -> list[dict]:
    selector = f"involvedObject.kind=RewardModel,involvedObject.name={NAME},type=Warning,reason={reason}"
    listed = get_json(cluster, "events", "-n", namespace, "--field-selector", selector)
    return (listed or {}).get("items", [])


def predictor_pod(cluster, namespace: str, deployment: str) -> dict | None:
    """A pod of one of KServe's predictor Deployments (the stable's or the candidate's), by name prefix."""
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={NAME},component=predictor") or {}
    prefix = deployment + "-"
    return next(
        (
            p
            for p in pods.get("items", [])
            if p["metadata"]["name"].startswith(prefix) and p["metadata"]["name"][len(prefix) :].count("-") == 1
        ),
        None,
    )


def reconciles(operator) -> float:
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('reward_operator_reconcile_total{kind="RewardModel"')
    )


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
        wait_until(f"{deployment_name}'s pod", lambda d=deployment_name: predictor_pod(cluster, namespace, d))
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
    env = wait_until("the gateway's canary settings", lambda: gateway_env(cluster, namespace) or None)
    assert env["CANARY_URL"] == f"http://{CANARY_DEPLOYMENT}.{namespace}.svc.cluster.local"
    assert env["CANARY_MODE"] == "shadow" and "CANARY_PERCENT" not in env

    # KServe reports the candidate available once kwok runs its pod: shadowing starts
    wait_for_condition(cluster, namespace, "CanaryReady", "True", "CandidateReady")
    wait_for_condition(cluster, namespace, "CanaryProgressing", "True", "Shadowing")
    status = rollout(cluster, namespace)
    assert status["phase"] == "Shadowing" and status["percent"] == 0
    assert status["candidate"] == env["CANARY_NAME"]
    header, row = cluster.kubectl("get", "rewardmodel", NAME, "-n", namespace).stdout.splitlines()
    column = header.index("CANARY")
    assert row[column:].split()[0] == "0", (header, row)


def test_a_split_starts_at_its_first_step_and_rolls_back_once_when_the_candidate_fails(cluster, namespace, operator):
    apply_with_canary(cluster, namespace, mode="split", steps=[10, 50, 100], interval="30s")
    wait_for_condition(cluster, namespace, "CanaryProgressing", "True", "StepRunning")
    assert rollout(cluster, namespace)["percent"] == 10
    wait_until("the gateway told 10%", lambda: gateway_env(cluster, namespace).get("CANARY_PERCENT") == "10")

    # the candidate's pod stops being Ready (as a vLLM that hangs would): KServe reports the canary
    # unavailable, and the operator takes its share away
    candidate_pod = wait_until("the candidate's pod", lambda: predictor_pod(cluster, namespace, CANARY_DEPLOYMENT))
    unready = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "ContainersReady",
                                                                                 "status": "False"}]}}  # fmt: skip
    cluster.kubectl(
        "patch", "pod", candidate_pod["metadata"]["name"], "-n", namespace, "--subresource=status",
        "-p", json.dumps(unready),
    )  # fmt: skip
    progressing = wait_for_condition(cluster, namespace, "CanaryProgressing", "False", "RolledBack")
    assert "not Ready" in progressing["message"] and "from 10%" in progressing["message"]
    assert condition(reward_model(cluster, namespace), "CanaryReady")["status"] == "False"
    assert rollout(cluster, namespace)["percent"] == 0
    wait_until("the gateway told 0%", lambda: gateway_env(cluster, namespace).get("CANARY_PERCENT") == "0")

    # several more looks at the rollout (its timer runs every 2 s here): still one Warning event
    seen = reconciles(operator)
    wait_until("three more reconciles", lambda: reconciles(operator) >= seen + 3, timeout=60)
    assert len(warnings(cluster, namespace, "RolledBack")) == 1
    assert rollout(cluster, namespace)["percent"] == 0


def test_promotion_in_git_leaves_one_model_serving(cluster, namespace, operator):
    apply_with_canary(cluster, namespace)
    wait_for_condition(cluster, namespace, "CanaryProgressing", "True", "Shadowing")
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
    assert gateway_env(cluster, namespace) == {}, "the gateway serves one model again"
    predictors = get_json(cluster, "deployments", "-n", namespace, "-l", f"{ISVC_LABEL}={NAME},component=predictor")
    assert [d["metadata"]["name"] for d in predictors["items"]] == [f"{NAME}-predictor"]
