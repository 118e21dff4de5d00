"""A pipeline that generates: an RLHFPipeline served on the test bed's real node, through KServe's router.

Nothing stands in (test_rlhfpipeline_operator.py runs the same kind with kwok's pods, fake vLLMs and the
router as a local process): the operator renders the roles' InferenceServices (``resources.gpus: 0``, so
``vllm-generate-cpu`` for the actor and the reference, ``vllm-reward-cpu`` for the critic) and the
InferenceGraph; KServe's controller makes their Deployments, the router's among them, whose image is
``cmd/router`` of the pinned KServe module built here (testenv.images, named in KServe's ConfigMap);
containerd runs five vLLMs of the pinned CPU build and their gateways:

- the actor and the reference: a tiny random-weight causal LM (LlamaForCausalLM), the reference the
  actor's model as the operator defaults it;
- the critic: a tiny value model (Qwen2ForRewardModel: a value per token);
- two RewardModels: the tiny sequence model (weight 0.7, raw) and the tiny token model (weight 0.3,
  standardised by a running mean).

A trainer's pod on the node calls the graph's URL (``status.url``) by name. Checked: ``score``,
``generate-and-score`` and ``best-of-n`` answer; the reference's log-probabilities are transformers'
log-softmax of the same tokens and the critic's values transformers' (|diff| <= 1e-4); each reward part
is that RewardModel's own answer; the combined reward is the weighted sum; best-of-n picks the candidate
with the highest; a role's pod that vanishes mid-request (deleted forced or plain, or cut off the network, its
vLLM or its gateway) ends the request within the documented bound, with an error or a whole answer, never a
number it left unfinished.

`make pipeline-real` runs it; not in `make test`: five cold starts of vLLM side by side on the node's 2
cores (about 16 GB). Figures (time to Ready, each flow's time, each vanishing's time to the answer and the
order of its pod's teardown, the recovery) are printed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from reward_gateway.upstream.http_pool import DEAD_PEER_S
from reward_operator.render.predictor import PREDICTOR_GRACE_SECONDS
from reward_testing.pipeline_cases import PROMPTS, RESPONSES, expected_rows, largest_diff, pipeline_models
from reward_testing.prometheus_text import sample_sum
from reward_testing.scoring_cases import assert_close
from reward_testing.tiny_models import TinyModel, tar_model
from reward_testing.waiting import wait_until
from testenv import images, node, served, wake
from testenv.helpers import ISVC_LABEL, condition, get_json
from testenv.node import pod_host
from testenv.served import READY_TIMEOUT, call

pytestmark = pytest.mark.usefixtures("kserve_runs")

NAME = "ppo"
WEIGHTS = {"rm-seq": 0.7, "rm-token": 0.3}
NORMALISED = "rm-token"
CANDIDATES = 4
# Five vLLMs and their gateways on 2 cores and 23 GiB: small CPU requests (they share the cores), 4 GiB each
# (vLLM's processes hold 3.0-3.5 GB with a small KV cache, which extraArgs sets: the tiny models need little).
VLLM = {"resources": {"gpus": 0, "cpu": "250m", "memory": "4Gi"}}
KV_CACHE = "--kv-cache-memory-bytes=128M"
GATEWAY = {"resources": {"cpu": "100m", "memory": "512Mi"}}  # the gateway refuses less
GATEWAY_PORT = 8080  # render/gateway_container.py
TOLERANCE = 1e-4  # the bound on the reference's and the critic's numbers


@dataclass(frozen=True)
class Models:
    causal: TinyModel
    critic: TinyModel
    uris: dict[str, str]  # causal, critic, sequence, token -> the URI a spec names


@pytest.fixture(scope="module")
def models(plane, model_uris, tmp_path_factory) -> Models:
    """The pipeline's own tiny models, made here and put on the storage server beside the reward models'."""
    made = pipeline_models(tmp_path_factory.mktemp("pipeline-models"))
    storage, port = node.storage_dir(plane.directory), plane.state.ports[node.STORAGE]
    uris = dict(model_uris)
    for kind, model in made.items():
        tar_model(model, storage / f"{kind}.tar.gz")
        uris[kind] = node.storage_url(node.host_address(), port, f"{kind}.tar.gz")
    return Models(made["causal"], made["critic"], uris)


def reward_model_spec(name: str, kind: str, uri: str) -> dict:
    spec = served.reward_model(name, kind, uri, model={"extraArgs": [KV_CACHE]}, gateway=GATEWAY)
    spec["spec"]["resources"] = dict(VLLM["resources"])
    return spec


def pipeline_spec(uris: dict[str, str]) -> dict:
    def role(uri: str | None = None) -> dict:
        spec: dict = {"gateway": GATEWAY, "serving": {"minReplicas": 1, "maxReplicas": 1}}
        if uri is not None:
            spec.update(model={"uri": uri, "dtype": "float32", "extraArgs": [KV_CACHE]}, **VLLM)
        return spec

    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RLHFPipeline",
        "metadata": {"name": NAME},
        "spec": {
            "actor": role(uris["causal"]),
            "reference": role(),  # the actor's model, resources and runtime
            "critic": role(uris["critic"]),
            "rewards": [
                {"name": name, "weight": weight, **({"normalise": "running"} if name == NORMALISED else {})}
                for name, weight in WEIGHTS.items()
            ],
            "flows": {"score": {}, "generateAndScore": {}, "bestOfN": {"candidates": CANDIDATES}},
            "graph": {"timeoutSeconds": 300},
        },
    }


@dataclass(frozen=True)
class Pipeline:
    namespace: str
    url: str  # the graph's status.url
    reward_urls: dict[str, str]  # RewardModel -> its status.url


def ready(cluster, namespace: str, kind: str, name: str) -> dict | None:
    found = get_json(cluster, kind, name, "-n", namespace)
    return found if (condition(found or {}) or {}).get("status") == "True" else None


@pytest.fixture(scope="module")
def pipeline(cluster, operator, runtimes, plane, models) -> Iterator[Pipeline]:
    """The two RewardModels and the pipeline, applied at once, until every one is Ready."""
    plane.load_images(("kserve-router",))
    with served.client_namespace(cluster) as namespace:
        manifests = [
            reward_model_spec("rm-seq", "sequence", models.uris["sequence"]),
            reward_model_spec("rm-token", "token", models.uris["token"]),
            pipeline_spec(models.uris),
        ]
        applied = time.monotonic()
        for manifest in manifests:
            cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
        try:
            stored = {
                name: wait_until(
                    f"{kind} {name} Ready",
                    lambda k=kind, n=name: ready(cluster, namespace, k, n),
                    timeout=READY_TIMEOUT,
                    interval=2,
                )
                for kind, name in (("rewardmodel", "rm-seq"), ("rewardmodel", "rm-token"), ("rlhfpipeline", NAME))
            }
        except AssertionError:
            raise AssertionError(served.what_runs(cluster, namespace)) from None
        ready_after = time.monotonic() - applied
        print(f"\nthe pipeline and its two RewardModels Ready {ready_after:.1f} s after the apply (5 vLLMs)")
        urls = {name: stored[name]["status"]["url"] for name in WEIGHTS}
        yield Pipeline(namespace, stored[NAME]["status"]["url"], urls)


def through_graph(cluster, pipeline: Pipeline, body: dict, timeout: float = 120) -> tuple[dict, float]:
    """POST ``body`` to the graph's URL from the client pod: (status and body, seconds taken)."""
    started = time.monotonic()
    answer = call(cluster, pipeline.namespace, pipeline.url, "/", body, timeout=timeout)
    return answer, time.monotonic() - started


def answered(cluster, pipeline: Pipeline, body: dict, flow: str) -> dict:
    answer, took = through_graph(cluster, pipeline, body)
    if answer["status"] != 200:
        raise AssertionError(f"{flow}: {answer}\n{served.container_logs(cluster, pipeline.namespace)}")
    print(f"{flow} through the router's pod: {took:.2f} s")
    return answer["body"]


def own_rewards(cluster, pipeline: Pipeline, request: dict) -> dict[str, list[float]]:
    """Each RewardModel's own answer to the request, at its URL (what the graph's part must equal)."""
    return {
        name: served.rewards(cluster, pipeline.namespace, url, "/v1/pipeline/reward", request)["rewards"]
        for name, url in pipeline.reward_urls.items()
    }


def assert_rows(got: list[list[float]], want: list[list[float]], what: str) -> float:
    worst = largest_diff(got, want)
    print(f"{what}: {sum(map(len, want))} response tokens, largest |diff| against transformers {worst:.2e}")
    assert worst <= TOLERANCE, (what, got, want)
    return worst


def assert_combined(scored: dict) -> None:
    """The combined reward is the weighted sum: the raw part, and the standardised part's z-score."""
    raw, z = scored["parts"]["rm-seq"], scored["normalised"][NORMALISED]
    weighted = [WEIGHTS["rm-seq"] * a + WEIGHTS[NORMALISED] * b for a, b in zip(raw, z, strict=True)]
    assert scored["rewards"] == pytest.approx(weighted)


def test_the_router_runs_as_a_pod_of_the_image_built_from_the_pinned_module(cluster, pipeline):
    pods = get_json(cluster, "pods", "-n", pipeline.namespace, "-l", f"serving.kserve.io/inferencegraph={NAME}")
    (router,) = pods["items"]
    (container,) = router["spec"]["containers"]
    assert container["image"] == images.ROUTER_IMAGE
    assert router["spec"]["nodeName"] == node.NAME
    assert all(status["ready"] for status in router["status"]["containerStatuses"])
    assert pipeline.url == f"http://{NAME}.{pipeline.namespace}.svc.cluster.local"
    roles = get_json(cluster, "pods", "-n", pipeline.namespace, "-l", ISVC_LABEL) or {"items": []}
    on_node = {pod["metadata"]["name"] for pod in roles["items"] if pod["spec"]["nodeName"] == node.NAME}
    print(f"router {router['metadata']['name']} ({container['image']}); {len(on_node)} role and reward pods")
    assert len(on_node) == 10  # five predictors (vLLM) and five gateways


def test_score_equals_transformers_and_each_reward_models_own_answer(cluster, pipeline, models):
    request = {"prompts": PROMPTS, "responses": RESPONSES}
    scored = answered(cluster, pipeline, request, "score (3 items)")
    assert (scored["prompts"], scored["responses"]) == (PROMPTS, RESPONSES)
    assert_rows(scored["logprobs"], expected_rows(models.causal, PROMPTS, RESPONSES, "logprobs"), "reference logprobs")
    assert_rows(scored["values"], expected_rows(models.critic, PROMPTS, RESPONSES, "values"), "critic values")
    own = own_rewards(cluster, pipeline, request)
    for name in WEIGHTS:
        assert_close(scored["parts"][name], own[name])
    assert_combined(scored)
    print(f"parts equal each RewardModel's own answer; rewards {[round(r, 4) for r in scored['rewards']]}")


def test_generate_and_score_scores_what_the_actor_generated(cluster, pipeline, models):
    prompts = PROMPTS[:2]
    scored = answered(cluster, pipeline, {"prompts": prompts, "max_tokens": 8}, "generate-and-score (2 prompts)")
    assert scored["prompts"] == prompts
    generated = scored["responses"]
    assert len(generated) == 2 and all(isinstance(text, str) for text in generated)
    print(f"the actor generated {generated}")
    assert_rows(scored["logprobs"], expected_rows(models.causal, prompts, generated, "logprobs"), "reference logprobs")
    assert_rows(scored["values"], expected_rows(models.critic, prompts, generated, "values"), "critic values")
    own = own_rewards(cluster, pipeline, {"prompts": prompts, "responses": generated})
    for name in WEIGHTS:
        assert_close(scored["parts"][name], own[name])
    assert_combined(scored)


def test_best_of_n_picks_the_candidate_with_the_highest_combined_reward(cluster, pipeline):
    prompts = PROMPTS[:2]
    body = {"best_of_n": True, "prompts": prompts, "max_tokens": 8}
    results = answered(cluster, pipeline, body, f"best-of-n ({len(prompts)} prompts x {CANDIDATES})")["results"]
    assert [result["prompt"] for result in results] == prompts
    for result in results:
        rewards = [candidate["reward"] for candidate in result["candidates"]]
        assert len(rewards) == CANDIDATES
        assert result["best"]["index"] == rewards.index(max(rewards))
        assert result["best"]["reward"] == max(rewards)
    print(f"best-of-n: best candidates {[r['best']['index'] for r in results]} of {CANDIDATES}")


# ---- a role's pod vanishing mid-request -------------------------------------------------------------------
#
# How long a role's pod vanishing under a request may leave the trainer waiting (docs/rlhfpipeline.md, "A role's
# pod vanishing mid-request"), whichever way the node takes the pod away. Its process killed while its network is
# still there resets or closes the connection: noticed at once. A pod whose network goes first, or is cut off,
# sends nothing more, and only TCP keep-alive ends the wait: the role's gateway's on its calls to vLLM
# (DEAD_PEER_S, 20 s) and KServe's router's on its calls to a gateway (Go's dialer: 30 s idle, then 9 probes
# 15 s apart). A deletion first waits out the pod's grace: the kubelet's least (2 s) forced; plain, the operator's
# for a predictor (PREDICTOR_GRACE_SECONDS, 10 s), Kubernetes' default (30 s) for a gateway. A call whose vLLM
# went away is held for the replacement KServe starts (the gateway's scale-from-zero wait, 150 s from the call's
# start), which answers it whole, or ends with 503.

CRITIC = f"{NAME}-critic"
SCORE = {"prompts": PROMPTS, "responses": RESPONSES}
FORCED_GRACE_S = 2  # the kubelet's least
# plain: the operator's for a predictor; a gateway's pod keeps Kubernetes' default
PLAIN_GRACE_S = {"predictor": PREDICTOR_GRACE_SECONDS, "transformer": 30}
ROUTER_DEAD_PEER_S = 30 + 9 * 15  # KServe v0.20's router: http.DefaultTransport's dialer, Go's probe defaults
HOLD_S = served.GATEWAY_HOLD_S  # a role's gateway: REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS' default
SLACK_S = 20  # kubectl and the client pod's exec, the kubelet's sync, the replacement's answer
INFLIGHT, HELD = "reward_gateway_inflight_requests", "reward_gateway_held_requests"
DELETIONS = ("force", "plain")


def bound_s(component: str, deletion: str | None) -> float:
    """The longest a request may wait after the role's ``component`` pod is deleted (``deletion``) or its link
    cut (None)."""
    grace = (FORCED_GRACE_S if deletion == "force" else PLAIN_GRACE_S[component]) if deletion else 0
    if component == "transformer":
        return grace + ROUTER_DEAD_PEER_S + SLACK_S
    return grace + DEAD_PEER_S + HOLD_S + SLACK_S


def role_pod(cluster, namespace: str, isvc: str, component: str) -> dict:
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={isvc},component={component}")
    (pod,) = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return pod


def gateway_sample(cluster, namespace: str, isvc: str, name: str) -> float:
    """A sample of the role's gateway's metrics (``reward_gateway_inflight_requests``, ``_held_requests``), read
    at its pod's IP from the host."""
    pod = role_pod(cluster, namespace, isvc, "transformer")
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{GATEWAY_PORT}/metrics", timeout=5) as answer:
        return sample_sum(answer.read().decode(), name)


def scores(cluster, pipeline: Pipeline) -> bool:
    """Whether the score flow answers 200 now: a probe that outwaits a role's gateway holding it for a replaced
    vLLM (no answer within that is a "not yet" too)."""
    answer, _ = through_graph(cluster, pipeline, SCORE, timeout=served.PROBE_TIMEOUT_S)
    return answer["status"] == 200


def answering(cluster, pipeline: Pipeline) -> float:
    """Once the score flow answers 200 again after a pod was taken away: when (epoch seconds)."""
    wait_until("the score flow answering again", lambda: scores(cluster, pipeline), timeout=READY_TIMEOUT, interval=5)
    return time.time()


def assert_an_error(answer: dict) -> None:
    """A 5xx whose body is an error, with no rewards in it."""
    body = answer["body"] if isinstance(answer["body"], str) else json.dumps(answer["body"])
    assert answer["status"] >= 500 and "error" in body and "rewards" not in body, answer


def assert_whole_or_an_error(answer: dict, models: Models, what: str) -> None:
    """Never a number the pod left unfinished: the critic's values whole (a replacement's, or the call sent
    again once its vLLM was back), equal to transformers', or an error."""
    if answer["status"] == 200:
        got = answer["body"]["values"]
        assert_rows(got, expected_rows(models.critic, PROMPTS, RESPONSES, "values"), f"critic values ({what})")
    else:
        assert_an_error(answer)


@dataclass
class Vanished:
    answer: dict  # the graph's, from the client pod: status and body
    into: float  # seconds into the request when the pod vanished
    after: float  # seconds from then to the answer
    teardown: pod_host.Teardown | None  # a deletion's order: the process first, or the link
    at: float  # when the pod vanished, epoch seconds (for the pods' own timestamps)

    def report(self, what: str) -> str:
        order = f"; teardown: {self.teardown}" if self.teardown else ""
        return (f"{what} {self.into:.1f} s into the request: the graph answered {self.answer['status']} "
                f"{self.after:.1f} s after{order}: {json.dumps(self.answer['body'])[:200]}")  # fmt: skip


class HeldRequest:
    """A score request through the graph, waiting at the critic's vLLM, whose engine is stopped."""

    def __init__(self, cluster, pipeline: Pipeline, timeout: float):
        self.cluster, self.namespace = cluster, pipeline.namespace
        self.vllm = role_pod(cluster, self.namespace, CRITIC, "predictor")["metadata"]["name"]
        self.answers: list[tuple[dict, float]] = []
        self.timeout = timeout
        self.sender = threading.Thread(target=lambda: self.answers.append(through_graph(cluster, pipeline, SCORE,
                                                                                        timeout)))  # fmt: skip
        self.sent = self.vanished = 0.0
        self.vanished_at = 0.0  # the same moment as ``vanished``, as epoch seconds (the pods' timestamps)

    def vanish(self) -> None:
        """Mark now as the moment the test takes the pod (or its process, or its link) away."""
        self.vanished, self.vanished_at = time.monotonic(), time.time()

    def engine(self, signal: str) -> None:
        pod_host.signal_engine(self.cluster, self.namespace, self.vllm, signal)

    def send(self) -> None:
        self.engine("STOP")
        self.sent = time.monotonic()
        self.sender.start()
        wait_until("the request held at the critic's gateway",
                   lambda: gateway_sample(self.cluster, self.namespace, CRITIC, INFLIGHT) >= 1)  # fmt: skip

    def answer(self, teardown: pod_host.Teardown | None = None) -> Vanished:
        """The graph's answer, timed from ``self.vanished`` (when the test took the pod away)."""
        self.sender.join(timeout=self.timeout + 30)
        assert self.answers, "no answer through the graph"
        answer, took = self.answers[0]
        return Vanished(answer, self.vanished - self.sent, self.sent + took - self.vanished, teardown, self.vanished_at)


@contextmanager
def request_held_at_the_critic(cluster, pipeline: Pipeline, timeout: float) -> Iterator[HeldRequest]:
    """A score request waiting at the critic's vLLM once the critic's gateway has it (``timeout``: the client's
    wait); the engine goes on afterwards. Starts once the flow answers (a pod replaced before is up again)."""
    wait_until("the score flow answering before the kill", lambda: scores(cluster, pipeline),
               timeout=READY_TIMEOUT, interval=5)  # fmt: skip
    held = HeldRequest(cluster, pipeline, timeout)
    try:
        held.send()
        yield held
    finally:
        held.engine("CONT")


def deleted_mid_request(cluster, pipeline: Pipeline, component: str, deletion: str) -> Vanished:
    """The critic's ``component`` pod (predictor: vLLM; transformer: its gateway) deleted (``deletion``) while
    the request waits at its vLLM; the host watches whether its process or its link went first."""
    namespace = pipeline.namespace
    with request_held_at_the_critic(cluster, pipeline, bound_s(component, deletion) + SLACK_S) as held:
        victim = role_pod(cluster, namespace, CRITIC, component)
        pid = pod_host.container_pid(victim, "kserve-container")
        teardown = pod_host.Teardown(pid, pod_host.host_link(pid))
        force = ("--grace-period=0", "--force") if deletion == "force" else ()
        teardown.start()
        held.vanish()
        cluster.kubectl("delete", "pod", "-n", namespace, victim["metadata"]["name"], "--wait=false", *force)
        vanished = held.answer(teardown)
        teardown.stop()
    return vanished


def replacement_timeline(cluster, namespace: str, since: float) -> dict[str, float]:
    """Where the critic's replacement vLLM spent the time from its pod's deletion (``since``, epoch seconds) to
    the flow answering: its pod created, the kubelet finding its image, the download, vLLM started and ready."""
    timeline = wake.predictor_timeline(cluster, namespace, CRITIC, since)
    pod = wake.pods(cluster, namespace, CRITIC, "predictor")[0]["metadata"]["name"]
    events = get_json(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}") or {}
    for event in events.get("items", []):
        stamp = event.get("lastTimestamp") or event.get("eventTime")
        if event.get("reason") == "Pulled" and "kserve-container" in event["involvedObject"].get("fieldPath", ""):
            timeline["vLLM's image present (the kubelet)"] = wake.kubernetes_time(stamp)
    return timeline


@pytest.mark.parametrize("deletion", DELETIONS)
def test_a_roles_vllm_deleted_mid_request_is_answered_whole_or_with_an_error_within_the_bound(
    cluster, pipeline, models, deletion
):
    """However the node tears vLLM's pod down, never a number it left unfinished: its API server answers its
    dying engine's 500 (the gateway's 502, passed on by the router); or the connection is reset, or goes
    silent (noticed by the gateway's keep-alive), and the critic's gateway holds the request for the
    replacement KServe starts, whose numbers come back whole, or answers 503 when the hold is spent."""
    vanished = deleted_mid_request(cluster, pipeline, "predictor", deletion)
    print(vanished.report(f"critic's vLLM pod deleted ({deletion})"))
    assert_whole_or_an_error(vanished.answer, models, "replacement")
    assert vanished.after <= bound_s("predictor", deletion), vanished
    # the recovery: from the deletion to the flow answering again (vLLM's ready line is there by then), and where
    # the replacement spent it
    answered_again = answering(cluster, pipeline)
    timeline = {**replacement_timeline(cluster, pipeline.namespace, vanished.at), "the flow answering": answered_again}
    steps = ", ".join(f"{event} {at - vanished.at:.1f} s" for event, at in sorted(timeline.items(), key=lambda e: e[1]))
    print(f"the critic's replacement ({deletion}), from the deletion: {steps}")


ENGINE_DEATH_S = SLACK_S  # vLLM's API server answers its dead engine's 500 at once: the gateway's 502, the router's


@pytest.mark.parametrize("first", ["engine", "api-server"])
def test_a_roles_vllm_whose_processes_die_mid_request_in_either_order_is_answered_within_its_bound(
    cluster, pipeline, models, first
):
    """The two orders in which a vLLM pod's processes go, each made to happen rather than left to the kubelet's
    teardown. Its engine first: the API server answers the dead engine's 500 at once (the critic's gateway's 502,
    passed on by the router), then exits, and the kubelet restarts its container. Its API server first (the
    container's first process, killed from the host): the container goes with it, the gateway's connection
    closes, and the gateway holds the request until the restarted vLLM answers it whole, or its hold ends in
    503."""
    namespace = pipeline.namespace
    with request_held_at_the_critic(cluster, pipeline, HOLD_S + 2 * SLACK_S) as held:
        api_server = pod_host.container_pid(role_pod(cluster, namespace, CRITIC, "predictor"), "kserve-container")
        held.vanish()
        if first == "engine":
            held.engine("KILL")
        else:
            os.kill(api_server, signal.SIGKILL)
        vanished = held.answer()
    print(vanished.report(f"critic's vLLM, its {first} killed first"))
    if first == "engine":
        assert_an_error(vanished.answer)
        assert vanished.after <= ENGINE_DEATH_S, vanished
    else:
        assert_whole_or_an_error(vanished.answer, models, "the restarted vLLM")
        assert vanished.after <= HOLD_S + SLACK_S, vanished
    print(f"the score flow answered again {answering(cluster, pipeline) - vanished.at:.1f} s after the kill")


@pytest.mark.parametrize("deletion", DELETIONS)
def test_a_roles_gateway_deleted_mid_request_ends_the_flow_with_the_routers_error_within_the_bound(
    cluster, pipeline, deletion
):
    vanished = deleted_mid_request(cluster, pipeline, "transformer", deletion)
    print(vanished.report(f"critic's gateway pod deleted ({deletion})"))
    assert_an_error(vanished.answer)
    assert vanished.after <= bound_s("transformer", deletion), vanished

    # KServe's Deployment starts another gateway; the flow answers again once it is Ready
    print(f"the score flow answered again {answering(cluster, pipeline) - vanished.at:.1f} s after the deletion")


def test_a_roles_vllm_cut_off_mid_request_is_noticed_by_its_gateway_and_the_call_sent_again(cluster, pipeline, models):
    """vLLM's pod cut off the network under a call (its link down: no reset, no FIN, as when its node drops
    off): the critic's gateway notices by keep-alive within DEAD_PEER_S and holds the request; once the link is
    back it sends the call again, and the answer is whole."""
    namespace = pipeline.namespace
    with request_held_at_the_critic(cluster, pipeline, bound_s("predictor", None) + SLACK_S) as held:
        pid = pod_host.container_pid(role_pod(cluster, namespace, CRITIC, "predictor"), "kserve-container")
        with pod_host.cut_link(pod_host.host_link(pid)):
            held.vanish()
            wait_until(
                "the critic's gateway holding the request for its vLLM",
                lambda: gateway_sample(cluster, namespace, CRITIC, HELD) >= 1,
                timeout=DEAD_PEER_S + SLACK_S,
            )
            noticed = time.monotonic() - held.vanished
        held.engine("CONT")  # the call sent again once vLLM is back is answered
        vanished = held.answer()
    print(vanished.report("critic's vLLM pod cut off") + f" (its gateway noticed {noticed:.1f} s after the cut)")
    assert noticed <= DEAD_PEER_S + 5
    assert_whole_or_an_error(vanished.answer, models, "the call sent again")


def test_a_roles_gateway_cut_off_mid_request_ends_the_flow_with_the_routers_error_within_its_keep_alive(
    cluster, pipeline
):
    """The critic's gateway cut off the network under the request: nothing tells the router, whose own TCP
    keep-alive (KServe's, not settable) ends the wait: its 500 within ROUTER_DEAD_PEER_S, never a hang for the
    graph's whole timeout."""
    namespace = pipeline.namespace
    with request_held_at_the_critic(cluster, pipeline, bound_s("transformer", None) + SLACK_S) as held:
        pid = pod_host.container_pid(role_pod(cluster, namespace, CRITIC, "transformer"), "kserve-container")
        with pod_host.cut_link(pod_host.host_link(pid)):
            held.vanish()
            vanished = held.answer()
    print(vanished.report("critic's gateway pod cut off"))
    assert_an_error(vanished.answer)
    assert vanished.after <= bound_s("transformer", None), vanished
    answering(cluster, pipeline)
