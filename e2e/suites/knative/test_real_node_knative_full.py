"""KServe's Knative mode for real, beyond what ``make test`` runs (``e2e/tests/node/test_real_node_knative.py``):
the token and process kinds at transformers' numbers, and one wake from zero measured three ways in one run.

1. A token and a process RewardModel in Knative mode, each scored through ``status.url`` from a pod at
   transformers' numbers (|diff| <= 1e-4), as the Standard-mode rewards are scored.
2. One model (the tiny sequence one), one burst (``testenv.wake``: 64 requests, 32 per-sample
   ``/get_reward`` and 32 GRPO groups of 4 on ``/v1/rewards``), from zero predictor pods:
   - Knative mode as the operator renders it, the gateway at zero with the predictor: Knative's activator
     holds the burst for the gateway, then the gateway's calls for the predictor;
   - Knative mode with the gateway kept at one pod (its InferenceService edited while the operator is
     stopped): the activator holds the gateway's calls while the predictor wakes;
   - Standard mode with KEDA: the gateway (always up) holds the burst itself and pushes KEDA, which scales
     the predictor.
   For each: requests sent, answered, failed, lost, the largest |diff|, the timeline (first request -> the
   predictor's pod, vLLM's ready line, the first and last answer); then Knative's against KEDA's as ratios.
   The figures are printed, never asserted; every request must be answered with the model's scores.

KEDA runs beside the node (the suite's make rule sets ``TESTENV_KEDA=1``): its operator on the host reaches the
Standard-mode gateway's scaler through its private hosts file (``testenv.addons.keda``).
"""

from __future__ import annotations

import json

import pytest

from reward_testing.scoring_cases import SPEC_TEMPLATE, TOLERANCE
from reward_testing.tiny_models import tar_model
from reward_testing.waiting import wait_until
from testenv import node, served, wake

WAKE_TIMEOUT = 900  # a cold start of vLLM on the node's two cores, shared with whatever else runs
# The gateways' waits: long enough for any cold start here, Knative mode's within its 600 s revision timeout
KNATIVE_GATEWAY = {"scaleFromZeroTimeoutSeconds": 300, "requestTimeoutSeconds": 300}
STANDARD_GATEWAY = {"scaleFromZeroTimeoutSeconds": WAKE_TIMEOUT, "requestTimeoutSeconds": 300}
WINDOW = "6s"  # Knative's shortest stable window: at zero soon after a burst


@pytest.fixture(scope="module")
def sequence_uri(plane, tiny_models) -> str:
    archive = tar_model(tiny_models["sequence"], node.storage_dir(plane.directory) / "knative-wake-sequence.tar.gz")
    return node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)


@pytest.mark.parametrize("kind", ["token", "process"])
def test_each_kind_in_knative_mode_scores_through_its_url_at_transformers_numbers(
    cluster, knative_namespace, plane, tiny_models, references, kind
):
    archive = tar_model(tiny_models[kind], node.storage_dir(plane.directory) / f"knative-{kind}.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)
    name = f"kn-{kind}"
    spec = served.reward_model(name, kind, uri, tiny_models[kind].step_tag_id, serving={"mode": "Knative"})
    url = served.serve(cluster, knative_namespace, spec)["status"]["url"]
    diff = served.score_kind(cluster, knative_namespace, url, kind, references)
    print(f"\nKnative mode, {kind}: max |diff| vs transformers {diff:.2e} through {url}")
    assert diff <= TOLERANCE
    served.finished(cluster, knative_namespace, name)


def sequence_model(name: str, uri: str, mode: str, gateway: dict, **serving) -> dict:
    """The tiny sequence model at zero between bursts, the spec's own chat template applied by the gateway."""
    return served.reward_model(
        name, "sequence", uri,
        model={"chatTemplate": SPEC_TEMPLATE}, gateway={"chatTemplateMode": "gateway", **gateway},
        serving={"mode": mode, "minReplicas": 0, **serving},
    )  # fmt: skip


def measured(cluster, namespace: str, name: str, url: str, want: dict[str, float], how: str) -> wake.Wake:
    woken = wake.measure(cluster, namespace, name, url, want, how, WAKE_TIMEOUT)
    print(f"\n{woken.report()}")
    return woken


def knative_wakes(cluster, namespace: str, operator, uri: str, want: dict[str, float]) -> list[wake.Wake]:
    """The two Knative-mode wakes: as rendered (the gateway at zero too), then the gateway kept up."""
    name = "kn-wake"
    spec = sequence_model(name, uri, "Knative", KNATIVE_GATEWAY, scalingWindow=WINDOW)
    url = served.serve(cluster, namespace, spec)["status"]["url"]
    wake.asleep(cluster, namespace, name)
    wake.at_zero(cluster, namespace, name, "transformer")
    woken = [measured(cluster, namespace, name, url, want, "Knative mode, the gateway at zero too")]
    first_gateways = {pod["metadata"]["name"] for pod in wake.pods(cluster, namespace, name, "transformer")}
    # the other choice: the gateway kept at one pod, the predictor alone at zero. The operator would put the
    # InferenceService back as it renders it, so it stops meanwhile (and the RewardModel's status with it: the
    # pods say where the revisions are).
    operator.stop()
    try:
        kept = {"spec": {"transformer": {"minReplicas": 1}}}
        cluster.kubectl("patch", "inferenceservice", name, "-n", namespace, "--type=merge", "-p", json.dumps(kept))

        def one_gateway_kept_up() -> bool:
            # the new revision's pod alone: the first wake's is gone, not just going (it holds CPU till then)
            gateways = wake.pods(cluster, namespace, name, "transformer", going=True)
            return (len(gateways) == 1 and wake.ready(gateways[0])
                    and gateways[0]["metadata"]["name"] not in first_gateways)  # fmt: skip

        wait_until("a gateway pod of the revision kept at one", one_gateway_kept_up, timeout=300, interval=2)
        wake.at_zero(cluster, namespace, name)
        woken.append(measured(cluster, namespace, name, url, want, "Knative mode, the gateway kept up"))
    finally:
        operator.start()
    served.finished(cluster, namespace, name)
    return woken


def keda_wake(cluster, namespace: str, uri: str, want: dict[str, float]) -> wake.Wake:
    """The same model in Standard mode at zero through KEDA, the gateway holding the burst."""
    name = "std-wake"
    spec = sequence_model(name, uri, "Standard", STANDARD_GATEWAY, scaleDownDelay="10s")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(spec))
    with wake.keda_reaches_the_gateway(cluster, namespace, name):
        url = served.serve(cluster, namespace, spec)["status"]["url"]
        wake.asleep(cluster, namespace, name)
        woken = measured(cluster, namespace, name, url, want, "Standard mode, KEDA and the gateway's hold")
    served.finished(cluster, namespace, name)
    return woken


def test_one_wake_through_knatives_activator_and_through_keda_and_the_gateways_hold(
    cluster, knative_namespace, operator, sequence_uri, sequence_wake_scores
):
    if cluster.hosts is None:
        pytest.skip("needs KEDA in the session's control plane (TESTENV_KEDA=1, as `make knative-real` sets it)")
    at_zero, kept_up = knative_wakes(cluster, knative_namespace, operator, sequence_uri, sequence_wake_scores)
    keda = keda_wake(cluster, knative_namespace, sequence_uri, sequence_wake_scores)
    print("\nKnative's wake against KEDA's (ratio: Knative / KEDA; below 1, Knative's is quicker):")
    for woken in (at_zero, kept_up):
        print(f"  {woken.how}: first request -> first answer {woken.first_answer_s:.2f} s against "
              f"{keda.first_answer_s:.2f} s, ratio {woken.first_answer_s / keda.first_answer_s:.2f}; vLLM's ready "
              f"line -> first answer {woken.ready_line_to_first_answer_s:.2f} s against "
              f"{keda.ready_line_to_first_answer_s:.2f} s, ratio "
              f"{woken.ready_line_to_first_answer_s / keda.ready_line_to_first_answer_s:.2f}")  # fmt: skip
    gateway_wake = at_zero.timeline["predictor pod created"] - kept_up.timeline["predictor pod created"]
    print(f"  the gateway's own wake (at zero against kept up): the predictor's pod created {gateway_wake:+.2f} s "
          f"later, the first answer {at_zero.first_answer_s - kept_up.first_answer_s:+.2f} s later")  # fmt: skip
    if "gateway ready (its log)" in at_zero.timeline:
        started = at_zero.timeline["gateway ready (its log)"] - at_zero.timeline["gateway pod created"]
        print(f"  the gateway's own start at zero: its pod created -> its ready line {started:.2f} s")
    for woken in (at_zero, kept_up, keda):
        woken.assert_every_request_got_the_models_scores()
