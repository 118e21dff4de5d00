"""RewardModels served on the real node, and called the way a trainer's pod calls them.

A namespace pinned to the real node holds a client pod (the operator image's Python); calls go from
there to ``status.url`` by name, through CoreDNS and kube-proxy. The RewardModels are sized for the
node's 2 cores and serve on the CPU (``resources.gpus: 0``, so the ``vllm-reward-cpu`` runtime).
Shared by the real-node suites (``test_real_node_*``).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reward_gateway.config.settings import Env
from reward_testing.scoring_cases import (
    CONVERSATION,
    OWN_QUERY,
    PROMPT,
    RESPONSE,
    SPEC_QUERY,
    STEPPED_QUERY,
    STEPS,
    TAGGED,
)
from reward_testing.waiting import wait_until

from . import images, node
from .diagnose import pods_report

CLIENT = "client"  # the client pod's name
READY_TIMEOUT = 900  # an image import, a download and vLLM's start on 2 shared cores


# Pod Security's `restricted` profile, which a namespace may enforce: the client pod passes it (the
# operator image's user, 65532, is not root).
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@contextmanager
def client_namespace(
    cluster,
    secrets: dict[str, dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    name: str | None = None,
    image: str = images.OPERATOR_IMAGE,
    pull_secret: dict | None = None,
) -> Iterator[str]:
    """A namespace on the real node with the client pod in it (and ``secrets``: name -> string data;
    ``labels`` on the namespace, such as Pod Security's enforced level; ``pod_labels`` on the client pod, which
    a NetworkPolicy may select; ``name``: the namespace's, else a new one). The client runs the operator's
    ``image``: the one imported into the node, or one pulled from a registry with ``pull_secret`` (a Secret,
    applied into the namespace first)."""
    name = name or f"rw-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(name, labels)))
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    items: list[dict] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": name}, "stringData": data}
        for secret, data in (secrets or {}).items()
    ]
    if pull_secret:
        items.append({**pull_secret, "metadata": {**pull_secret["metadata"], "namespace": name}})
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": CLIENT, "namespace": name, "labels": pod_labels or {}},
            "spec": {
                "containers": [
                    {
                        "name": "client",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent" if pull_secret else "Never",
                        "command": ["python", "-c", "import signal; signal.pause()"],
                        "securityContext": RESTRICTED_CONTAINER,
                    }
                ],
                "securityContext": RESTRICTED_POD,
                "terminationGracePeriodSeconds": 0,
                **({"imagePullSecrets": [{"name": pull_secret["metadata"]["name"]}]} if pull_secret else {}),
            },
        }
    )
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    # a pulled image comes first (the operator's, some 550 MB, over the registry's TLS)
    wait = "--timeout=300s" if pull_secret else "--timeout=120s"
    cluster.kubectl("wait", "--for=condition=Ready", f"pod/{CLIENT}", "-n", name, wait)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def reward_model(name: str, kind: str, uri: str, step_tag_id: int = 0, **extra: Any) -> dict:
    """A RewardModel for the real node; ``extra`` merges into the spec's sections (model, gateway...)."""
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
        raise AssertionError(f"{name} not Ready\n{what_runs(cluster, namespace)}") from None


# Run in vLLM's container: each file of the model folder with its SHA-256, as one JSON object.
MODEL_FILES = textwrap.dedent(
    """
    import hashlib, json, os, sys
    root = sys.argv[1]
    print(json.dumps({os.path.relpath(os.path.join(d, f), root): hashlib.sha256(open(os.path.join(d, f), "rb").read())
                      .hexdigest() for d, _, files in os.walk(root) for f in files}))
    """
)


def model_files_differ(cluster, namespace: str, pod: str, local: Path, mounted: str = "/mnt/models") -> dict:
    """The files whose SHA-256 differs between the model folder vLLM loads in ``pod`` and ``local`` (missing on
    either side: None), for a failure's message."""
    printed = cluster.kubectl("exec", "-n", namespace, pod, "-c", "kserve-container", "--", "python3", "-c",
                              MODEL_FILES, mounted, check=False)  # fmt: skip
    if printed.returncode != 0:
        return {"(could not read the pod's model)": printed.stderr.strip()[-500:]}
    served = json.loads(printed.stdout.strip().splitlines()[-1])
    here = {
        str(f.relative_to(local)): hashlib.sha256(f.read_bytes()).hexdigest() for f in local.rglob("*") if f.is_file()
    }
    return {
        name: (here.get(name), served.get(name))
        for name in here.keys() | served.keys()
        if here.get(name) != served.get(name)
    }


def what_runs(cluster, namespace: str) -> str:
    """For a failure's message: the namespace's pods as ``diagnose.pods_report`` gives them (state, conditions,
    events, log tails), then what each container was started with (its image, args and plain env)."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False).stdout or "{}")
    lines = [pods_report(cluster.kubectl, namespace), "started with:"]
    for pod in pods.get("items", []):
        meta = pod["metadata"]
        lines.append(f"pod {meta['name']}: created {meta.get('creationTimestamp')}")
        for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
            lines.append(f"  {container['name']} {container['image']} args {container.get('args')} env {env}")
    return "\n".join(lines)


# The gateway holds a request while its predictor is away (at zero, or replaced) this long by default before it
# answers 503: a probe that waits less would give up on a request the product is still keeping its promise on.
GATEWAY_HOLD_S = float(Env.SCALE_FROM_ZERO_TIMEOUT_SECONDS.default or 0)
PROBE_TIMEOUT_S = GATEWAY_HOLD_S + 30  # the hold, and the answer after it


def call(cluster, namespace: str, url: str, path: str, body: dict, token: str = "", timeout: float = 120) -> dict:
    """POST from the client pod on the node to ``url`` + ``path``: by name, through CoreDNS and kube-proxy
    (``timeout``: seconds the client waits for the answer; status 0 where none came: a readiness probe under
    ``wait_until`` then retries, as for any answer but 200). A probe through a gateway that may be holding the
    request passes ``PROBE_TIMEOUT_S``."""
    (answer,) = call_all(cluster, namespace, url, path, [body], token, timeout)
    return answer


def container_logs(cluster, namespace: str, container: str = "kserve-container", tail: int = 30) -> str:
    """For a failure's message: the last ``tail`` lines of ``container`` in each of the namespace's pods that
    run one (KServe's name for vLLM's container and for the gateway's, the default)."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False).stdout or "{}")
    parts = []
    for pod in pods.get("items", []):
        if any(c["name"] == container for c in pod["spec"]["containers"]):
            name = pod["metadata"]["name"]
            printed = cluster.kubectl("logs", "-n", namespace, name, "-c", container, f"--tail={tail}", check=False)
            parts.append(f"---- {name} {container}:\n{printed.stdout or printed.stderr}")
    return "\n".join(parts)


# Run in the client pod: POSTs one after another to one URL (a trainer's steady traffic), each answer's
# status and body printed as one JSON list at the end; no answer at all (refused, reset, the client's timeout)
# is status 0 with the reason.
CALLS = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request
    url, bodies, token, timeout = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + token} if token else {})}
    answers = []
    for body in bodies:
        request = urllib.request.Request(url, json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answers.append({"status": answer.status, "body": json.load(answer)})
        except urllib.error.HTTPError as error:
            answers.append({"status": error.code, "body": error.read().decode()})
        except OSError as error:
            answers.append({"status": 0, "body": f"no answer within {timeout:.0f} s: {error!r}"})
    print(json.dumps(answers))
    """
)


def call_all(
    cluster, namespace: str, url: str, path: str, bodies: list[dict], token: str = "", timeout: float = 120
) -> list[dict]:
    """POST each of ``bodies`` in turn from the client pod (one exec for all): each answer's status (0: no
    answer at all) and body, in order."""
    command = ["python", "-c", CALLS, url.rstrip("/") + path, json.dumps(bodies), token, str(timeout)]
    printed = cluster.kubectl("exec", "-n", namespace, CLIENT, "--", *command)
    return json.loads(printed.stdout.strip().splitlines()[-1])


def rewards(cluster, namespace: str, url: str, path: str, body: dict, token: str = "") -> dict:
    """The body of a 200 answer (anything else fails the test with the answer)."""
    answer = call(cluster, namespace, url, path, body, token)
    assert answer["status"] == 200, answer
    return answer["body"]


def finished(cluster, namespace: str, name: str) -> None:
    """Delete a served RewardModel and wait for its pods to go: the next one needs the node's cores (one that
    a test deleted already is no error)."""
    cluster.kubectl(
        "delete", "rewardmodel", name, "-n", namespace, "--ignore-not-found", "--wait=true", "--timeout=120s"
    )
    cluster.kubectl("wait", "--for=delete", "pod", "-n", namespace, "-l", f"serving.kserve.io/inferenceservice={name}",
                    "--timeout=120s", check=False)  # fmt: skip


# Run in the client pod: one TCP connection to host:port, opened and closed; the error (None: connected) and
# how long it took, as one JSON object.
CONNECT = textwrap.dedent(
    """
    import json, socket, sys, time
    host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    started = time.monotonic()
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        error = None
    except OSError as failed:
        error = f"{type(failed).__name__}: {failed}"
    print(json.dumps({"error": error, "ms": round((time.monotonic() - started) * 1000, 1)}))
    """
)


def connect(cluster, namespace: str, host: str, port: int, timeout: float = 3.0) -> dict:
    """Whether the client pod in ``namespace`` can open a TCP connection to ``host``:``port`` (a NetworkPolicy
    that refuses it makes it fail): {"error": None or why, "ms": how long it took}."""
    command = ["python", "-c", CONNECT, host, str(port), str(timeout)]
    printed = cluster.kubectl("exec", "-n", namespace, CLIENT, "--", *command)
    return json.loads(printed.stdout.strip().splitlines()[-1])


def score_kind(cluster, namespace: str, url: str, kind: str, references: dict[str, dict[str, dict]]) -> float:
    """Score ``reward_testing.scoring_cases``' items of one kind through ``url`` from the client pod (as a
    trainer sends them: ``/v1/rewards`` and OpenRLHF's ``/get_reward``) and return the largest |diff| to
    transformers' answers (``references``, the e2e fixture). A sequence model is the one served with the
    spec's own template (``SPEC_TEMPLATE``, chatTemplateMode gateway); the others with their tokenizer's."""
    want = references[kind]
    if kind == "process":
        items, names, query = (
            [{"prompt": PROMPT, "steps": STEPS}, {"messages": TAGGED}],
            ["steps", "tagged"],
            STEPPED_QUERY,
        )
    else:
        items, names = (
            [{"messages": CONVERSATION}, {"prompt": PROMPT, "response": RESPONSE}],
            ["conversation", "prompt_response"],
        )
        query = SPEC_QUERY if kind == "sequence" else OWN_QUERY
    answer = rewards(cluster, namespace, url, "/v1/rewards", {"items": items})
    openrlhf = rewards(cluster, namespace, url, "/get_reward", {"query": [query]})
    got = answer["rewards"] + openrlhf["rewards"]
    expected = [want[name]["reward"] for name in (*names, "query")]
    if kind == "process":  # each step's p_positive too, not only the weakest
        for scores, name in zip(answer["step_scores"], names, strict=True):
            got, expected = [*got, *scores], [*expected, *want[name]["step_scores"]]
    assert len(got) == len(expected), (answer, openrlhf)
    return max(abs(g - w) for g, w in zip(got, expected, strict=True))
