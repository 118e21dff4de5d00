"""Rewards through a RewardModel's URL, computed by a model: the whole data path on the real node.

Nothing stands in: the operator renders the RewardModel (``resources.gpus: 0``, so the
``vllm-reward-cpu`` runtime), KServe's webhook injects its storage initializer (the image built here
from KServe's storage package), which downloads the tiny model's archive from the test bed's storage
server into ``/mnt/models``; containerd starts vLLM's CPU build and the reward gateway from images
built from the repository's Dockerfiles; KServe reports Ready; and a client pod on the node calls
``status.url`` by name (CoreDNS, kube-proxy). Each answer must equal transformers' forward pass over
the same tokens (``reward_testing.scoring_cases``, shared with the local-process parity tests) within
1e-4. One RewardModel at a time: the node has 2 cores and each vLLM takes about 3 GB.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

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
    TOLERANCE,
)
from reward_testing.tiny_models import reference_scores_of, tar_model
from reward_testing.waiting import wait_until
from testenv import controlplane, images, node

TOKEN = "s3cret-trainer-token"
# Kubernetes' reasons a crash-looping or killed predictor reaches Ready with
POD_FAILURES = {"OOMKilled", "CrashLoopBackOff", "Error"}
CLIENT = "client"
READY_TIMEOUT = 900  # an image import, a download and vLLM's start on 2 shared cores


@pytest.fixture(scope="module")
def plane(cluster) -> controlplane.ControlPlane:
    """The local control plane whose real node serves; skipped on other clusters."""
    if not cluster.local or cluster.kubectl("get", f"node/{node.NAME}", check=False).returncode != 0:
        pytest.skip("needs the test bed's real node (TESTENV_NODE=0 leaves it out)")
    plane = controlplane.ControlPlane.attach(cluster.directory)
    plane.load_images(("vllm-cpu",))
    return plane


@pytest.fixture(scope="module")
def model_uris(plane, tiny_models) -> dict[str, str]:
    """Each kind's model as an archive on the storage server, by the URI a RewardModel names."""
    storage = node.storage_dir(plane.directory)
    port = plane.state.ports[node.STORAGE]
    uris = {}
    for kind, model in tiny_models.items():
        tar_model(model, storage / f"{kind}.tar.gz")
        uris[kind] = node.storage_url(node.host_address(), port, f"{kind}.tar.gz")
    return uris


@pytest.fixture(scope="module")
def references(tiny_models) -> dict[str, dict[str, dict]]:
    """transformers' answers, per kind and item name."""
    jobs = {kind: (tiny_models[kind], list(items.values())) for kind, items in REFERENCE_ITEMS.items()}
    answers = reference_scores_of(jobs)
    return {kind: dict(zip(REFERENCE_ITEMS[kind], answers[kind], strict=True)) for kind in REFERENCE_ITEMS}


@pytest.fixture(scope="module")
def served_namespace(cluster, operator, runtimes, plane) -> Iterator[str]:
    """A namespace on the real node with a client pod (the operator image's Python) to call from."""
    name = f"rw-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(name)))
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trainers", "namespace": name},
              "stringData": {"token": TOKEN}}  # fmt: skip
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CLIENT, "namespace": name},
        "spec": {
            "containers": [
                {
                    "name": "client",
                    "image": images.OPERATOR_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "import signal; signal.pause()"],
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [secret, client]})
    )
    cluster.kubectl("wait", "--for=condition=Ready", f"pod/{CLIENT}", "-n", name, "--timeout=120s")
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def reward_model(name: str, kind: str, uri: str, step_tag_id: int, **extra: Any) -> dict:
    spec: dict[str, Any] = {
        # float32 as the weights are (vLLM's CPU build would downcast them to float16 otherwise)
        "model": {"uri": uri, "kind": kind, "dtype": "float32"},
        # the node has 2 cores: vLLM, the gateway and the storage initializer fit in them
        "resources": {"gpus": 0, "cpu": "1500m", "memory": "6Gi"},
        "serving": {"mode": "Standard", "minReplicas": 1, "maxReplicas": 1},
        "gateway": {"resources": {"cpu": "250m", "memory": "512Mi"}},
    }
    if kind == "process":
        spec["model"]["stepTagId"] = step_tag_id
    for field, value in extra.items():
        spec.setdefault(field, {}).update(value)
    return {"apiVersion": "serving.rlhf.dev/v1alpha1", "kind": "RewardModel", "metadata": {"name": name}, "spec": spec}


def serve(cluster, namespace: str, reward_model: dict) -> dict:
    """Apply, wait for Ready (KServe's word, the gateway's too), return the RewardModel."""
    name = reward_model["metadata"]["name"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(reward_model))

    def ready() -> dict | None:
        stored = json.loads(cluster.kubectl("get", "rewardmodel", name, "-n", namespace, "-o", "json").stdout)
        conditions = {c["type"]: c for c in stored.get("status", {}).get("conditions", [])}
        return stored if conditions.get("Ready", {}).get("status") == "True" else None

    try:
        return wait_until(f"RewardModel {name} Ready", ready, timeout=READY_TIMEOUT, interval=2)
    except AssertionError:
        pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
        events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout
        raise AssertionError(f"{name} not Ready\n{pods}\n{events[-4000:]}") from None


# Run in the client pod: one POST to the RewardModel's URL, the answer's status and body printed.
CALL = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request
    url, body, token = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
    headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + token} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=120) as answer:
            print(json.dumps({"status": answer.status, "body": json.load(answer)}))
    except urllib.error.HTTPError as error:
        print(json.dumps({"status": error.code, "body": error.read().decode()}))
    """
)


def call(cluster, namespace: str, url: str, path: str, body: dict, token: str = "") -> dict:
    """POST from the client pod on the node to ``url`` + ``path``: by name, through CoreDNS and kube-proxy."""
    args = [
        "exec",
        "-n",
        namespace,
        CLIENT,
        "--",
        "python",
        "-c",
        CALL,
        url.rstrip("/") + path,
        json.dumps(body),
        token,
    ]
    return json.loads(cluster.kubectl(*args).stdout.strip().splitlines()[-1])


def rewards(cluster, namespace: str, url: str, path: str, body: dict, token: str = "") -> dict:
    answer = call(cluster, namespace, url, path, body, token)
    assert answer["status"] == 200, answer
    return answer["body"]


def assert_close(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    assert all(abs(g - w) <= TOLERANCE for g, w in zip(got, want, strict=True)), (got, want)


def finished(cluster, namespace: str, name: str) -> None:
    """Delete a served RewardModel and wait for its pods to go: the next one needs the node's cores."""
    cluster.kubectl("delete", "rewardmodel", name, "-n", namespace, "--wait=true", "--timeout=120s")
    cluster.kubectl("wait", "--for=delete", "pod", "-n", namespace, "-l", f"serving.kserve.io/inferenceservice={name}",
                    "--timeout=120s", check=False)  # fmt: skip


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


def test_a_token_model_scores_through_its_url(cluster, served_namespace, model_uris, references) -> None:
    """The tokenizer's own template applied by vLLM (chatTemplateMode upstream), the last token's value."""
    served = serve(cluster, served_namespace, reward_model("tok", "token", model_uris["token"], 0))
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

    # the kubelet's sync period plus its ConfigMap cache: about a minute each at most
    wait_until("the answers carry the new generation", answered_generation, timeout=240, interval=5)
    assert gateway_pods() == before, "the gateway's pods were neither replaced nor restarted"


def test_a_process_model_scores_each_step_through_its_url(
    cluster, served_namespace, model_uris, tiny_models, references
) -> None:
    """p_positive at each step tag; the weakest step is the reward."""
    spec = reward_model("prm", "process", model_uris["process"], tiny_models["process"].step_tag_id)
    served = serve(cluster, served_namespace, spec)
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
                       timeout=READY_TIMEOUT, interval=3)  # fmt: skip
    assert ready["status"] == "False"
    assert "kserve-container" in ready["message"], ready
    about = "involvedObject.kind=RewardModel,involvedObject.name=short"
    listed = cluster.kubectl("get", "events", "-n", served_namespace, "--field-selector", about, "-o", "json").stdout
    warnings = [e for e in json.loads(listed)["items"] if e["type"] == "Warning" and e["reason"] in POD_FAILURES]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings
    finished(cluster, served_namespace, "short")
