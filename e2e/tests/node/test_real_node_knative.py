"""KServe's Knative mode for real: a RewardModel served through Kourier on the real node, asleep at zero
pods between bursts and woken through Knative's activator.

Nothing stands in: the operator renders ``serving.mode: Knative``; KServe's controller makes a Knative
Service for the predictor (vLLM's CPU build) and one for the gateway; Knative's controller, autoscaler and
activator and Kourier's controller and Envoy run as pods on the node (``testenv.addons.knative``);
queue-proxy counts each pod's requests. A client pod calls ``status.url`` by name: CoreDNS answers with the
ExternalName of the gateway's route, which points at Kourier; Envoy routes by host to the gateway's
revision; the gateway calls vLLM through Kourier the same way. While a revision is at zero its endpoints are
the activator's: the activator holds the requests and asks the autoscaler for a pod.

1. The tiny sequence model scored through ``status.url`` at transformers' numbers (|diff| <= 1e-4), as the
   Standard-mode rewards are scored (``test_real_node_rewards.py``).
2. Idle, it goes to zero pods after Knative's window; ``status.replicas``, ``ScaledToZero`` and the
   ``ASLEEP`` column follow Knative's scaling.
3. A burst of 64 requests at zero (``testenv.wake``: 32 per-sample ``/get_reward`` as OpenRLHF sends, 32
   GRPO groups of 4 on ``/v1/rewards`` as verl sends) wakes the gateway and vLLM through the activator:
   every request answered with the model's scores, none lost. The timeline is printed.

One cold start of vLLM and one wake, about 4 minutes beside the session's other real-node tests. The other
kinds, and the same wake against Standard mode's KEDA: the knative suite (``make knative-real``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from reward_testing.scoring_cases import SPEC_TEMPLATE, TOLERANCE
from reward_testing.tiny_models import tar_model
from reward_testing.waiting import wait_until
from testenv import node, served, wake
from testenv.helpers import condition, get_json

NAME = "kn-seq"
# Knative's shortest stable window (spec.serving.scalingWindow): at zero well under a minute after the last
# request (the window, then the grace Knative gives the activator to take the route over)
WINDOW = "6s"
WAKE_TIMEOUT = 600  # the gateway's and vLLM's starts on the node's two shared cores


@pytest.fixture(scope="module")
def sleepy(cluster, knative_namespace, plane, tiny_models) -> Iterator[dict]:
    """The tiny sequence model in Knative mode with minReplicas 0 and the shortest window, the spec's own chat
    template applied by the gateway; Ready (its first revision starts at one pod, Knative's initial scale)."""
    archive = tar_model(tiny_models["sequence"], node.storage_dir(plane.directory) / "knative-sequence.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)
    spec = served.reward_model(
        NAME, "sequence", uri,
        model={"chatTemplate": SPEC_TEMPLATE}, gateway={"chatTemplateMode": "gateway"},
        serving={"mode": "Knative", "minReplicas": 0, "scalingWindow": WINDOW},
    )  # fmt: skip
    yield served.serve(cluster, knative_namespace, spec)
    served.finished(cluster, knative_namespace, NAME)


def test_a_knative_mode_model_scores_through_its_url_at_transformers_numbers(
    cluster, knative_namespace, sleepy, references
):
    url = sleepy["status"]["url"]
    # the gateway's route, cluster-local through Kourier (KServe's address with disableIstioVirtualHost)
    assert url == f"http://{NAME}-transformer.{knative_namespace}.svc.cluster.local", url
    routes = (get_json(cluster, "ksvc", "-n", knative_namespace) or {}).get("items", [])
    assert {r["metadata"]["name"] for r in routes} == {f"{NAME}-predictor", f"{NAME}-transformer"}
    diff = served.score_kind(cluster, knative_namespace, url, "sequence", references)
    print(f"\nKnative mode, sequence: max |diff| vs transformers {diff:.2e} through {url}")
    assert diff <= TOLERANCE


def asleep_column(cluster, namespace: str) -> str:
    """What `kubectl get rewardmodel` prints under ASLEEP."""
    header, row = (line.split() for line in cluster.kubectl("get", "rewardmodel", NAME, "-n", namespace)
                   .stdout.splitlines()[:2])  # fmt: skip
    return row[header.index("ASLEEP")]


def test_idle_it_goes_to_zero_pods_and_its_status_says_so(cluster, knative_namespace, sleepy):
    started = time.monotonic()
    stored = wake.asleep(cluster, knative_namespace, NAME)
    print(f"\nKnative mode at zero {time.monotonic() - started:.0f} s after the last answer (window {WINDOW})")
    assert condition(stored, "ScaledToZero")["reason"] == "Idle"
    assert stored["status"]["replicas"] == 0
    assert asleep_column(cluster, knative_namespace) == "True"
    ready = condition(stored)
    assert ready["status"] == "True", ready  # asleep, not broken: Knative's revision at zero is Ready
    # as rendered, the gateway goes to zero with the predictor
    wake.at_zero(cluster, knative_namespace, NAME, "transformer")


def test_a_burst_at_zero_wakes_it_through_the_activator_and_every_request_gets_the_models_scores(
    cluster, knative_namespace, sleepy, sequence_wake_scores
):
    assert (condition(get_json(cluster, "rewardmodel", NAME, "-n", knative_namespace), "ScaledToZero") or {}).get(
        "status"
    ) == "True", "not at zero before the burst"
    woke = wake.measure(cluster, knative_namespace, NAME, sleepy["status"]["url"], sequence_wake_scores,
                        "Knative mode, the gateway at zero too", WAKE_TIMEOUT)  # fmt: skip
    print(f"\n{woke.report()}")
    woke.assert_every_request_got_the_models_scores()
    awake = get_json(cluster, "rewardmodel", NAME, "-n", knative_namespace)
    assert condition(awake, "ScaledToZero")["reason"] in ("Active", "ScalingUp"), awake["status"]
    assert asleep_column(cluster, knative_namespace) == "False"
    wait_until("status.replicas 1 after the wake", lambda: get_json(cluster, "rewardmodel", NAME, "-n",
               knative_namespace)["status"].get("replicas") == 1, timeout=60)  # fmt: skip
