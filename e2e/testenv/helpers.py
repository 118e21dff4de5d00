"""Small helpers for tests that talk to a cluster: lookups, and waits on a RewardModel's status."""

from __future__ import annotations

import json
import urllib.request

import yaml

from reward_testing.waiting import wait_until

from .diagnose import explained

# KServe's workloads for one InferenceService carry this label (its value: the InferenceService's name).
ISVC_LABEL = "serving.kserve.io/inferenceservice"
GATEWAY_PREFIX = "REWARD_GATEWAY_"


def answers_ok(url: str) -> bool:
    """Whether a plain GET of ``url`` answers 200 now (a health endpoint of a process on the host)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def get_json(cluster, *args: str) -> dict | None:
    """`kubectl get ... -o json`, or None when it is not there."""
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(obj: dict | None, type_: str = "Ready") -> dict | None:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item
    return None


def wait_for_ready(cluster, namespace: str, name: str, generation: int | None = None, timeout: float = 120) -> dict:
    """The RewardModel once it is Ready=True for its current (or the given) generation."""

    def ready() -> dict | None:
        obj = get_json(cluster, "rewardmodel", name, "-n", namespace)
        if obj is None:
            return None
        found = condition(obj) or {}
        wanted = generation or obj["metadata"]["generation"]
        return obj if found.get("status") == "True" and found.get("observedGeneration") == wanted else None

    with explained(cluster.kubectl, namespace):
        return wait_until(f"{name} Ready=True through KServe", ready, timeout=timeout)


def wait_for_condition(
    cluster, namespace: str, name: str, type_: str, status: str, reason: str, saying: str = "", timeout: float = 120
) -> dict:
    """The RewardModel's condition ``type_`` once it has this status and reason, its message holding ``saying``."""

    def reached() -> dict | None:
        found = condition(get_json(cluster, "rewardmodel", name, "-n", namespace), type_) or {}
        matches = (found.get("status"), found.get("reason")) == (status, reason)
        return found if matches and saying in found.get("message", "") else None

    with explained(cluster.kubectl, namespace):
        return wait_until(f"{namespace}/{name} {type_}={status} ({reason}) {saying}", reached, timeout=timeout)


def predictor_pod(cluster, namespace: str, isvc: str, deployment: str | None = None) -> dict | None:
    """A pod of the InferenceService's predictor; with ``deployment``, one of that Deployment of KServe's
    (the stable's or the canary's), by its name: <deployment>-<ReplicaSet hash>-<suffix>."""
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={isvc},component=predictor") or {}
    prefix = f"{deployment}-"
    return next(
        (
            pod
            for pod in listed.get("items") or []
            if deployment is None
            or (pod["metadata"]["name"].startswith(prefix) and pod["metadata"]["name"][len(prefix) :].count("-") == 1)
        ),
        None,
    )


def gateway_env(cluster, namespace: str, isvc: str, only: str = "") -> dict[str, str]:
    """The REWARD_GATEWAY_<only>* variables of the transformer Deployment KServe made for ``isvc``, named
    without REWARD_GATEWAY_; empty while there is none."""
    deployment = get_json(cluster, "deployment", f"{isvc}-transformer", "-n", namespace)
    if deployment is None:
        return {}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        variable["name"].removeprefix(GATEWAY_PREFIX): variable.get("value", "")
        for variable in container.get("env", [])
        if variable["name"].startswith(GATEWAY_PREFIX + only)
    }


def server_dry_run(cluster, docs: list[dict], namespace: str | None = None) -> str:
    """CRDs and Namespaces for real (nothing else could be checked against them), the rest dry-run.

    --force-conflicts: earlier tests of the session may have installed the same CRDs
    with helm, as a user switching install methods would have.
    """
    first = [doc for doc in docs if doc["kind"] in ("CustomResourceDefinition", "Namespace")]
    if first:
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", "-",
            input=yaml.safe_dump_all(first),
        )  # fmt: skip
    scope = ["-n", namespace] if namespace else []
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "--field-manager=e2e", *scope, "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout
    return result.stdout


def deployment_replicas(apps, namespace: str, name: str) -> tuple[int, int]:
    """A Deployment's (spec.replicas, readyReplicas) through ``apps`` (kubernetes' AppsV1Api); (-1, 0)
    while it does not exist."""
    from kubernetes.client.exceptions import ApiException

    try:
        found = apps.read_namespaced_deployment(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return -1, 0
        raise
    return found.spec.replicas, found.status.ready_replicas or 0
