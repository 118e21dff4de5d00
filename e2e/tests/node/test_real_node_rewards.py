"""Rewards through a RewardModel's URL, computed by a model: the whole data path on the real node.

Nothing stands in: the operator renders the RewardModel (``resources.gpus: 0``, so the
``vllm-reward-cpu`` runtime), KServe's webhook injects its storage initializer (the image built here
from KServe's storage package), which downloads the tiny model's archive from the test bed's storage
server into ``/mnt/models``; containerd starts vLLM's CPU build and the reward gateway from images
built from the repository's Dockerfiles; KServe reports Ready; and a client pod on the node calls
``status.url`` by name (CoreDNS, kube-proxy). Each answer must equal transformers' forward pass over
the same tokens (``reward_testing.scoring_cases``, shared with the local-process parity tests) within
1e-4. One RewardModel at a time: the node has 2 cores and each vLLM takes about 3 GB.

Two other ways a model reaches the pod, with no storage initializer in it: ``spec.cache`` (the token
model: KServe's LocalModel node agent runs its download Job, the same storage initializer image, on the
node, into the node group's volume; the predictor mounts that), and a ``pvc://`` model (the process
model, on a claim of a volume of the node).
"""

from __future__ import annotations

import json
import shutil
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from reward_gateway_client.http import DEAD_GATEWAY_S, KEEPALIVE_OPTIONS

from reward_testing.prometheus_text import sample_sum
from reward_testing.scoring_cases import (
    CONVERSATION,
    OWN_QUERY,
    PROMPT,
    REFERENCE_ITEMS,
    RESPONSE,
    SPEC_QUERY,
    SPEC_TEMPLATE,
    STEPPED_QUERY,
    STEPS,
    TAGGED,
    assert_close,
)
from reward_testing.waiting import wait_until
from testenv import images, node, served
from testenv.addons import localmodel
from testenv.helpers import ISVC_LABEL, get_json, predictor_pod, wait_for_condition
from testenv.node import failing_url, pod_host
from testenv.served import call, finished, reward_model, rewards, serve

TOKEN = "s3cret-trainer-token"
# Kubernetes' reasons a crash-looping or killed predictor reaches Ready with
POD_FAILURES = {"OOMKilled", "CrashLoopBackOff", "Error"}


@pytest.fixture(scope="module")
def served_namespace(cluster, operator, runtimes, plane) -> Iterator[str]:
    """The client pod's namespace on the real node, with the trainers' token as a Secret."""
    with served.client_namespace(cluster, secrets={"trainers": {"token": TOKEN}}) as name:
        yield name


def test_a_sequence_model_scores_through_its_url_with_the_spec_template_and_a_bearer_token(
    cluster, served_namespace, model_uris, tiny_models, references
) -> None:
    """The spec's chat template applied once, by the gateway (chatTemplateMode gateway); a token."""
    spec = reward_model(
        "seq", "sequence", model_uris["sequence"], 0,
        model={"chatTemplate": SPEC_TEMPLATE},
        gateway={"chatTemplateMode": "gateway", "authSecretRef": {"name": "trainers"}},
    )  # fmt: skip
    served = serve(cluster, served_namespace, spec)
    url = served["status"]["url"]
    assert url.endswith(f".{served_namespace}.svc.cluster.local"), url
    selector = "serving.kserve.io/inferenceservice=seq"
    listed = cluster.kubectl("get", "pods", "-n", served_namespace, "-l", selector, "-o", "json").stdout
    pods = json.loads(listed)["items"]
    assert pods and all(pod["spec"]["nodeName"] == node.NAME for pod in pods)
    predictor = next(pod for pod in pods if pod["metadata"]["labels"].get("component") == "predictor")
    # KServe's own storage initializer fetched the weights (the image built here), and it succeeded
    (initializer,) = predictor["status"]["initContainerStatuses"]
    assert initializer["image"].endswith(images.STORAGE_INITIALIZER_IMAGE), initializer
    assert initializer["state"]["terminated"]["exitCode"] == 0

    refused = call(cluster, served_namespace, url, "/v1/rewards", {"items": [{"messages": CONVERSATION}]})
    assert refused["status"] == 401, refused
    want = references["sequence"]
    body = {"items": [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]}
    answer = rewards(cluster, served_namespace, url, "/v1/rewards", body, TOKEN)
    assert_close(answer["rewards"], [want["conversation"]["reward"], want["prompt_response"]["reward"]])
    openrlhf = rewards(cluster, served_namespace, url, "/get_reward", {"query": [SPEC_QUERY]}, TOKEN)
    verl = {"model": "/mnt/models", "input": REFERENCE_ITEMS["sequence"]["verl"]["text"], "use_activation": False}
    classify = rewards(cluster, served_namespace, url, "/classify", verl, TOKEN)
    assert_close(
        [*openrlhf["rewards"], classify["data"][-1]["probs"][-1]], [want["query"]["reward"], want["verl"]["reward"]]
    )
    finished(cluster, served_namespace, "seq")


@pytest.fixture(scope="module")
def real_node_group(cluster) -> str:
    """KServe's LocalModel node group of the real node (testenv.addons.localmodel), skipped without it."""
    if cluster.kubectl("get", f"localmodelnodegroup/{localmodel.REAL_NODE_GROUP}", check=False).returncode != 0:
        pytest.skip("needs KServe's LocalModel with the real node's group (the session's plane has it with the node)")
    return localmodel.REAL_NODE_GROUP


def download_pods(cluster) -> list[dict]:
    """The pods of the download Jobs KServe's agent started on the real node (a Job's labels, which name
    the model and node, are not its pods')."""
    on_node = f"spec.nodeName={node.NAME}"
    listed = get_json(cluster, "pods", "-n", localmodel.JOB_NAMESPACE, "--field-selector", on_node) or {}
    return listed.get("items", [])


def assert_no_storage_initializer(cluster, namespace: str, isvc: str, claim: str | None = None) -> dict:
    """The predictor reads the model from a claim (``claim``, or any) mounted at /mnt/models: nothing
    downloads it into the pod. Returns the pod."""
    pod = predictor_pod(cluster, namespace, isvc)
    assert pod is not None and pod["spec"]["nodeName"] == node.NAME, pod
    assert not pod["spec"].get("initContainers"), pod["spec"].get("initContainers")
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims if claim is None else claim in claims, pod["spec"]["volumes"]
    return pod


def test_a_token_model_cached_on_the_node_by_kserves_download_job_scores_through_its_url(
    cluster, plane, served_namespace, real_node_group, model_uris, references
) -> None:
    """spec.cache on the real node: KServe's agent runs its download Job (the storage initializer image
    built here) on the node, into the group's volume on the node's disk; ModelCached, then the predictor
    mounts the cache, with no storage initializer of its own, and vLLM loads the model from there. The
    tokenizer's own template applied by vLLM (chatTemplateMode upstream), the last token's value.
    Two more models fail their downloads, one whose archive is missing (404) and one whose storage server
    answers 500: ModelCached and Ready say so, and the first keeps serving."""
    cache = {"modelSize": "1Gi", "nodeGroups": [real_node_group]}
    served = serve(cluster, served_namespace, reward_model("tok", "token", model_uris["token"], 0, cache=cache))
    cached = wait_for_condition(cluster, served_namespace, "tok", "ModelCached", "True", "Downloaded")
    assert "1/1 copies" in cached["message"], cached
    (downloader,) = download_pods(cluster)
    assert downloader["spec"]["nodeName"] == node.NAME, downloader["spec"]
    assert downloader["status"]["phase"] == "Succeeded", downloader["status"]
    (container,) = downloader["status"]["containerStatuses"]
    assert container["image"].endswith(images.STORAGE_INITIALIZER_IMAGE), container
    # on the node's disk, where KServe's agent looks (/mnt/models/models/<storage key>): the weights
    disk = localmodel.node_disks(plane.directory, [node.NAME])[node.NAME]
    (folder,) = [f for f in disk.path_of(localmodel.AGENT_MODELS).iterdir() if f.is_dir()]
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors")), sorted(folder.iterdir())
    assert_no_storage_initializer(cluster, served_namespace, "tok")

    url, want = served["status"]["url"], references["token"]
    items = [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}]
    answer = rewards(cluster, served_namespace, url, "/v1/rewards", {"items": items})
    openrlhf = rewards(cluster, served_namespace, url, "/get_reward", {"query": [OWN_QUERY]})
    expected = [want["conversation"]["reward"], want["prompt_response"]["reward"], want["query"]["reward"]]
    assert_close(answer["rewards"] + openrlhf["rewards"], expected)
    generation = served["metadata"]["generation"]
    assert answer["identity"] == {
        "model": "tok", "revision": model_uris["token"], "digest": None, "generation": generation, "role": "stable"
    }  # fmt: skip

    # two downloads that fail, side by side: the object missing (404), and the storage server failing (500)
    failing = {
        "uncached": model_uris["token"].replace("token.tar.gz", f"missing-{served_namespace}.tar.gz"),
        "broken": failing_url(model_uris["token"].replace("token.tar.gz", f"{served_namespace}.tar.gz"), 500),
    }
    for name, uri in failing.items():
        cluster.kubectl("apply", "-n", served_namespace, "-f", "-",
                        input=json.dumps(reward_model(name, "token", uri, 0, cache=cache)))  # fmt: skip
    for name in failing:
        failed = wait_for_condition(cluster, served_namespace, name, "ModelCached", "False", "DownloadFailed",
                                    saying=node.NAME, timeout=300)  # fmt: skip
        ready = wait_for_condition(cluster, served_namespace, name, "Ready", "False", "ModelCacheFailed")
        assert failed["message"] in ready["message"], (failed, ready)
        assert get_json(cluster, "inferenceservice", name, "-n", served_namespace) is None
    cluster.kubectl("delete", "rewardmodel", *failing, "-n", served_namespace, "--wait=true", "--timeout=120s")

    assert_generation_moves_without_a_new_gateway_pod(cluster, served_namespace, url, generation)
    finished(cluster, served_namespace, "tok")


def assert_generation_moves_without_a_new_gateway_pod(cluster, namespace: str, url: str, generation: int) -> None:
    """A spec edit that changes no pod (NetworkPolicies admitting everyone): the answers' generation follows
    the identity ConfigMap, as the kubelet projects it into the running gateway, which is neither replaced
    nor restarted."""

    def gateway_pods() -> list[tuple[str, str, int]]:
        selector = "serving.kserve.io/inferenceservice=tok,component=transformer"
        listed = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)
        return sorted(
            (pod["metadata"]["name"], pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["restartCount"])
            for pod in listed["items"]
        )

    before = gateway_pods()
    everyone = {"spec": {"gateway": {"allowedClients": [{"namespaceSelector": {}}]}}}
    cluster.kubectl("patch", "rewardmodel", "tok", "-n", namespace, "--type=merge", "-p", json.dumps(everyone))

    def answered_generation() -> bool:
        answer = rewards(cluster, namespace, url, "/get_reward", {"query": [OWN_QUERY]})
        return answer["identity"]["generation"] == generation + 1

    # the operator sets the generation on the gateway's pod, so the kubelet projects the ConfigMap at once,
    # not at its periodic sync about a minute on (the timeout allows for that fallback)
    edited = time.monotonic()
    wait_until("the answers carry the new generation", answered_generation, timeout=240, interval=1)
    print(f"\nthe running gateway answered with the new generation {time.monotonic() - edited:.1f} s after the edit")
    assert gateway_pods() == before, "the gateway's pods were neither replaced nor restarted"


@pytest.fixture
def models_claim(cluster, plane, served_namespace, tiny_models) -> Iterator[str]:
    """A PersistentVolumeClaim ``models`` in the namespace, bound to a folder of the node's disk holding
    the process model (a ``local`` volume: the node is this host), as a user's shared model volume."""
    volume = plane.directory / f"pvc-{served_namespace}"
    shutil.copytree(tiny_models["process"].path, volume / "process-rm")
    for path in (volume, *volume.rglob("*")):  # readable by vLLM's user (the maker writes some files 0600)
        path.chmod(0o755 if path.is_dir() else 0o644)
    persistent_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"models-{served_namespace}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual-models",
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": str(volume)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": node.LABEL[0], "operator": "In", "values": [node.LABEL[1]]}]}
            ]}},
            "claimRef": {"namespace": served_namespace, "name": "models"},
        },
    }  # fmt: skip
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "models", "namespace": served_namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual-models",
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": persistent_volume["metadata"]["name"],
        },
    }
    manifests = {"apiVersion": "v1", "kind": "List", "items": [persistent_volume, claim]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifests))
    try:
        cluster.kubectl("wait", "--for=jsonpath={.status.phase}=Bound", "pvc/models", "-n", served_namespace,
                        "--timeout=60s")  # fmt: skip
        yield "models"
    finally:
        cluster.kubectl("delete", "pvc", "models", "-n", served_namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", persistent_volume["metadata"]["name"], "--wait=false", check=False)


def test_a_process_model_on_a_claim_scores_each_step_through_its_url(
    cluster, served_namespace, models_claim, tiny_models, references
) -> None:
    """pvc://<claim>/<folder>: KServe mounts the claim into the predictor (no storage initializer) and
    vLLM loads the folder. p_positive at each step tag; the weakest step is the reward."""
    uri = f"pvc://{models_claim}/process-rm"
    served = serve(cluster, served_namespace, reward_model("prm", "process", uri, tiny_models["process"].step_tag_id))
    assert_no_storage_initializer(cluster, served_namespace, "prm", claim=models_claim)
    url, want = served["status"]["url"], references["process"]
    answer = rewards(cluster, served_namespace, url, "/v1/rewards",
                     {"items": [{"prompt": PROMPT, "steps": STEPS}, {"messages": TAGGED}]})  # fmt: skip
    openrlhf = rewards(cluster, served_namespace, url, "/get_reward", {"query": [STEPPED_QUERY]})
    for got, name in zip(answer["step_scores"], ("steps", "tagged"), strict=True):
        assert_close(got, want[name]["step_scores"])
    assert_close(answer["rewards"] + openrlhf["rewards"], [want[n]["reward"] for n in ("steps", "tagged", "query")])
    finished(cluster, served_namespace, "prm")


def test_a_predictor_short_of_memory_reaches_the_status_with_kubernetes_reason_and_one_warning(
    cluster, served_namespace, model_uris
) -> None:
    """vLLM in 1Gi (it needs about 3 GB) is killed by the kernel, again and again: the RewardModel says
    so with Kubernetes' own reason and posts one Warning for it, not one per restart."""
    spec = reward_model("short", "sequence", model_uris["sequence"], 0)
    spec["spec"]["resources"]["memory"] = "1Gi"
    cluster.kubectl("apply", "-n", served_namespace, "-f", "-", input=json.dumps(spec))

    def restarted_twice() -> dict | None:
        stored = json.loads(cluster.kubectl("get", "rewardmodel", "short", "-n", served_namespace, "-o", "json").stdout)
        ready = next((c for c in stored.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})
        pods = json.loads(cluster.kubectl("get", "pods", "-n", served_namespace, "-l",
                                          "component=predictor,serving.kserve.io/inferenceservice=short",
                                          "-o", "json").stdout)["items"]  # fmt: skip
        restarts = sum(s.get("restartCount", 0) for p in pods for s in p["status"].get("containerStatuses", []))
        return ready if restarts >= 2 and ready.get("reason") in POD_FAILURES else None

    ready = wait_until("two restarts of the starved vLLM, and the RewardModel's Ready saying why", restarted_twice,
                       timeout=served.READY_TIMEOUT, interval=3)  # fmt: skip
    assert ready["status"] == "False"
    assert "kserve-container" in ready["message"], ready
    about = "involvedObject.kind=RewardModel,involvedObject.name=short"
    listed = cluster.kubectl("get", "events", "-n", served_namespace, "--field-selector", about, "-o", "json").stdout
    warnings = [e for e in json.loads(listed)["items"] if e["type"] == "Warning" and e["reason"] in POD_FAILURES]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings
    finished(cluster, served_namespace, "short")


# ---- a gateway pod vanishing under a trainer's request ------------------------------------------------------

# Run in the client pod: a trainer's one POST on a connection with the client library's keep-alive
# (reward_gateway_client.http.KEEPALIVE_OPTIONS, as argv[5]), the answer or the failure as one JSON object.
TRAINER_CALL = textwrap.dedent(
    """
    import http.client, json, sys
    host, path, body, timeout, options = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
    connection = http.client.HTTPConnection(host, 80, timeout=timeout)
    connection.connect()
    for level, option, value in json.loads(options):
        connection.sock.setsockopt(level, option, value)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        print(json.dumps({"status": answer.status, "body": answer.read().decode()[:300]}))
    except Exception as failed:
        print(json.dumps({"status": 0, "body": f"{type(failed).__name__}: {failed}"}))
    """
)
# After a forced deletion the kubelet waits its least grace (2 s) before SIGKILL; then a reset (the process went
# first) is at once, and silence (the link first, or cut) lasts at most DEAD_GATEWAY_S; kubectl and exec: slack.
FORCED_GRACE_S, SLACK_S = 2, 15


class TrainerRequest:
    """One request from the client pod to a RewardModel's URL, waiting in its gateway (the engine stopped)."""

    def __init__(self, cluster, namespace: str, url: str, timeout: float):
        host = url.removeprefix("http://").rstrip("/")
        body = json.dumps({"items": [{"prompt": PROMPT, "response": RESPONSE}]})
        command = ["python", "-c", TRAINER_CALL, host, "/v1/rewards", body, str(timeout), json.dumps(KEEPALIVE_OPTIONS)]
        self.answers: list[tuple[dict, float]] = []

        def send() -> None:
            printed = cluster.kubectl("exec", "-n", namespace, served.CLIENT, "--", *command)
            self.answers.append((json.loads(printed.stdout.strip().splitlines()[-1]), time.monotonic()))

        self.thread = threading.Thread(target=send)
        self.timeout = timeout

    def answer_after(self, vanished: float) -> tuple[dict, float]:
        self.thread.join(self.timeout + 30)
        assert self.answers, "the trainer's call never ended"
        answer, at = self.answers[0]
        return answer, at - vanished


def gateway_pod(cluster, namespace: str, isvc: str) -> dict:
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={isvc},component=transformer")
    (pod,) = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
    return pod


def answering(cluster, namespace: str, url: str) -> bool:
    """Whether the RewardModel's URL answers 200 now (a refused connection, while no gateway is Ready: no)."""
    (answer,) = served.call_all(
        cluster, namespace, url, "/v1/rewards", [{"items": [{"prompt": PROMPT, "response": RESPONSE}]}]
    )
    return answer["status"] == 200


def inflight(pod: dict) -> float:
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as answer:
        return sample_sum(answer.read().decode(), "reward_gateway_inflight_requests")


def test_a_gateway_pod_vanishing_under_a_trainers_request_is_a_dropped_connection_within_the_bound(
    cluster, served_namespace, model_uris
) -> None:
    """A trainer's request waits in a RewardModel's gateway (its vLLM's engine stopped) when the gateway's pod
    goes: force-deleted, then cut off the network (its link down: no reset, no FIN, as when its node drops off).
    The trainer sees a dropped connection, never a number: at once where the pod's process went first, within
    DEAD_GATEWAY_S by the client library's keep-alive where nothing came back (a failure the library retries).
    Each one's time printed."""
    url = serve(cluster, served_namespace, reward_model("gone", "sequence", model_uris["sequence"], 0))["status"]["url"]
    vllm = predictor_pod(cluster, served_namespace, "gone")["metadata"]["name"]
    ways = ("force-deleted", "cut off")
    try:
        for way in ways:
            wait_until("the RewardModel answering", lambda: answering(cluster, served_namespace, url),
                       timeout=300, interval=3)  # fmt: skip
            pod_host.signal_engine(cluster, served_namespace, vllm, "STOP")
            gateway = gateway_pod(cluster, served_namespace, "gone")
            pid = pod_host.container_pid(gateway, "kserve-container")
            link = pod_host.host_link(pid)
            request = TrainerRequest(cluster, served_namespace, url, timeout=120)
            request.thread.start()
            wait_until("the trainer's request in the gateway", lambda g=gateway: inflight(g) >= 1)
            if way == "force-deleted":
                teardown = pod_host.Teardown(pid, link)
                teardown.start()
                vanished = time.monotonic()
                cluster.kubectl("delete", "pod", "-n", served_namespace, gateway["metadata"]["name"],
                                "--grace-period=0", "--force", "--wait=false")  # fmt: skip
                answer, after = request.answer_after(vanished)
                teardown.stop()
                order, bound = f"; teardown: {teardown}", FORCED_GRACE_S + DEAD_GATEWAY_S + SLACK_S
            else:
                with pod_host.cut_link(link):
                    vanished = time.monotonic()
                    answer, after = request.answer_after(vanished)
                order, bound = "", DEAD_GATEWAY_S + SLACK_S
            pod_host.signal_engine(cluster, served_namespace, vllm, "CONT")
            print(f"\nthe gateway pod {way} under a trainer's request: {answer['status']} {after:.1f} s after"
                  f"{order}: {answer['body'][:150]}")  # fmt: skip
            assert answer["status"] == 0 or answer["status"] >= 500, answer  # 0: the connection dropped
            assert "rewards" not in answer["body"], answer
            assert after <= bound, (way, after, answer)
    finally:
        pod_host.signal_engine(cluster, served_namespace, vllm, "CONT")
    finished(cluster, served_namespace, "gone")
