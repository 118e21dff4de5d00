"""`make demo`: the operator on a local control plane, from RewardModel to InferenceService.

1. bring the control plane up (or reuse the one `make up` started),
2. install the reward runtimes and start the operator,
3. apply the sample RewardModel and show the InferenceService it renders to,
4. stand in for KServe's controller (which does not run here) by marking the
   InferenceService Ready, and show the RewardModel's status follow.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv import controlplane
from testenv.helpers import condition

SAMPLE = REPO / "manifests" / "samples" / "rewardmodel-sequence-standard.yaml"
NAMESPACE = "rlhf-demo"


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def main() -> int:
    plane_dir = controlplane.default_state_dir()
    if (plane_dir / "state.json").exists():
        step(f"reusing the control plane in {plane_dir}")
        plane = controlplane.ControlPlane.attach(plane_dir)
    else:
        step("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok, KServe)")
        plane = controlplane.ControlPlane(plane_dir)
        plane.up()
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
    print(kubectl("get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}").stdout)

    print(
        "\nThe control plane and the operator keep running. Try:\n"
        f"  export KUBECONFIG={plane.state.kubeconfig}\n"
        f"  export PATH={plane.bin}:$PATH\n"
        f"  kubectl get rlhf -A\n"
        f"  kubectl delete inferenceservice {name} -n {NAMESPACE}   # the operator restores it\n"
        "Tear everything down with:  make down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
