"""spec.cache on a real control plane with KServe's manager, LocalModel controller and node agents.

KServe's controller makes the LocalModelNode objects and sums their status into the cache's; its
defaulting webhook binds an InferenceService to a cache at admission. KServe's node agent runs for
each kwok GPU node with a disk of its own: it starts the download Jobs, finds the model's folder on
its disk and reports per node. kwok stands in for the kubelet and ``testenv.addons.localmodel_downloads`` for the
download container; a test holds or fails a node's downloads through its disk (``NodeDisk``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.addons import localmodel
from testenv.helpers import condition, get_json, predictor_pod, wait_for_condition

GPU_NODES = ("kwok-gpu-0", "kwok-gpu-1")  # the node group "gpu" of testenv.addons.localmodel
MANAGED = "app.kubernetes.io/managed-by=reward-operator"
USERS = "serving.rlhf.dev/users"
BOUND = "internal.serving.kserve.io/localmodel"


@pytest.fixture(scope="module")
def cluster(localmodel_cluster):
    localmodel_cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))
    return localmodel_cluster


@contextmanager
def namespaces(cluster, count: int) -> Iterator[list[str]]:
    names = [f"c-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    for name in names:
        cluster.kubectl("create", "namespace", name)
        cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    try:
        yield names
    finally:
        for name in names:
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def disks(cluster) -> Iterator[dict[str, localmodel.NodeDisk]]:
    """The GPU nodes' disks, each node's downloads going through again after the test."""
    if cluster.directory is None:
        pytest.skip("steering downloads needs the local control plane's node disks")
    found = localmodel.node_disks(cluster.directory, list(GPU_NODES))
    yield found
    for disk in found.values():
        disk.let_downloads_through()


@pytest.fixture
def operator_log(tmp_path):
    return tmp_path / "operator.log"


def unique_uri() -> str:
    return f"hf://org/reward-{uuid.uuid4().hex[:8]}"


def apply_reward_model(cluster, namespace: str, name: str, uri: str, cached: bool = True, **cache) -> None:
    manifest = {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"uri": uri, "kind": "token"},
            "resources": {"gpus": 1, "cpu": "1", "memory": "8Gi"},
            "serving": {"mode": "Standard", "minReplicas": 1, "maxReplicas": 1},
        },
    }
    if cached:
        manifest["spec"]["cache"] = {"modelSize": "1Gi", "nodeGroups": ["gpu"], **cache}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def caches(cluster, namespace: str | None) -> list[dict]:
    """The caches the operator made: in ``namespace``, or the cluster-wide ones (None)."""
    if namespace is None:
        listed = get_json(cluster, "localmodelcaches", "-l", MANAGED)
    else:
        listed = get_json(cluster, "localmodelnamespacecaches", "-n", namespace, "-l", MANAGED)
    return (listed or {}).get("items", [])


def users(cache: dict) -> list[str]:
    return json.loads(cache["metadata"].get("annotations", {}).get(USERS, "[]"))


def the_cache(cluster, namespace: str | None, uri: str, expected_users: list[str]) -> dict:
    """Wait for the one cache of ``uri`` recorded with exactly ``expected_users``."""

    def found():
        of_uri = [c for c in caches(cluster, namespace) if c["spec"]["sourceModelUri"] == uri]
        assert len(of_uri) <= 1, f"more than one cache of {uri}: {[c['metadata']['name'] for c in of_uri]}"
        return of_uri[0] if of_uri and users(of_uri[0]) == sorted(expected_users) else None

    return wait_until(f"one cache of {uri} used by {expected_users}", found, timeout=60)


def cache_gone(cluster, namespace: str | None, uri: str) -> bool:
    return not [c for c in caches(cluster, namespace) if c["spec"]["sourceModelUri"] == uri]


def on_disks(disks: dict[str, localmodel.NodeDisk], uri: str) -> list[str]:
    """The nodes whose disk holds ``uri`` where KServe's agent finds it."""
    return [node for node, disk in disks.items() if uri in disk.cached_uris()]


def removed_from_disks(disks: dict[str, localmodel.NodeDisk], uri: str) -> None:
    wait_until(f"KServe's agents removing {uri} from the node disks", lambda: not on_disks(disks, uri), timeout=60)


def delete_reward_model(cluster, namespace: str, name: str, operator_stopped: bool = False) -> None:
    cluster.kubectl("delete", "rewardmodel", name, "-n", namespace, "--wait=false")
    if operator_stopped:
        # nobody removes kopf's finalizer while the operator is down: an admin does, so the
        # RewardModel is gone for good before the operator comes back
        cluster.kubectl(
            "patch", "rewardmodel", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
            check=False,
        )  # fmt: skip
    wait_until(
        f"RewardModel {namespace}/{name} gone", lambda: get_json(cluster, "rewardmodel", name, "-n", namespace) is None
    )


def test_two_reward_models_share_one_cache_which_goes_with_the_last(cluster, disks, start_operator, operator_log):
    uri = unique_uri()
    for disk in disks.values():
        disk.hold_downloads()  # a long download: the cache stays partly filled until the test goes on
    with namespaces(cluster, 1) as (ns,), start_operator(cluster, operator_log):
        apply_reward_model(cluster, ns, "rm-a", uri)
        apply_reward_model(cluster, ns, "rm-b", uri)
        cache = the_cache(cluster, ns, uri, [f"{ns}/rm-a", f"{ns}/rm-b"])
        owners = sorted(ref["name"] for ref in cache["metadata"]["ownerReferences"])
        assert owners == ["rm-a", "rm-b"]  # garbage collection removes it after both

        # KServe's agents download on both nodes: ModelCached follows, and no predictor starts on a
        # partial cache
        for name in ("rm-a", "rm-b"):
            wait_for_condition(cluster, ns, name, "ModelCached", "Unknown", "Downloading", saying="0/2 copies")
            ready = condition(get_json(cluster, "rewardmodel", name, "-n", ns))
            assert (ready["status"], ready["reason"]) == ("Unknown", "AwaitingModelCache")
        assert get_json(cluster, "inferenceservice", "rm-a", "-n", ns) is None

        # one node's download fails (its Job retries after Kubernetes' back-off), the other's lands
        disks["kwok-gpu-1"].fail_downloads("no space left on device")
        disks["kwok-gpu-0"].let_downloads_through()
        failed = wait_for_condition(cluster, ns, "rm-a", "ModelCached", "False", "DownloadFailed")
        assert "kwok-gpu-1" in failed["message"] and "1/2" in failed["message"]
        wait_for_condition(cluster, ns, "rm-a", "Ready", "False", "ModelCacheFailed")
        assert get_json(cluster, "inferenceservice", "rm-a", "-n", ns) is None
        assert on_disks(disks, uri) == ["kwok-gpu-0"]

        disks["kwok-gpu-1"].let_downloads_through()
        for name in ("rm-a", "rm-b"):
            wait_for_condition(cluster, ns, name, "ModelCached", "True", "Downloaded")
            wait_for_condition(cluster, ns, name, "Ready", "True", "InferenceServiceReady")
            isvc = get_json(cluster, "inferenceservice", name, "-n", ns)
            assert isvc["metadata"]["labels"][BOUND] == cache["metadata"]["name"]  # KServe's webhook bound it
            assert "serving.kserve.io/disable-localmodel" not in isvc["metadata"]["annotations"]
        # a cold start reads the node's copy: KServe's pod webhook mounts the cache's volume and adds no
        # storage-initializer to download the model
        pod = wait_until("rm-a's predictor pod", lambda: predictor_pod(cluster, ns, "rm-a"))
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                  if "persistentVolumeClaim" in v}  # fmt: skip
        assert list(claims.values()) == [f"{cache['metadata']['name']}-gpu"]
        mounts = [m for c in pod["spec"]["containers"] for m in c.get("volumeMounts", []) if m["name"] in claims]
        assert [m["mountPath"] for m in mounts] == ["/mnt/models"]
        assert not [c["name"] for c in pod["spec"].get("initContainers", []) if "storage-initializer" in c["name"]]

        delete_reward_model(cluster, ns, "rm-a")
        kept = the_cache(cluster, ns, uri, [f"{ns}/rm-b"])
        assert kept["metadata"]["uid"] == cache["metadata"]["uid"]
        assert condition(get_json(cluster, "rewardmodel", "rm-b", "-n", ns))["status"] == "True"

        assert on_disks(disks, uri) == list(GPU_NODES)

        delete_reward_model(cluster, ns, "rm-b")
        wait_until(f"the cache of {uri} removed after its last user", lambda: cache_gone(cluster, ns, uri))
        removed_from_disks(disks, uri)


def test_a_namespaced_cache_goes_when_its_users_go_while_the_operator_is_stopped(
    cluster, disks, start_operator, operator_log
):
    uri = unique_uri()
    with namespaces(cluster, 1) as (ns,):
        with start_operator(cluster, operator_log):
            apply_reward_model(cluster, ns, "rm-a", uri)
            apply_reward_model(cluster, ns, "rm-b", uri)
            the_cache(cluster, ns, uri, [f"{ns}/rm-a", f"{ns}/rm-b"])
            wait_for_condition(cluster, ns, "rm-a", "ModelCached", "True", "Downloaded")
        delete_reward_model(cluster, ns, "rm-a", operator_stopped=True)
        delete_reward_model(cluster, ns, "rm-b", operator_stopped=True)
        # Kubernetes' garbage collector, through the users' owner references: no operator needed
        wait_until(f"the cache of {uri} removed with no operator running", lambda: cache_gone(cluster, ns, uri))
        removed_from_disks(disks, uri)


def test_a_cluster_wide_cache_is_shared_across_namespaces_and_goes_with_the_last_user(
    cluster, disks, start_operator, operator_log
):
    uri = unique_uri()
    with namespaces(cluster, 2) as (ns1, ns2):
        with start_operator(cluster, operator_log):
            apply_reward_model(cluster, ns1, "rm-a", uri, scope="Cluster")
            apply_reward_model(cluster, ns2, "rm-b", uri, scope="Cluster")
            cache = the_cache(cluster, None, uri, [f"{ns1}/rm-a", f"{ns2}/rm-b"])
            assert caches(cluster, ns1) == [] and caches(cluster, ns2) == []
            for ns, name in ((ns1, "rm-a"), (ns2, "rm-b")):
                wait_for_condition(cluster, ns, name, "ModelCached", "True", "Downloaded")
                wait_for_condition(cluster, ns, name, "Ready", "True", "InferenceServiceReady")
                isvc = get_json(cluster, "inferenceservice", name, "-n", ns)
                assert isvc["metadata"]["labels"][BOUND] == cache["metadata"]["name"]

            delete_reward_model(cluster, ns1, "rm-a")
            the_cache(cluster, None, uri, [f"{ns2}/rm-b"])

        # the last user goes while the operator is stopped: nothing can own a cluster-scoped cache
        delete_reward_model(cluster, ns2, "rm-b", operator_stopped=True)
        wait_until(
            f"rm-b's InferenceService removed by the garbage collector in {ns2}",
            lambda: get_json(cluster, "inferenceservice", "rm-b", "-n", ns2) is None,
        )
        assert not cache_gone(cluster, None, uri)
        with start_operator(cluster, operator_log.with_name("restarted.log")):
            wait_until(
                f"the cluster-wide cache of {uri} removed once the operator is back",
                lambda: cache_gone(cluster, None, uri),
            )
            removed_from_disks(disks, uri)


def test_a_cache_added_later_reaches_the_serving_predictor_once_filled(cluster, disks, start_operator, operator_log):
    uri = unique_uri()
    with namespaces(cluster, 1) as (ns,), start_operator(cluster, operator_log):
        apply_reward_model(cluster, ns, "rm", uri, cached=False)
        wait_for_condition(cluster, ns, "rm", "Ready", "True", "InferenceServiceReady")
        assert BOUND not in get_json(cluster, "inferenceservice", "rm", "-n", ns)["metadata"]["labels"]

        for disk in disks.values():
            disk.hold_downloads()
        apply_reward_model(cluster, ns, "rm", uri)
        cache = the_cache(cluster, ns, uri, [f"{ns}/rm"])
        wait_for_condition(cluster, ns, "rm", "ModelCached", "Unknown", "Downloading")
        # still serving from its own download meanwhile, opted out of KServe's binding
        isvc = get_json(cluster, "inferenceservice", "rm", "-n", ns)
        assert isvc["metadata"]["annotations"].get("serving.kserve.io/disable-localmodel") == "true"
        assert BOUND not in isvc["metadata"]["labels"]
        wait_for_condition(cluster, ns, "rm", "Ready", "True", "InferenceServiceReady")

        for disk in disks.values():
            disk.let_downloads_through()

        def bound():
            found = get_json(cluster, "inferenceservice", "rm", "-n", ns)
            return found if found["metadata"]["labels"].get(BOUND) == cache["metadata"]["name"] else None

        isvc = wait_until("the InferenceService re-admitted and bound to the filled cache", bound, timeout=60)
        assert "serving.kserve.io/disable-localmodel" not in isvc["metadata"]["annotations"]
        wait_for_condition(cluster, ns, "rm", "ModelCached", "True", "Downloaded")


def test_a_node_group_that_does_not_exist_is_invalid_spec(cluster, start_operator, operator_log):
    with namespaces(cluster, 1) as (ns,), start_operator(cluster, operator_log):
        apply_reward_model(cluster, ns, "rm", unique_uri(), nodeGroups=["no-such-group"])
        ready = wait_for_condition(cluster, ns, "rm", "Ready", "False", "InvalidSpec")
        assert "LocalModelNodeGroup 'no-such-group' not found" in ready["message"]
        assert caches(cluster, ns) == []


def test_spec_cache_removed_releases_the_predictor_and_the_cache(cluster, disks, start_operator, operator_log):
    uri = unique_uri()
    with namespaces(cluster, 2) as (ns1, ns2), start_operator(cluster, operator_log):
        apply_reward_model(cluster, ns1, "rm-a", uri, scope="Cluster")
        apply_reward_model(cluster, ns2, "rm-b", uri, scope="Cluster")
        the_cache(cluster, None, uri, [f"{ns1}/rm-a", f"{ns2}/rm-b"])
        for ns, name in ((ns1, "rm-a"), (ns2, "rm-b")):
            wait_for_condition(cluster, ns, name, "Ready", "True", "InferenceServiceReady")
        assert on_disks(disks, uri) == list(GPU_NODES)

        def unbound(ns: str, name: str):
            isvc = get_json(cluster, "inferenceservice", name, "-n", ns)
            return isvc if BOUND not in isvc["metadata"]["labels"] else None

        # one user leaves: its predictor reads from its own download again (KServe would otherwise
        # keep it bound while the cache exists), the other keeps the cache
        apply_reward_model(cluster, ns1, "rm-a", uri, cached=False)
        wait_until("rm-a's InferenceService unbound from the cache", lambda: unbound(ns1, "rm-a"))
        the_cache(cluster, None, uri, [f"{ns2}/rm-b"])
        wait_until(
            "rm-a's ModelCached removed with spec.cache",
            lambda: condition(get_json(cluster, "rewardmodel", "rm-a", "-n", ns1), "ModelCached") is None,
        )

        # the last user leaves: KServe's webhook would refuse to delete a cache an InferenceService uses
        apply_reward_model(cluster, ns2, "rm-b", uri, cached=False)
        wait_until("rm-b's InferenceService unbound from the cache", lambda: unbound(ns2, "rm-b"))
        wait_until(f"the cluster-wide cache of {uri} removed", lambda: cache_gone(cluster, None, uri))
        removed_from_disks(disks, uri)
        for ns, name in ((ns1, "rm-a"), (ns2, "rm-b")):
            wait_for_condition(cluster, ns, name, "Ready", "True", "InferenceServiceReady")
