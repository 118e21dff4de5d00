"""An RLHFPipeline through the operator, KServe's own controller and its webhooks.

Every child goes through KServe's admission (the roles' InferenceServices and the
InferenceGraph are defaulted and validated by its webhooks), KServe's controller
makes their Deployments (the router's among them) and writes their status, and
kwok runs their pods. The pipeline's Ready is read from those reports alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from reward_testing.gateway_fixtures import rendered_gateway
from reward_testing.paths import REPO
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until
from testenv import builds
from testenv.helpers import condition, get_json

pytestmark = pytest.mark.usefixtures("kserve_runs")  # skipped where the cluster has no KServe

REWARD_MODEL_SAMPLES = {
    "skywork-rm": "rewardmodel-sequence-standard.yaml",
    "internlm2-rm": "rewardmodel-token-standard.yaml",
}
SAMPLE = yaml.safe_load((REPO / "manifests/samples/rlhfpipeline-ppo.yaml").read_text())
# The sample's judge reward (correctness-judge) is left out: every RewardModel the graph calls is served here by a
# local gateway on a fake pooling vLLM, which has no judge's chat completions. A judge as a pipeline's reward step
# is the gateway's unit tests' (test_gateway_judge*), on a fake vLLM that answers as a judge.
SAMPLE["spec"]["rewards"] = [reward for reward in SAMPLE["spec"]["rewards"] if reward["name"] in REWARD_MODEL_SAMPLES]
ROLES = ("actor", "reference", "critic")


def apply(cluster, namespace: str, manifest: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def apply_reward_models(cluster, namespace: str, *names: str) -> None:
    for name in names:
        sample = yaml.safe_load((REPO / "manifests/samples" / REWARD_MODEL_SAMPLES[name]).read_text())
        # The fake vLLM scores texts: it neither tokenizes conversations nor scores token ids, which an
        # InternLM2 reward token needs (test_real_vllm_reward_token.py covers that against the real one).
        sample["spec"]["model"].pop("rewardTokenId", None)
        apply(cluster, namespace, sample)


def apply_pipeline(cluster, namespace: str, manifest: dict | None = None) -> dict:
    apply(cluster, namespace, manifest or SAMPLE)
    return get_json(cluster, "rlhfpipeline", "ppo", "-n", namespace)


def pipeline(cluster, namespace: str) -> dict | None:
    return get_json(cluster, "rlhfpipeline", "ppo", "-n", namespace)


def wait_for_pipeline(cluster, namespace: str, status: str, reason: str, timeout: float = 180) -> dict:
    """Ready with ``status`` and ``reason`` for the pipeline's current generation."""

    def reached():
        obj = pipeline(cluster, namespace)
        found = condition(obj) or {}
        current = found.get("observedGeneration") == obj["metadata"]["generation"]
        return obj if current and (found.get("status"), found.get("reason")) == (status, reason) else None

    last = {}

    def reached_noting():
        last["seen"] = (pipeline(cluster, namespace) or {}).get("status")
        return reached()

    try:
        return wait_until(f"pipeline Ready={status} reason {reason}", reached_noting, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; last status: {json.dumps(last.get('seen'), indent=1)}") from None


def owned_by(obj: dict, owner: dict) -> bool:
    uid = owner["metadata"]["uid"]
    return any(ref["uid"] == uid and ref.get("controller") for ref in obj["metadata"]["ownerReferences"])


def router_graph(cluster, namespace: str, graph: str = "ppo") -> dict:
    """The graph KServe's controller hands its router: the --graph-json argument of the Deployment it made."""

    def deployment():
        found = get_json(cluster, "deployment", graph, "-n", namespace)
        return found if found and found["spec"]["template"]["spec"]["containers"] else None

    container = wait_until("the router's Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
    arguments = container.get("args", [])
    return json.loads(arguments[arguments.index("--graph-json") + 1])


@pytest.fixture
def ready_pipeline(cluster, namespace, operator) -> dict:
    apply_reward_models(cluster, namespace, *REWARD_MODEL_SAMPLES)
    apply_pipeline(cluster, namespace)
    return wait_for_pipeline(cluster, namespace, "True", "RolesReady")


def test_a_pipeline_is_ready_when_kserve_reports_every_role_and_the_router_ready(cluster, namespace, ready_pipeline):
    status = ready_pipeline["status"]
    types = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert types["ActorReady"][0] == types["ReferenceReady"][0] == types["CriticReady"][0] == "True"
    assert types["RewardsReady"] == ("True", "RewardModelsReady")
    assert types["GraphReady"] == ("True", "InferenceGraphReady")
    assert status["url"] == f"http://ppo.{namespace}.svc.cluster.local"
    assert status["inferenceGraph"] == "ppo"
    assert status["inferenceServices"] == {role: f"ppo-{role}" for role in ROLES}

    for role in ROLES:
        isvc = get_json(cluster, "inferenceservice", f"ppo-{role}", "-n", namespace)
        assert owned_by(isvc, ready_pipeline), role
        # KServe's own report, not ours: its controller made the predictor and the gateway in front
        assert (condition(isvc) or {}).get("status") == "True", (role, isvc.get("status"))
        env = {e["name"]: e.get("value") for e in isvc["spec"]["transformer"]["containers"][0]["env"]}
        assert env["REWARD_GATEWAY_PIPELINE_ROLE"] == role
    graph = get_json(cluster, "inferencegraph", "ppo", "-n", namespace)
    assert owned_by(graph, ready_pipeline)
    assert graph["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"

    # the graph the router is started with is the one rendered: KServe's admission and controller kept
    # every node and step (a pruned field would change the flows)
    assert router_graph(cluster, namespace)["nodes"] == graph["spec"]["nodes"]
    assert set(graph["spec"]["nodes"]) == {
        "root", "score", "score-parts", "generate-and-score", "best-of-n", "best-of-n-parts",
    }  # fmt: skip

    columns = cluster.kubectl("get", "rlhfpipeline", "ppo", "-n", namespace).stdout.split("\n")
    header, row = columns[0].split(), columns[1].split()
    assert header[:7] == ["NAME", "READY", "ACTOR", "REFERENCE", "CRITIC", "REWARDS", "GRAPH"], header
    assert row[:7] == ["ppo", "True", "True", "True", "True", "True", "True"], row


def test_changing_one_role_changes_only_its_inference_service(cluster, namespace, ready_pipeline):
    before = {
        role: get_json(cluster, "inferenceservice", f"ppo-{role}", "-n", namespace)["metadata"]["generation"]
        for role in ROLES
    }
    patch = {"spec": {"critic": {"model": {"maxModelLen": 4096}}}}
    cluster.kubectl("patch", "rlhfpipeline", "ppo", "-n", namespace, "--type=merge", "-p", json.dumps(patch))

    def critic_changed():
        isvc = get_json(cluster, "inferenceservice", "ppo-critic", "-n", namespace)
        return isvc if "--max-model-len=4096" in isvc["spec"]["predictor"]["model"]["args"] else None

    wait_until("the critic's InferenceService with the new length", critic_changed)
    wait_for_pipeline(cluster, namespace, "True", "RolesReady")
    after = {
        role: get_json(cluster, "inferenceservice", f"ppo-{role}", "-n", namespace)["metadata"]["generation"]
        for role in ROLES
    }
    assert after["critic"] == before["critic"] + 1
    assert (after["actor"], after["reference"]) == (before["actor"], before["reference"])


def test_a_missing_reward_model_holds_the_graph_with_a_clear_condition_until_it_exists(cluster, namespace, operator):
    apply_reward_models(cluster, namespace, "skywork-rm")  # internlm2-rm, named by the pipeline, is not there
    apply_pipeline(cluster, namespace)
    held = wait_for_pipeline(cluster, namespace, "False", "RewardModelNotFound")
    rewards = condition(held, "RewardsReady")
    assert rewards["status"] == "False" and rewards["reason"] == "RewardModelNotFound"
    expected = f"spec.rewards[1]: RewardModel internlm2-rm not found in namespace {namespace}"
    assert rewards["message"].startswith(expected), rewards
    assert condition(held, "GraphReady")["reason"] == "AwaitingRewardModels"
    assert get_json(cluster, "inferencegraph", "ppo", "-n", namespace) is None
    # the roles themselves are not held: their models load meanwhile
    for role in ROLES:
        assert get_json(cluster, "inferenceservice", f"ppo-{role}", "-n", namespace) is not None

    # one Warning for the missing RewardModel (KServe's own reasons for a role not Ready yet may come before it),
    # posted just after the status
    about = "involvedObject.kind=RLHFPipeline,involvedObject.name=ppo"

    def missing_events():
        events = get_json(cluster, "events", "-n", namespace, "--field-selector", about)["items"]
        return [e for e in events if e["reason"] == "RewardModelNotFound"]

    missing = wait_until("the RewardModelNotFound event", missing_events)
    assert [(e["type"], e["count"]) for e in missing] == [("Warning", 1)], missing
    assert "RewardModel internlm2-rm not found" in missing[0]["message"]

    apply_reward_models(cluster, namespace, "internlm2-rm")
    wait_for_pipeline(cluster, namespace, "True", "RolesReady")
    assert get_json(cluster, "inferencegraph", "ppo", "-n", namespace) is not None


def test_deleting_the_pipeline_collects_its_children_and_leaves_the_reward_models(cluster, namespace, ready_pipeline):
    cluster.kubectl("delete", "rlhfpipeline", "ppo", "-n", namespace, "--wait=true")

    def collected():
        left = [
            f"inferenceservice/ppo-{role}"
            for role in ROLES
            if get_json(cluster, "inferenceservice", f"ppo-{role}", "-n", namespace)
        ]
        if get_json(cluster, "inferencegraph", "ppo", "-n", namespace):
            left.append("inferencegraph/ppo")
        return not left

    wait_until("the garbage collector to remove the pipeline's children", collected, timeout=90)
    for name in REWARD_MODEL_SAMPLES:
        assert get_json(cluster, "rewardmodel", name, "-n", namespace) is not None, name


# ---- the flows through KServe's router ----------------------------------------------------------------
# The router is KServe's cmd/router built from the pinned module, started with the graph its controller
# derived (the --graph-json of the Deployment it made); each role's gateway is `python -m reward_gateway`
# with the environment the operator rendered into its InferenceService, in front of a fake vLLM that
# speaks the completions or pooling shapes. Nothing resolves cluster names here, so the graph's service
# URLs are pointed at those local processes: the only change made to KServe's graph.

ROUTER_PORT = 8080  # cmd/router has no port flag


def localised(graph: dict, addresses: dict[str, str]) -> dict:
    """The graph with each in-cluster gateway host replaced by the local address serving it."""
    text = json.dumps(graph)
    for host, address in addresses.items():
        text = text.replace(f"http://{host}/", f"{address}/")
    assert ".svc.cluster.local" not in text, text
    return json.loads(text)


def router_binary() -> Path:
    binary = builds.bin_dir() / "kserve-router"
    if not binary.is_file():
        pytest.skip(f"KServe's router is not built ({binary}): python -m testenv build --only kserve")
    return binary


@contextmanager
def running_router(graph: dict, log_path: Path, propagate: str | None = None) -> Iterator[str]:
    """KServe's router on its fixed port with ``graph`` until the block ends; yields its URL. ``propagate``:
    the headers it forwards to the steps (KServe sets PROPAGATE_HEADERS from the cluster's
    router.headers.propagate; none by default)."""
    env = {k: v for k, v in os.environ.items() if k != "PROPAGATE_HEADERS"}
    if propagate is not None:
        env["PROPAGATE_HEADERS"] = propagate
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(router_binary()), "--graph-json", json.dumps(graph)], stdout=log, stderr=subprocess.STDOUT, env=env
        )

    def ready() -> bool:
        assert process.poll() is None, f"the router exited:\n{log_path.read_text()}"
        try:
            return httpx.get(f"http://127.0.0.1:{ROUTER_PORT}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until("KServe's router ready (/readyz)", ready, timeout=30, interval=0.1)
        yield f"http://127.0.0.1:{ROUTER_PORT}"
    finally:
        process.kill()  # SIGTERM would hold it 30 s (its drain for a Service's endpoints to catch up)
        process.wait()


TOKEN = "pipeline-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def local_pipeline(cluster, namespace, ready_pipeline, run_gateway, backend, candidate_backend, tmp_path):
    """Every gateway the graph calls as a local process with its rendered environment: the roles' on
    ``backend`` (a fake vLLM answering completions, tokenize and pooling), skywork-rm's on ``backend``
    and asking for a bearer token (as gateway.authSecretRef renders it), internlm2-rm's on
    ``candidate_backend`` (raw scores twice as large, so the two parts differ).
    Returns {the graph's host for it: its local URL}, keyed also by role and RewardModel name."""
    candidate_backend.scale = 2.0
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    hosts: dict[str, str] = {}
    for isvc_name, upstream in (
        *((f"ppo-{role}", backend) for role in ROLES),
        ("skywork-rm", backend),
        ("internlm2-rm", candidate_backend),
    ):
        isvc = get_json(cluster, "inferenceservice", isvc_name, "-n", namespace)
        env, args = rendered_gateway(isvc)
        port = free_port()
        env.update(
            REWARD_GATEWAY_UPSTREAM_URL=upstream.url,
            REWARD_GATEWAY_PORT=str(port),
            REWARD_GATEWAY_MEMORY_LIMIT_BYTES=str(2 * 2**30),  # the downward API's, in a pod
        )
        if isvc_name == "skywork-rm":
            env["REWARD_GATEWAY_AUTH_TOKEN_FILE"] = str(tokens)
        url, _ = run_gateway(args, env, port, env["REWARD_GATEWAY_MODEL_NAME"])
        hosts[f"{isvc_name}-transformer.{namespace}.svc.cluster.local"] = url
        hosts[isvc_name] = url
    return hosts


def post(url: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(url, json=body, timeout=60, headers=AUTH if headers is None else headers)


def direct(url: str, route: str, body: dict) -> dict:
    """One gateway's answer to one step, called without the router: what the flow's parts must equal."""
    answer = post(f"{url}/v1/pipeline/{route}", body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_each_flow_of_the_graph_kserve_derives_answers_through_kserves_router(
    cluster, namespace, local_pipeline, backend, candidate_backend, tmp_path
):
    graph = localised(router_graph(cluster, namespace), {h: u for h, u in local_pipeline.items() if "." in h})
    skywork, internlm2 = local_pipeline["skywork-rm"], local_pipeline["internlm2-rm"]
    # Authorization reaches the reward models only where the cluster's router.headers.propagate lists it
    with running_router(graph, tmp_path / "router.log", propagate="Authorization") as router:
        # score: every part in parallel, combined by the sample's weights (skywork-rm raw, internlm2-rm normalised)
        request = {"prompts": ["2+2=", "Name a prime.", "Say hi."], "responses": [" 4", " 7 is one", " hi there"]}
        answer = post(router, request)
        assert answer.status_code == 200, answer.text
        scored = answer.json()
        assert (scored["prompts"], scored["responses"]) == (request["prompts"], request["responses"])
        assert scored["parts"] == {
            "skywork-rm": pytest.approx(direct(skywork, "reward", request)["rewards"]),
            "internlm2-rm": pytest.approx(direct(internlm2, "reward", request)["rewards"]),
        }
        assert scored["parts"]["internlm2-rm"] != pytest.approx(scored["parts"]["skywork-rm"])
        normalised = scored["normalised"]["internlm2-rm"]
        assert sum(normalised) == pytest.approx(0, abs=1e-9)  # the first batch, standardised by its own figures
        weight = {reward["name"]: reward["weight"] for reward in SAMPLE["spec"]["rewards"]}
        weighted = [
            weight["skywork-rm"] * raw + weight["internlm2-rm"] * z
            for raw, z in zip(scored["parts"]["skywork-rm"], normalised, strict=True)
        ]
        assert scored["rewards"] == pytest.approx(weighted)
        assert scored["values"] == direct(local_pipeline["ppo-critic"], "values", request)["values"]
        assert scored["logprobs"] == direct(local_pipeline["ppo-reference"], "logprobs", request)["logprobs"]
        print(f"\nscore through the router: rewards {[round(r, 4) for r in scored['rewards']]}")

        # generate-and-score: the actor's completions, then the score node with them
        request = {"prompts": ["Tell me a joke.", "Ask me a question."], "max_tokens": 4}
        answer = post(router, request)
        assert answer.status_code == 200, answer.text
        generated = direct(local_pipeline["ppo-actor"], "generate", request)
        assert answer.json()["responses"] == generated["responses"]
        assert answer.json()["parts"]["skywork-rm"] == pytest.approx(direct(skywork, "reward", generated)["rewards"])

        # best-of-n: the sample's 8 candidates per prompt, scored by the reward models, the best chosen
        answer = post(router, {"best_of_n": True, "prompts": ["Tell me a joke.", "Ask me a question."]})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert [r["prompt"] for r in results] == ["Tell me a joke.", "Ask me a question."]
        for result in results:
            rewards = [candidate["reward"] for candidate in result["candidates"]]
            assert len(rewards) == 8
            assert result["best"]["index"] == rewards.index(max(rewards))
            assert result["best"]["reward"] == max(rewards)
        print(f"best-of-n through the router: best candidates {[r['best']['index'] for r in results]} of 8")

        # a request matching no flow: the router's own 404
        assert post(router, {"texts": ["x"]}).status_code == 404

        # a failing reward model ends the flow with its status and message, as the router returns them
        candidate_backend.misbehaviour = "429"
        request = {"prompts": ["2+2="], "responses": [" 4"]}
        failing = post(f"{internlm2}/v1/pipeline/reward", request)
        assert failing.status_code == 503, failing.text
        answer = post(router, request)
        print(f"a failing reward model through the router: {answer.status_code} {answer.text[:300]}")
        assert answer.status_code == failing.status_code
        assert failing.json()["error"] in answer.text
        candidate_backend.misbehaviour = None

    # KServe's default: no header forwarded, so a reward model that asks for a token refuses the graph
    with running_router(graph, tmp_path / "router-default.log") as router:
        answer = post(router, request)
        print(f"a token-protected reward model behind a router that forwards no headers: {answer.status_code}")
        assert answer.status_code == 401, answer.text
