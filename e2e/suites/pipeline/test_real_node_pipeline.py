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
with the highest; a role whose pod is killed mid-request ends the flow with an error, never a number.

`make pipeline-real` runs it; not in `make test`: five cold starts of vLLM side by side on the node's 2
cores (about 16 GB). Figures (time to Ready, each flow's time, the error, the recovery) are printed.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from reward_testing.pipeline_cases import PROMPTS, RESPONSES, expected_rows, largest_diff, pipeline_models
from reward_testing.prometheus_text import sample_sum
from reward_testing.scoring_cases import assert_close
from reward_testing.tiny_models import TinyModel, tar_model
from reward_testing.waiting import wait_until
from testenv import images, node, served
from testenv.helpers import ISVC_LABEL, condition, get_json
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


# ---- a role killed mid-request ---------------------------------------------------------------------------

# Run in vLLM's container: send a signal (STOP, CONT) to every process but the API server (PID 1) and this one.
# Stopped, the engine holds a request the API server took: a signal, not a sleep, keeps it at the role.
SIGNAL_ENGINE = (
    "import os, signal, sys\n"
    "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    if pid not in (1, os.getpid()):\n"
    "        try: os.kill(pid, getattr(signal, 'SIG' + sys.argv[1]))\n"
    "        except ProcessLookupError: pass\n"
)
CRITIC = f"{NAME}-critic"
SCORE = {"prompts": PROMPTS, "responses": RESPONSES}
# the client's wait: the critic's replacement starts (about a minute) within the gateway's hold (150 s)
HELD_TIMEOUT = 280


def role_pod(cluster, namespace: str, isvc: str, component: str) -> dict:
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={isvc},component={component}")
    (pod,) = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return pod


def gateway_inflight(cluster, namespace: str, isvc: str) -> float:
    """reward_gateway_inflight_requests of the role's gateway pod, read at its IP from the host."""
    pod = role_pod(cluster, namespace, isvc, "transformer")
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{GATEWAY_PORT}/metrics", timeout=5) as answer:
        return sample_sum(answer.read().decode(), "reward_gateway_inflight_requests")


def scores(cluster, pipeline: Pipeline) -> bool:
    """Whether the score flow answers 200 now."""
    answer, _ = through_graph(cluster, pipeline, SCORE)
    return answer["status"] == 200


def assert_an_error(answer: dict) -> None:
    """A 5xx whose body is an error, with no rewards in it."""
    body = answer["body"] if isinstance(answer["body"], str) else json.dumps(answer["body"])
    assert answer["status"] >= 500 and "error" in body and "rewards" not in body, answer


def killed_mid_request(cluster, pipeline: Pipeline, component: str) -> tuple[dict, float, float]:
    """Score through the graph while the critic's engine is stopped; once the critic's gateway holds the request,
    force-delete the critic's ``component`` pod (predictor: vLLM; transformer: its gateway), and let the engine go
    on where it still runs. Returns the graph's answer, the seconds into the request of the kill, and the
    seconds from the kill to the answer. Starts once the flow answers (a pod replaced before is up again)."""
    wait_until("the score flow answering before the kill", lambda: scores(cluster, pipeline),
               timeout=READY_TIMEOUT, interval=5)  # fmt: skip
    namespace = pipeline.namespace
    vllm = role_pod(cluster, namespace, CRITIC, "predictor")["metadata"]["name"]

    def engine(signal: str) -> None:
        cluster.kubectl("exec", "-n", namespace, vllm, "-c", "kserve-container", "--",
                        "python3", "-c", SIGNAL_ENGINE, signal)  # fmt: skip

    engine("STOP")
    answers: list[tuple[dict, float]] = []
    sender = threading.Thread(target=lambda: answers.append(through_graph(cluster, pipeline, SCORE, HELD_TIMEOUT)))
    sent = time.monotonic()
    sender.start()
    wait_until("the request held at the critic's gateway", lambda: gateway_inflight(cluster, namespace, CRITIC) >= 1)
    victim = role_pod(cluster, namespace, CRITIC, component)["metadata"]["name"]
    killed = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", namespace, victim, "--grace-period=0", "--force")
    sender.join(timeout=HELD_TIMEOUT + 30)
    if component != "predictor":  # the stopped engine's pod lives on: it goes on
        engine("CONT")
    assert answers, "no answer through the graph"
    return answers[0][0], killed - sent, time.monotonic() - killed


def test_a_roles_vllm_killed_mid_request_never_answers_a_number_it_did_not_finish(cluster, pipeline, models):
    """Two outcomes, by which of vLLM's processes the kubelet's kill reaches first: the API server answers
    its dying engine's 500 (the gateway's 502, passed on by the router); or the connection is reset unanswered,
    the critic's gateway holds the request (as for a predictor away) and sends it again to the replacement
    KServe starts, whose numbers come back whole. Never a number the killed pod left unfinished."""
    answer, into, after = killed_mid_request(cluster, pipeline, "predictor")
    print(f"critic's vLLM pod killed {into:.1f} s into the request: the graph answered {answer['status']} "
          f"{after:.1f} s after the kill: {json.dumps(answer['body'])[:200]}")  # fmt: skip
    if answer["status"] == 200:  # held for the replacement, and answered by it in full
        got = answer["body"]["values"]
        assert_rows(got, expected_rows(models.critic, PROMPTS, RESPONSES, "values"), "critic values (replacement)")
    else:
        assert_an_error(answer)


def test_a_roles_gateway_killed_mid_request_ends_the_flow_with_the_routers_error_never_a_number(cluster, pipeline):
    answer, into, after = killed_mid_request(cluster, pipeline, "transformer")
    print(f"critic's gateway pod killed {into:.1f} s into the request: the graph answered {answer['status']} "
          f"{after:.1f} s after the kill: {json.dumps(answer['body'])[:300]}")  # fmt: skip
    assert_an_error(answer)

    # KServe's Deployment starts another gateway; the flow answers again once it is Ready
    answered_at = time.monotonic()
    wait_until("the score flow answering again", lambda: scores(cluster, pipeline), timeout=READY_TIMEOUT, interval=5)
    again = after + time.monotonic() - answered_at
    print(f"the score flow answered again {again:.1f} s after the kill (a new critic gateway)")
