"""`make demo`: the operator on a local control plane, from a RewardModel to a reward.

1. bring the control plane up (or reuse the one `make up` started), its real node included,
2. install the reward runtimes and start the operator,
3. apply the GPU-shaped sample RewardModel: KServe's controller makes it Ready on kwok's fake GPU
   nodes; show the InferenceService it renders to and the status,
4. serve a tiny random-weight reward model for real on the real node (vLLM's CPU build, the model
   downloaded by KServe's storage initializer from the test bed's storage server) and score one
   prompt and response with curl against its status.url.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from reward_testing.paths import REPO
from reward_testing.scoring_cases import TOLERANCE, prompt_response
from reward_testing.tiny_models import make_tiny_models, reference_scores, tar_model
from reward_testing.waiting import wait_until
from testenv import node, wake
from testenv.artifacts import heartbeat
from testenv.diagnose import pods_line
from testenv.helpers import condition
from testenv.plane import controlplane

SAMPLE = REPO / "manifests" / "samples" / "rewardmodel-sequence-standard.yaml"
NAMESPACE = "rlhf-demo"
CPU_NAMESPACE = "rlhf-demo-cpu"  # pinned to the real node
TINY = "tiny-rm"
PROMPT, RESPONSE = "What is 2+2?", "4"
SCORE_REQUEST = {"items": [{"prompt": PROMPT, "response": RESPONSE}]}
# the images the demo loads onto the real node after the control plane is up, built beside its binaries
DEMO_IMAGES = ("vllm-cpu",)


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def control_plane() -> controlplane.ControlPlane:
    """The control plane `make up` (or an earlier demo) started, else a new one with what the demo shows: KServe
    and the real node, not Knative's add-on (a Standard-mode model); vLLM's image built beside the rest."""
    plane_dir = controlplane.default_state_dir()
    if (plane_dir / "state.json").exists():
        step(f"reusing the control plane in {plane_dir}")
        return controlplane.ControlPlane.attach(plane_dir)
    step("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok, KServe)")
    plane = controlplane.ControlPlane(plane_dir)
    started = time.monotonic()
    plane.up(also_images=DEMO_IMAGES, knative=False)
    print(f"the control plane, its binaries and images ready in {time.monotonic() - started:.0f}s", flush=True)
    return plane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plane-only",
        action="store_true",
        help="bring the control plane up (building what it runs) and stop there: `make demo` runs this beside "
        "vLLM's venv, then the demo on that control plane",
    )
    args = parser.parse_args(argv)
    plane = control_plane()
    if args.plane_only:
        return 0
    assert plane.state is not None
    kubectl = plane.kubectl

    step("installing the reward runtimes (ClusterServingRuntimes)")
    print(
        kubectl("apply", "--server-side", "--field-manager=reward-operator-demo", "-f", str(REPO / "runtimes")).stdout
    )

    if "reward-operator" not in plane.state.pids:
        step("starting reward-operator (logs: " + str(plane.directory / "logs" / "reward-operator.log") + ")")
        env = dict(os.environ, KUBECONFIG=plane.state.kubeconfig, REWARD_OPERATOR_METRICS_PORT="0")
        operator = Path(sys.executable).parent / "reward-operator"
        plane.spawn("reward-operator", [str(operator), "run", "--standalone", "-A", "--liveness="], env=env)

    step(f"applying {SAMPLE.relative_to(REPO)} in namespace {NAMESPACE}")
    kubectl("create", "namespace", NAMESPACE, check=False)
    print(kubectl("apply", "-n", NAMESPACE, "-f", str(SAMPLE)).stdout)
    name = "skywork-rm"

    def get(kind: str) -> dict | None:
        result = kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    wait_until("the InferenceService", lambda: get("inferenceservice") is not None)

    step("the InferenceService the operator rendered, as stored after KServe's webhooks defaulted it")
    print(kubectl("get", "inferenceservice", name, "-n", NAMESPACE, "-o", "yaml", "--show-managed-fields=false").stdout)

    step("KServe's controller creates the predictor and the gateway; kwok's nodes run their pods")
    wait_until(
        "Ready=True on the RewardModel, because KServe reports its InferenceService (and the gateway) Ready",
        lambda: (condition(get("rewardmodel")) or {}).get("status") == "True",
        timeout=180,
    )
    print(kubectl("get", "deployments,services,hpa,ingress,pods", "-n", NAMESPACE, "-l",
                  f"serving.kserve.io/inferenceservice={name}").stdout)  # fmt: skip
    print(kubectl("get", "rewardmodels", "-n", NAMESPACE, "-o", "wide").stdout)

    step("the RewardModel's status")
    print(json.dumps(get("rewardmodel")["status"], indent=2))

    step("events")
    # the RewardModel's own: KServe posts its own (InferenceServiceReady too) on the InferenceService of the same name
    selector = f"involvedObject.kind=RewardModel,involvedObject.name={name}"
    print(kubectl("get", "events", "-n", NAMESPACE, "--field-selector", selector).stdout)

    if plane.running("node") and node.owned_by(plane.directory):
        if not serve_a_tiny_model(plane):
            return 1
    else:
        step("no real node in this control plane (TESTENV_NODE=0): no model is served for real")

    print(
        "\nThe control plane and the operator keep running. Try:\n"
        f"  export KUBECONFIG={plane.state.kubeconfig}\n"
        f"  export PATH={plane.bin}:$PATH\n"
        f"  kubectl get rlhf -A\n"
        f"  kubectl delete inferenceservice {name} -n {NAMESPACE}   # the operator restores it\n"
        "Tear everything down with:  make down"
    )
    return 0


def serve_a_tiny_model(plane: controlplane.ControlPlane) -> bool:
    """A tiny random-weight sequence model through the whole data path, scored with curl; True where the reward
    through its status.url is transformers' number for the same tokens."""
    assert plane.state is not None
    kubectl = plane.kubectl
    step("making a tiny random-weight reward model (no hub here) and putting it on the storage server")
    storage = node.storage_dir(plane.directory)
    made = time.monotonic()
    models = make_tiny_models(plane.directory / "demo-models", ("sequence",))
    tar_model(models["sequence"], storage / f"{TINY}.tar.gz")
    print(f"made in {time.monotonic() - made:.0f}s (most of it torch's and transformers' import)")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], f"{TINY}.tar.gz")
    print(uri)

    step("loading vLLM's CPU image into the real node's containerd (built from runtimes/vllm-cpu/Dockerfile)")
    plane.load_images(DEMO_IMAGES)

    step(f"applying RewardModel {TINY} (resources.gpus: 0: the vllm-reward-cpu runtime) in {CPU_NAMESPACE}")
    kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(CPU_NAMESPACE)))
    kubectl("wait", "--for=create", "serviceaccount/default", "-n", CPU_NAMESPACE, "--timeout=60s")
    reward_model = {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": TINY, "namespace": CPU_NAMESPACE},
        "spec": {
            "model": {"uri": uri, "kind": "sequence", "dtype": "float32"},
            "resources": {"gpus": 0, "cpu": "1500m", "memory": "6Gi"},
            "serving": {"mode": "Standard", "minReplicas": 1, "maxReplicas": 1},
            "gateway": {"resources": {"cpu": "250m", "memory": "512Mi"}},
        },
    }
    print(yaml.safe_dump(reward_model, sort_keys=False))
    kubectl("apply", "-f", "-", input=json.dumps(reward_model))

    def ready() -> dict | None:
        got = json.loads(kubectl("get", "rewardmodel", TINY, "-n", CPU_NAMESPACE, "-o", "json").stdout)
        return got if (condition(got) or {}).get("status") == "True" else None

    step("KServe's storage initializer downloads the model; containerd starts vLLM and the gateway")
    started = time.monotonic()
    applied = time.time()

    def progress() -> None:
        print(f"  {time.monotonic() - started:.0f}s: {pods_line(kubectl, CPU_NAMESPACE)}", flush=True)

    with heartbeat(progress):
        served = wait_until(f"RewardModel {TINY} Ready", ready, timeout=900, interval=2)
    print(f"Ready after {time.monotonic() - started:.0f}s")
    try:
        timeline = wake.predictor_timeline(plane, CPU_NAMESPACE, TINY, since=applied)
    except AssertionError:  # a demo run again on the same control plane: the pod is the first run's
        print("  (its predictor pod was there before this run)")
    else:
        print("where the time went, from the apply:")
        for event, at in sorted(timeline.items(), key=lambda item: item[1]):
            print(f"  {at - applied:6.1f}s  {event}")
    print(kubectl("get", "pods", "-n", CPU_NAMESPACE, "-o", "wide").stdout)
    print(kubectl("get", "rewardmodels", "-n", CPU_NAMESPACE, "-o", "wide").stdout)

    url = served["status"]["url"]
    host = url.split("://", 1)[1].split("/", 1)[0]
    service = host.split(".", 1)[0]
    cluster_ip = kubectl("get", "service", service, "-n", CPU_NAMESPACE, "-o", "jsonpath={.spec.clusterIP}").stdout
    step(f"a reward through {url} (the host has no cluster DNS: curl --resolve gives it the Service's address)")
    curl = ["curl", "-sS", "--resolve", f"{host}:80:{cluster_ip}", f"{url}/v1/rewards",
            "-H", "Content-Type: application/json", "-d", json.dumps(SCORE_REQUEST)]  # fmt: skip
    print("$ " + shlex.join(curl))
    answer = subprocess.run(curl, capture_output=True, text=True)
    print(answer.stdout or answer.stderr)
    return the_reward_is_transformers(answer.stdout, models["sequence"])


def the_reward_is_transformers(answer: str, model) -> bool:
    """The gateway's answer holds one reward, transformers' number for the same tokens (its chat template once)."""
    try:
        (reward,) = json.loads(answer)["rewards"]
        got = float(reward)
    except (ValueError, KeyError, TypeError) as error:
        print(f"no reward in the answer ({error!r}): the demo failed", file=sys.stderr)
        return False
    (want,) = reference_scores(model, [{"messages": prompt_response(PROMPT, RESPONSE)}])
    if abs(got - want["reward"]) > TOLERANCE:
        print(f"the reward {got} is not transformers' {want['reward']} for the same tokens", file=sys.stderr)
        return False
    print(f"transformers gives {want['reward']} for the same tokens ({len(want['ids'])} of them): the same number")
    return True


if __name__ == "__main__":
    sys.exit(main())
