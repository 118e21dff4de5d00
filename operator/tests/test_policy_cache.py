"""spec.cache: the cache's name, ModelCached from KServe's report, binding, users and node selection."""

from __future__ import annotations

import copy

import pytest

from reward_operator.api.cache import cache_identity, cache_name
from reward_operator.api.defaults import apply_defaults
from reward_operator.api.names import CACHE_USERS_ANNOTATION
from reward_operator.policy import cache as policy
from reward_operator.policy.dependencies import Observed, missing, references, selector_contradicts
from reward_operator.render import render_reward_model
from reward_testing.paths import golden_input

URI = "hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B"


def cache_with(copies=None, nodes=None, users=None):
    cache = {"kind": "LocalModelNamespaceCache", "metadata": {"name": "c", "annotations": {}}, "status": {}}
    if copies is not None:
        cache["status"]["copies"] = copies
    if nodes is not None:
        cache["status"]["nodeStatus"] = nodes
    if users is not None:
        cache["metadata"]["annotations"][CACHE_USERS_ANNOTATION] = policy.users_annotation(users)
    return cache


def test_one_name_per_uri_readable_and_within_kserves_label_limit():
    assert cache_name(URI) == cache_name(URI)
    assert cache_name(URI) != cache_name(URI + "-v2")
    assert cache_name(URI).startswith("skywork-reward-v2-llama-3-1-8b-")
    long = "s3://bucket/" + "x" * 300
    assert len(cache_name(long)) <= 63 and cache_name(long)[0].isalnum()


def test_the_cache_is_namespaced_unless_cluster_wide():
    model = golden_input("sequence-standard-cache")
    assert cache_identity(model) == ("LocalModelNamespaceCache", cache_name(URI), "rlhf")
    model["spec"]["cache"]["scope"] = "Cluster"
    assert cache_identity(model) == ("LocalModelCache", cache_name(URI), None)
    del model["spec"]["cache"]
    assert cache_identity(model) is None


@pytest.mark.parametrize(
    ("copies", "nodes", "status", "reason"),
    [
        (None, None, "Unknown", "Downloading"),  # KServe has not reported yet
        ({"total": 2, "available": 1}, {"n0": "NodeDownloaded", "n1": "NodeDownloading"}, "Unknown", "Downloading"),
        ({"total": 2, "available": 2}, {"n0": "NodeDownloaded", "n1": "NodeDownloaded"}, "True", "Downloaded"),
        ({"total": 2, "available": 1, "failed": 1}, {"n0": "NodeDownloaded", "n1": "NodeDownloadError"}, "False",
         "DownloadFailed"),
        ({"total": 0, "available": 0}, {}, "False", "NoNodes"),
        ({"total": 1, "available": 0}, {"n0": "NodeNotReady"}, "Unknown", "Downloading"),
    ],
)  # fmt: skip
def test_model_cached_follows_kserves_copies(copies, nodes, status, reason):
    condition = policy.model_cached(cache_with(copies, nodes))
    assert (condition.type, condition.status, condition.reason) == ("ModelCached", status, reason)


def test_a_failed_download_names_the_node():
    condition = policy.model_cached(
        cache_with({"total": 2, "available": 1, "failed": 1}, {"n0": "NodeDownloaded", "n1": "NodeDownloadError"})
    )
    assert "n1" in condition.message and "1/2" in condition.message


def test_a_conflict_is_reported_with_what_differs():
    message = policy.conflict({"modelSize": "8Gi", "nodeGroups": ["gpu"]}, {"modelSize": "16Gi", "nodeGroups": ["gpu"]})
    assert message is not None and "modelSize" in message and "nodeGroups" not in message
    condition = policy.model_cached(cache_with(), message)
    assert (condition.status, condition.reason) == ("False", "CacheConflict")
    assert (
        policy.conflict({"modelSize": "8Gi", "nodeGroups": ["gpu"]}, {"modelSize": "8Gi", "nodeGroups": ["gpu"]})
        is None
    )


def test_bound_only_once_filled_and_then_kept():
    filling = policy.model_cached(cache_with({"total": 2, "available": 1}, {"n0": "NodeDownloaded"}))
    filled = policy.model_cached(cache_with({"total": 1, "available": 1}, {"n0": "NodeDownloaded"}))
    assert not policy.bound(filling, None, "c")
    assert policy.bound(filled, None, "c")
    bound_isvc = {"metadata": {"labels": {"internal.serving.kserve.io/localmodel": "c"}}}
    assert policy.bound(filling, bound_isvc, "c")  # a node joining the group does not roll the predictor
    assert not policy.bound(filling, {"metadata": {"labels": {}}}, "c")
    held = policy.held(filling)
    assert (held.type, held.status, held.reason) == ("Ready", "Unknown", "AwaitingModelCache")
    failed = policy.held(policy.model_cached(cache_with({"total": 0}, {})))
    assert (failed.status, failed.reason) == ("False", "ModelCacheFailed")  # Degraded in Argo CD


def test_users_are_read_sorted_and_tolerate_garbage():
    assert policy.users(cache_with(users=["b/x", "a/y", "b/x"])) == ["a/y", "b/x"]
    broken = cache_with()
    broken["metadata"]["annotations"][CACHE_USERS_ANNOTATION] = "not json"
    assert policy.users(broken) == [] and policy.users(None) == []


def test_a_reward_model_uses_a_cache_while_it_exists_and_names_it():
    model = golden_input("sequence-standard-cache")
    identity = cache_identity(model)
    assert policy.uses(model, identity)
    assert not policy.uses(None, identity)
    deleting = copy.deepcopy(model)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not policy.uses(deleting, identity)
    other = copy.deepcopy(model)
    other["spec"]["model"]["uri"] = URI + "-v2"
    assert not policy.uses(other, identity)
    elsewhere = copy.deepcopy(model)
    elsewhere["metadata"]["namespace"] = "other"
    assert not policy.uses(elsewhere, identity)  # a namespaced cache serves its own namespace


def test_until_bound_the_inference_service_opts_out_of_kserves_binding():
    model = golden_input("sequence-standard-cache")
    isvc = next(c for c in render_reward_model(model, cache_bound=False) if c["kind"] == "InferenceService")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/disable-localmodel"] == "true"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/nodegroup"] == "gpu-h100"
    children = render_reward_model(model)
    assert children[0]["kind"] == "LocalModelNamespaceCache"  # made before the InferenceService
    isvc = next(c for c in children if c["kind"] == "InferenceService")
    assert "serving.kserve.io/disable-localmodel" not in isvc["metadata"]["annotations"]
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == URI  # KServe binds by this URI


AFFINITY = [{"matchExpressions": [{"key": "serving.kserve.io/nodegroup", "operator": "In", "values": ["gpu"]}]}]


@pytest.mark.parametrize(
    ("selector", "contradicts"),
    [
        ({}, False),
        ({"serving.kserve.io/nodegroup": "gpu"}, False),
        ({"nvidia.com/gpu.product": "H100"}, False),
        ({"serving.kserve.io/nodegroup": "cpu"}, True),
    ],
)
def test_node_selector_must_agree_with_the_node_groups_volume(selector, contradicts):
    assert selector_contradicts(AFFINITY, selector) is contradicts


def test_a_missing_node_group_or_a_contradicting_selector_is_invalid_spec():
    model = apply_defaults(golden_input("sequence-standard-cache"))
    model["spec"]["nodeSelector"] = {"serving.kserve.io/nodegroup": "cpu"}
    wanted = references(model, "vllm-reward")
    assert wanted.node_groups == ("gpu-h100", "gpu-a100")
    observed = Observed(runtime_found=True, secret_keys={"hf-token": {"HF_TOKEN"}})
    observed.node_groups = {"gpu-h100": AFFINITY, "gpu-a100": None}
    assert "LocalModelNodeGroup 'gpu-a100' not found" in missing("rlhf", wanted, observed)
    observed.node_groups["gpu-a100"] = []
    assert "spec.nodeSelector contradicts LocalModelNodeGroup 'gpu-h100'" in missing("rlhf", wanted, observed)
    model["spec"]["nodeSelector"] = {"serving.kserve.io/nodegroup": "gpu"}
    assert missing("rlhf", references(model, "vllm-reward"), observed) is None


def test_a_cache_no_longer_used_is_released():
    model = golden_input("sequence-standard-cache")
    assert policy.released(model) is None  # never reconciled with a cache
    identity = cache_identity(model)
    model["status"] = {"modelCache": policy.identity_status(identity)}
    assert policy.released(model) is None  # still in use
    changed = copy.deepcopy(model)
    changed["spec"]["model"]["uri"] = URI + "-v2"
    assert policy.released(changed) == identity
    removed = copy.deepcopy(model)
    del removed["spec"]["cache"]
    assert policy.released(removed) == identity
    cluster_wide = copy.deepcopy(model)
    cluster_wide["spec"]["cache"]["scope"] = "Cluster"
    assert policy.released(cluster_wide) == identity
    assert policy.identity_status(("LocalModelCache", "c", None)) == {"kind": "LocalModelCache", "name": "c"}
