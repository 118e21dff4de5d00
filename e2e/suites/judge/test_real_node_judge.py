"""A generative judge on the real node, through its RewardModel's ``status.url``: nothing stands in.

The operator renders a RewardModel of kind judge (``resources.gpus: 0``: the ``vllm-generate-cpu`` runtime);
KServe's storage initializer downloads the tiny random-weight judge (its tokenizer keeps Yes, No and 1..9
whole, splits 10) from the test bed's storage server; containerd runs vLLM's CPU build and the reward gateway
from images built here. Then, one RewardModel edited in place (a new judge is a new gateway revision; vLLM's
pod is untouched, as its rendering does not depend on spec.judge):

1. label probabilities: the rewards of ``/v1/rewards`` and OpenRLHF's ``/get_reward`` (from a pod on the node)
   and of the TRL and verl clients (``reward_gateway_client``, called as the trainers call them, from the host
   through ``status.url``) equal transformers' softmax over the whole vocabulary at the verdict position,
   renormalised over the labels, within 1e-4;
2. a structured verdict (a JSON schema) parses, lies in range and is the same on a repeat; with ``maxTokens``
   too small each item's verdict is cut short: each a failure with its reason (no_verdict), never a number;
3. a request of 8 items of which one is over the judge's context: 7 rewards (transformers' numbers) and 1
   failure with its reason (too_long);
4. a label the judge's tokenizer splits: the gateway refuses it, and the RewardModel's Ready says so, naming it.

Not in ``make test``: the vLLM image's import and two cold starts of vLLM on the node's 2 cores (``make judge-real``,
its README).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from reward_testing import paths
from reward_testing.judge_cases import JUDGED_ITEMS, JUDGES, judge_references
from reward_testing.scoring_cases import assert_close
from reward_testing.tiny_models import TinyModel, make_tiny_models, tar_model
from reward_testing.waiting import wait_until
from testenv import node, served
from testenv.addons import keda
from testenv.diagnose import explained
from testenv.helpers import condition, get_json, predictor_pod
from testenv.served import rewards, serve

NAME = "judge"
# Kubernetes' reasons a crash-looping container reaches Ready with (policy/pods.py)
POD_FAILURES = {"CrashLoopBackOff", "Error"}
# Run on the host in a mount namespace whose /etc/hosts names status.url's Service (keda.with_private_hosts):
# the TRL and verl adapters called exactly as TRL's GRPOTrainer and verl's reward loop call them.
CLIENTS = textwrap.dedent(
    """
    import asyncio, json, sys
    from reward_gateway_client.trl import GatewayReward
    from reward_gateway_client.verl import compute_score
    asked = json.load(sys.stdin)
    url, prompts, completions, references = asked["url"], asked["prompts"], asked["completions"], asked["references"]
    trl = GatewayReward(url, reference_column="solution")(prompts=prompts, completions=completions,
                                                          completion_ids=None, solution=references)

    async def verl():
        return await asyncio.gather(*(
            compute_score(data_source="judge", solution_str=completion[0]["content"], ground_truth=reference,
                          extra_info={"prompt": prompt}, url=url)
            for prompt, completion, reference in zip(prompts, completions, references)))

    print("RESULTS " + json.dumps({"trl": trl, "verl": asyncio.run(verl())}))
    """
)


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory) -> TinyModel:
    return make_tiny_models(tmp_path_factory.mktemp("judge-model"), ("judge",))["judge"]


@pytest.fixture(scope="module")
def served_namespace(cluster, operator, runtimes, plane) -> Iterator[str]:
    with served.client_namespace(cluster) as name:
        yield name


def judge_spec(uri: str, judge: str) -> dict:
    spec = served.reward_model(NAME, "judge", uri, 0)
    spec["spec"]["judge"] = copy.deepcopy(JUDGES[judge])
    return spec


def edit_judge(cluster, namespace: str, judge: str) -> None:
    """spec.judge replaced whole (a merge patch would keep the old verdict's keys beside the new one's)."""
    patch = [{"op": "replace", "path": "/spec/judge", "value": JUDGES[judge]}]
    cluster.kubectl("patch", "rewardmodel", NAME, "-n", namespace, "--type=json", "-p", json.dumps(patch))


def gateway_judge_env(cluster, namespace: str) -> str:
    """REWARD_GATEWAY_JUDGE of the gateway's Deployment as the API server has it."""
    deployment = json.loads(
        cluster.kubectl("get", "deployment", f"{NAME}-transformer", "-n", namespace, "-o", "json").stdout
    )
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return next(item["value"] for item in env if item["name"] == "REWARD_GATEWAY_JUDGE")


def served_judge(cluster, namespace: str, judge: str) -> str:
    """The gateway rolled to ``judge``: every answer names its digest (the rollout is over once one does)."""
    wanted = json.dumps(JUDGES[judge], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    wait_until("the judge in the gateway's Deployment", lambda: gateway_judge_env(cluster, namespace) == wanted,
               timeout=120)  # fmt: skip
    url = f"http://{NAME}-transformer.{namespace}.svc.cluster.local"

    def rolled() -> bool:
        selector = f"serving.kserve.io/inferenceservice={NAME},component=transformer"
        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        return len(pods) == 1 and all(judge_of(pod) == wanted and ready_pod(pod) for pod in pods)

    with explained(cluster.kubectl, namespace, f"serving.kserve.io/inferenceservice={NAME}"):
        wait_until("the gateway rolled to the new judge", rolled, timeout=300, interval=2)
    return url


def judge_of(pod: dict) -> str:
    return next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "REWARD_GATEWAY_JUDGE")


def ready_pod(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and all(status.get("ready") for status in statuses)


def client_path() -> str:
    """PYTHONPATH for a subprocess that imports the client package: pytest puts clients/python on its own
    sys.path (pyproject's pythonpath), not in the environment a child inherits."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(paths.REPO / "clients" / "python"), *([inherited] if inherited else [])])


def clients_from_the_host(cluster, namespace: str, url: str, workdir, items: list[dict]) -> dict:
    """The TRL and verl adapters' rewards for ``items`` (prompt/response/reference), from the host by status.url."""
    host = url.split("://", 1)[1].split("/", 1)[0]
    address = cluster.kubectl("get", "service", host.split(".", 1)[0], "-n", namespace, "-o",
                              "jsonpath={.spec.clusterIP}").stdout.strip()  # fmt: skip
    hosts = keda.HostsFile.create(workdir / "hosts")
    asked = {
        "url": url,
        "prompts": [[{"role": "user", "content": item["prompt"]}] for item in items],
        "completions": [[{"role": "assistant", "content": item["response"]}] for item in items],
        "references": [item.get("reference") for item in items],
    }
    with hosts.names(address, [host]):
        ran = subprocess.run(keda.with_private_hosts([sys.executable, "-c", CLIENTS], hosts.path),
                             input=json.dumps(asked), capture_output=True, text=True, timeout=300,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": client_path()})  # fmt: skip
    lines = [line for line in ran.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, ran.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS "))


@pytest.fixture(scope="module")
def judge_url(cluster, plane, served_namespace, judge_model) -> str:
    archive = tar_model(judge_model, node.storage_dir(plane.directory) / "judge.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)
    return serve(cluster, served_namespace, judge_spec(uri, "yes_no"))["status"]["url"]


def test_label_probabilities_through_status_url_equal_transformers(
    cluster, served_namespace, judge_url, judge_model, tmp_path
):
    items = [item for item in JUDGED_ITEMS if "prompt" in item]
    references = judge_references(judge_model, JUDGES["yes_no"], JUDGED_ITEMS)
    want = [reference["reward"] for reference in references]
    answer = rewards(cluster, served_namespace, judge_url, "/v1/rewards", {"items": JUDGED_ITEMS})
    assert answer["identity"]["judge"] and answer["identity"]["model"] == NAME
    first = JUDGED_ITEMS[0]
    query = {
        "query": [first["prompt"] + first["response"]],
        "prompts": [first["prompt"]],
        "labels": [first["reference"]],
    }
    openrlhf = rewards(cluster, served_namespace, judge_url, "/get_reward", query)
    clients = clients_from_the_host(cluster, served_namespace, judge_url, tmp_path, items)
    by_item = {json.dumps(item, sort_keys=True): reward for item, reward in zip(JUDGED_ITEMS, want, strict=True)}
    client_want = [by_item[json.dumps(item, sort_keys=True)] for item in items]
    got = [*answer["rewards"], *openrlhf["rewards"], *clients["trl"], *clients["verl"]]
    expected = [*want, want[0], *client_want, *client_want]
    assert_close(got, expected)
    diff = max(abs(a - b) for a, b in zip(got, expected, strict=True))
    print(f"\njudge (labels Yes/No) through {judge_url}: /v1/rewards, /get_reward, the TRL and verl clients: "
          f"{len(got)} rewards, max |diff| vs transformers {diff:.2e}")  # fmt: skip


def test_a_structured_verdict_parses_repeats_and_one_cut_short_is_no_number(cluster, served_namespace, judge_url):
    vllm_before = predictor_pod(cluster, served_namespace, NAME)["metadata"]["uid"]
    edit_judge(cluster, served_namespace, "json")
    url = served_judge(cluster, served_namespace, "json")
    # a new judge is a new gateway, on the same vLLM
    assert predictor_pod(cluster, served_namespace, NAME)["metadata"]["uid"] == vllm_before
    first = rewards(cluster, served_namespace, url, "/v1/rewards", {"items": JUDGED_ITEMS})["rewards"]
    again = rewards(cluster, served_namespace, url, "/v1/rewards", {"items": JUDGED_ITEMS})["rewards"]
    assert first == again and all(reward in (1, 2, 3, 4, 5) for reward in first), first

    edit_judge(cluster, served_namespace, "cut")
    url = served_judge(cluster, served_namespace, "cut")
    cut = rewards(cluster, served_namespace, url, "/v1/rewards", {"items": JUDGED_ITEMS})
    assert cut["rewards"] == [None] * len(JUDGED_ITEMS), cut
    assert {(f["reason"], f["retry"]) for f in cut["failures"]} == {("no_verdict", False)}, cut
    assert all("cut short at maxTokens (2 tokens)" in f["message"] for f in cut["failures"]), cut
    print(f"\na verdict cut short: {cut['failures'][0]}")


def test_eight_items_of_which_one_fails_answer_seven_rewards_and_one_failure(
    cluster, served_namespace, judge_url, judge_model
):
    """Back to label probabilities: 8 items of one group, one of them over the judge's context (1024 positions).
    vLLM refuses that one alone; the seven others are judged, at transformers' numbers, in the same answer."""
    edit_judge(cluster, served_namespace, "yes_no")
    url = served_judge(cluster, served_namespace, "yes_no")
    items = [{"prompt": f"question {i} is the river green", "response": f" answer {i}", "group": "g"} for i in range(8)]
    items[3] = {**items[3], "response": " water" * 1100}
    references = judge_references(judge_model, JUDGES["yes_no"], [item for i, item in enumerate(items) if i != 3])
    answer = rewards(cluster, served_namespace, url, "/v1/rewards", {"items": items})
    assert [(f["index"], f["reason"], f["retry"]) for f in answer["failures"]] == [(3, "too_long", False)], answer
    assert answer["rewards"][3] is None
    assert_close([r for i, r in enumerate(answer["rewards"]) if i != 3], [r["reward"] for r in references])
    print(f"\n8 items, 1 over the judge's context: 7 rewards, 1 failure: {answer['failures'][0]}")


def test_a_label_the_tokenizer_splits_is_refused_naming_it(cluster, plane, served_namespace, judge_url):
    """A judge served from the start with labels 10 and No (10 is two tokens): its gateway exits naming the label
    once vLLM answers, and the RewardModel's Ready says so, with Kubernetes' reason for the container. (An edit
    of a served judge to such labels leaves the previous gateway serving while the new one crash-loops, as any
    bad rollout of a Deployment does.)"""
    served.finished(cluster, served_namespace, NAME)  # the node's cores and memory for the next vLLM
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], "judge.tar.gz")
    spec = judge_spec(uri, "split_label")
    spec["metadata"]["name"] = f"{NAME}-split"
    cluster.kubectl("apply", "-n", served_namespace, "-f", "-", input=json.dumps(spec))

    def refused() -> dict | None:
        found = condition(get_json(cluster, "rewardmodel", f"{NAME}-split", "-n", served_namespace), "Ready") or {}
        named = "judge label '10' is 2 tokens" in found.get("message", "")
        return found if found.get("status") == "False" and found.get("reason") in POD_FAILURES and named else None

    ready = wait_until("Ready=False naming the label", refused, timeout=served.READY_TIMEOUT, interval=2)
    print(f"\na label the tokenizer splits: Ready=False {ready['reason']}: {ready['message']}")
    served.finished(cluster, served_namespace, f"{NAME}-split")
