"""The shared controller runner with the cluster layer replaced (unit level; the
real thing runs in e2e/tests/cluster/test_rewardmodel_operator.py)."""

from __future__ import annotations

import copy
import logging
import threading

import kopf
import pytest
from prometheus_client import CollectorRegistry

from reward_operator.api import API_VERSION, REWARD_MODEL_KIND, conditions
from reward_operator.cluster import ClusterError
from reward_operator.controllers import runner as runner_module
from reward_operator.controllers.runner import Outcome, Runner, child_version
from reward_operator.metrics import OperatorMetrics
from reward_operator.policy.status import Condition, not_ready
from reward_testing.fake_cluster import FakeCluster

LOG = logging.getLogger("test")
INVALID = not_ready(conditions.INVALID_SPEC, "runtime missing")


@pytest.fixture
def fake_cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.put(
        {
            "apiVersion": API_VERSION,
            "kind": REWARD_MODEL_KIND,
            "metadata": {"name": "rm", "namespace": "ns", "generation": 1},
        }
    )
    return fake


def stored(cluster: FakeCluster) -> dict:
    return cluster.stored(REWARD_MODEL_KIND, "rm", "ns")


def make_runner(cluster: FakeCluster, sync, registry=None) -> tuple[Runner, OperatorMetrics, CollectorRegistry]:
    registry = registry or CollectorRegistry()
    metrics = OperatorMetrics([REWARD_MODEL_KIND], registry)
    return Runner(API_VERSION, REWARD_MODEL_KIND, sync, lambda obj: obj, metrics, cluster), metrics, registry


def sample(registry: CollectorRegistry, metric: str, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


def test_status_written_once_and_event_only_on_transition(fake_cluster):
    runner, _, registry = make_runner(fake_cluster, lambda obj, logger, child: Outcome(INVALID, {}, "invalid"))
    assert runner.reconcile("ns", "rm", LOG) == "invalid"
    assert len(fake_cluster.status_patches) == 1 and fake_cluster.event_reasons == [("Warning", "InvalidSpec")]
    assert runner.reconcile("ns", "rm", LOG) == "invalid"
    assert len(fake_cluster.status_patches) == 1, "an unchanged status is not written again"
    assert len(fake_cluster.event_reasons) == 1, "no second event without a transition"
    assert (
        sample(registry, "reward_operator_reconcile_total", kind=REWARD_MODEL_KIND, result="invalid", scope="full") == 2
    )


def test_stale_status_fields_are_cleared(fake_cluster):
    stored(fake_cluster)["status"] = {"url": "http://old", "observedGeneration": 1, "conditions": []}
    runner, _, _ = make_runner(fake_cluster, lambda obj, logger, child: Outcome(INVALID, {}, "invalid"))
    runner.reconcile("ns", "rm", LOG)
    assert fake_cluster.status_patches[0]["url"] is None


def test_a_gone_object_is_not_synced(fake_cluster):
    fake_cluster.delete(REWARD_MODEL_KIND, "rm", "ns")
    runner, _, _ = make_runner(fake_cluster, lambda obj, logger, child: pytest.fail("synced a deleted object"))
    assert runner.reconcile("ns", "rm", LOG) == "deleted"


def test_api_errors_become_a_calm_retry(fake_cluster):
    def sync(obj, logger, child):
        raise ClusterError(503, "Service Unavailable", "etcd leader changed")

    runner, _, registry = make_runner(fake_cluster, sync)
    with pytest.raises(kopf.TemporaryError) as raised:
        runner.reconcile("ns", "rm", LOG)
    assert raised.value.delay == runner_module.RETRY_DELAY
    assert sample(registry, "reward_operator_reconcile_errors_total", kind=REWARD_MODEL_KIND) == 1
    assert fake_cluster.status_patches == [], "no status written from a failed reconcile"


def test_metrics_follow_the_object_and_leave_with_it(fake_cluster):
    ready = Condition("Ready", "True", conditions.INFERENCE_SERVICE_READY, "ok")
    runner, _, registry = make_runner(fake_cluster, lambda obj, logger, child: Outcome(ready, {}, "ready"))
    object_labels = {"kind": REWARD_MODEL_KIND, "namespace": "ns", "name": "rm"}
    runner.remember("ns", "rm", {**stored(fake_cluster), "metadata": {"name": "rm", "namespace": "ns", "generation": 3},
                                "status": {"observedGeneration": 2}})  # fmt: skip
    assert sample(registry, "reward_operator_object_generation_lag", **object_labels) == 1
    assert sample(registry, "reward_operator_object_ready", **object_labels) is None, "not decided yet"

    runner.reconcile("ns", "rm", LOG)
    assert sample(registry, "reward_operator_object_ready", **object_labels) == 1
    counts = {
        state: sample(registry, "reward_operator_objects", kind=REWARD_MODEL_KIND, ready=state)
        for state in ("True", "False", "Unknown")
    }
    assert counts == {"True": 1, "False": 0, "Unknown": 0}

    runner.forget("ns", "rm")
    runner.forget("ns", "rm")  # a second DELETED event changes nothing
    assert sample(registry, "reward_operator_object_ready", **object_labels) is None
    assert sample(registry, "reward_operator_object_generation_lag", **object_labels) is None
    assert sample(registry, "reward_operator_objects", kind=REWARD_MODEL_KIND, ready="True") == 0
    assert runner._records == {}, "what is kept of the object (its lock too) goes with it"


def test_forget_waits_for_a_reconcile_in_flight(fake_cluster):
    """A reconcile that read the object just before its deletion records first; forget removes after."""
    entered, release = threading.Event(), threading.Event()
    ready = Condition("Ready", "True", conditions.INFERENCE_SERVICE_READY, "ok")

    def slow_sync(obj, logger, child):
        entered.set()
        release.wait(10)
        return Outcome(ready, {}, "ready")

    runner, _, registry = make_runner(fake_cluster, slow_sync)
    reconcile = threading.Thread(target=runner.reconcile, args=("ns", "rm", LOG))
    reconcile.start()
    assert entered.wait(10)
    forget = threading.Thread(target=runner.forget, args=("ns", "rm"))
    forget.start()
    release.set()
    reconcile.join(10)
    forget.join(10)
    labels = {"kind": REWARD_MODEL_KIND, "namespace": "ns", "name": "rm"}
    assert sample(registry, "reward_operator_object_ready", **labels) is None


def test_a_reconcile_reads_the_watchs_copy_not_the_api_server(fake_cluster):
    runner, _, _ = make_runner(fake_cluster, lambda obj, logger, child: Outcome(INVALID, {}, "invalid"))
    runner.remember("ns", "rm", dict(stored(fake_cluster)))
    assert runner.reconcile("ns", "rm", LOG) == "invalid"
    assert fake_cluster.count("get") == 0, "read from the API server"


def test_the_watchs_copy_is_kept_without_the_field_managers_bookkeeping(fake_cluster):
    seen = []
    runner, _, _ = make_runner(
        fake_cluster, lambda obj, logger, child: seen.append(obj) or Outcome(INVALID, {}, "invalid")
    )
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    body = {**stored(fake_cluster), "metadata": {**stored(fake_cluster)["metadata"], "managedFields": managed}}
    runner.remember("ns", "rm", body)
    runner.reconcile("ns", "rm", LOG)
    assert fake_cluster.count("get") == 0, "read from the API server"
    assert "managedFields" not in seen[0]["metadata"]
    assert seen[0]["metadata"]["name"] == "rm" and body["metadata"]["managedFields"] == managed, "kopf's body untouched"


def test_the_status_written_stands_until_the_watch_brings_it_back(fake_cluster):
    """A reconcile between our status write and its watch event neither writes it twice nor
    posts its event twice."""
    before = copy.deepcopy(stored(fake_cluster))  # the watch's copy, without the status about to be written
    runner, _, _ = make_runner(fake_cluster, lambda obj, logger, child: Outcome(INVALID, {}, "invalid"))
    runner.remember("ns", "rm", before)
    runner.reconcile("ns", "rm", LOG)
    runner.reconcile("ns", "rm", LOG)  # the watch has not delivered the write yet
    assert len(fake_cluster.status_patches) == 1 and len(fake_cluster.event_reasons) == 1

    runner.remember("ns", "rm", copy.deepcopy(stored(fake_cluster)))  # the write comes back
    someone_else = copy.deepcopy(stored(fake_cluster))
    someone_else["status"] = {}  # then the status is cleared by hand
    runner.remember("ns", "rm", someone_else)
    runner.reconcile("ns", "rm", LOG)
    assert len(fake_cluster.status_patches) == 2, "the watch's newer copy counts once it has caught up"


@pytest.mark.parametrize("watch", ["before the response", "after the response", "not yet"])
def test_triggers_racing_at_kserves_ready_post_one_ready_event(fake_cluster, monkeypatch, watch):
    """KServe's Ready wakes several triggers at once (the InferenceService's watch, the predictor
    Deployment's, kopf's own handler): one status write and one Ready event, whenever the watch brings
    the write back (even before the runner has recorded it), and then no more on a later reconcile."""
    ready = Condition("Ready", "True", conditions.INFERENCE_SERVICE_READY, "InferenceService rm is Ready")
    runner, _, _ = make_runner(fake_cluster, lambda obj, logger, child: Outcome(ready, {"replicas": 1}, "ready"))
    runner.remember("ns", "rm", copy.deepcopy(stored(fake_cluster)))  # the watch's copy: no status yet
    patch = fake_cluster.patch_status

    def patch_and_watch(*args):
        written = patch(*args)
        if watch == "before the response":
            runner.remember("ns", "rm", copy.deepcopy(written))
        return written

    monkeypatch.setattr(fake_cluster, "patch_status", patch_and_watch)
    triggers = [threading.Thread(target=runner.reconcile, args=("ns", "rm", LOG)) for _ in range(8)]
    for trigger in triggers:
        trigger.start()
    for trigger in triggers:
        trigger.join(10)
    if watch == "after the response":
        runner.remember("ns", "rm", copy.deepcopy(stored(fake_cluster)))
    runner.reconcile("ns", "rm", LOG)  # a later change, handled
    assert len(fake_cluster.status_patches) == 1
    assert fake_cluster.event_reasons == [("Normal", conditions.INFERENCE_SERVICE_READY)]


ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "rm", "namespace": "ns"},
}


def isvc(ready: bool, version: str) -> dict:
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {**ISVC, "metadata": {**ISVC["metadata"], "resourceVersion": version}, "status": status}


@pytest.fixture
def stored_isvc(fake_cluster):
    """The InferenceService as the API server holds it, beside the RewardModel."""
    fake_cluster.put(isvc(True, "30"))
    return fake_cluster


def isvc_reads(cluster: FakeCluster) -> int:
    return sum(1 for method, kind, _ in cluster.calls if (method, kind) == ("get", "InferenceService"))


def sync_from_inference_service(cluster: FakeCluster, decided_from: list | None = None):
    """The RewardModel's sync, reduced to Ready from KServe's report: from the child's copy on its event, else
    as stored (the full reconcile's read); its Outcome names the version it decided from."""

    def sync(obj, logger, child):
        if decided_from is not None:
            decided_from.append(child)
        if child is not None and child["kind"] == ISVC["kind"]:
            found = child
        else:  # a full reconcile, or a trigger such as the predictor's Deployment: read as stored
            found = cluster.get(ISVC["apiVersion"], ISVC["kind"], "rm", "ns")
        read = (child_version(found),) if found is not None else ()
        if found is not None and found["status"]["conditions"][0]["status"] == "True":
            ready = Condition("Ready", "True", conditions.INFERENCE_SERVICE_READY, "ready")
            return Outcome(ready, {}, "ready", decided_from=read)
        starting = Condition("Ready", "False", "MinimumReplicasUnavailable", "starting")
        return Outcome(starting, {}, "progressing", decided_from=read)

    return sync


def deliver(runner: Runner, copy_: dict, reconciled: bool = True) -> None:
    """The InferenceService's watch event as its handler takes it: every copy observed, and the owner
    reconciled for it (unless nothing a reconcile reads changed: the echo of our own apply)."""
    runner.remember_child("ns", "rm", copy_)
    if reconciled:
        runner.reconcile("ns", "rm", LOG, changed_child=copy_)


def test_a_stale_copy_of_the_child_does_not_take_ready_back(fake_cluster, stored_isvc):
    """An InferenceService event waited (for the lock, or in kopf's queue) while a reconcile from another
    trigger read the InferenceService Ready and announced it: its older copy takes Ready back to starting
    neither in the status nor in an event, and Ready is announced once (the demo's double
    InferenceServiceReady, with a progress event between)."""
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    older = isvc(False, "20")
    runner.remember_child("ns", "rm", older)  # delivered; its handler waits for the lock...
    runner.reconcile("ns", "rm", LOG)  # ...held by the RewardModel's own trigger, which reads version 30, Ready
    runner.reconcile("ns", "rm", LOG, changed_child=older)  # the older event, handled late
    deliver(runner, isvc(True, "30"))  # then the newer one
    assert fake_cluster.event_reasons == [("Normal", conditions.INFERENCE_SERVICE_READY)]
    assert len(fake_cluster.status_patches) == 1


def test_copies_queued_before_a_read_are_not_decided_from(fake_cluster, stored_isvc):
    """The events kopf queued while another trigger read the InferenceService are older than that read:
    read again until the watch delivers the version read; from there on, copies are used as delivered."""
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    runner.reconcile("ns", "rm", LOG)  # reads version 30, Ready
    reads = isvc_reads(fake_cluster)
    for queued in (isvc(False, "10"), isvc(False, "20")):
        deliver(runner, queued)
    assert isvc_reads(fake_cluster) == reads + 2
    deliver(runner, isvc(True, "30"))  # the watch has caught up
    fake_cluster.put(isvc(False, "40"))
    deliver(runner, isvc(False, "40"))  # news, as delivered
    assert isvc_reads(fake_cluster) == reads + 2
    assert fake_cluster.event_reasons == [
        ("Normal", conditions.INFERENCE_SERVICE_READY),
        ("Normal", "MinimumReplicasUnavailable"),
    ]


def test_copies_after_a_read_the_watch_has_delivered_cost_no_read(fake_cluster, stored_isvc):
    """Another trigger read the version the watch had delivered already (or delivers as the echo of our
    apply, which no reconcile follows): the next copies are newer (kopf keeps an object's events in order),
    used as delivered, and a real transition is announced once."""
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    runner.reconcile("ns", "rm", LOG)  # first, so the owner is known; reads version 30
    deliver(runner, isvc(True, "30"), reconciled=False)  # e.g. the echo of an apply
    runner.reconcile("ns", "rm", LOG)  # another trigger reads version 30 again: delivered already
    reads = isvc_reads(fake_cluster)
    fake_cluster.put(isvc(False, "40"))
    deliver(runner, isvc(False, "40"))  # the predictor lost its replicas
    deliver(runner, isvc(False, "41"))
    assert isvc_reads(fake_cluster) == reads, "no read: every copy is newer than the last read"
    assert fake_cluster.event_reasons == [
        ("Normal", conditions.INFERENCE_SERVICE_READY),
        ("Normal", "MinimumReplicasUnavailable"),
    ]


def test_a_copy_after_an_awaited_version_the_watch_skipped_costs_one_read(fake_cluster, stored_isvc):
    """kopf may batch an object's events and hand over only the last: the version read is never delivered,
    and the next copy, not known to be newer (versions are compared only for equality), is read once."""
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    runner.reconcile("ns", "rm", LOG)  # reads version 30
    reads = isvc_reads(fake_cluster)
    fake_cluster.put(isvc(True, "50"))
    deliver(runner, isvc(True, "50"))  # 30 never delivered
    deliver(runner, isvc(True, "51"))
    assert isvc_reads(fake_cluster) == reads + 1
    assert fake_cluster.event_reasons == [("Normal", conditions.INFERENCE_SERVICE_READY)]


def test_a_child_the_sync_does_not_decide_from_is_never_read(fake_cluster, stored_isvc):
    """A predictor Deployment's copy only triggers the sync, which reads the InferenceService itself: the
    runner reads a changed child again only where an Outcome named a version of it."""
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    runner.reconcile("ns", "rm", LOG)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rm-predictor",
                  "namespace": "ns", "resourceVersion": "5"}}  # fmt: skip
    decided_from: list = []
    runner.sync = sync_from_inference_service(fake_cluster, decided_from)
    runner.reconcile("ns", "rm", LOG, changed_child=deployment)
    assert decided_from == [deployment], "as delivered"
    assert ("get", "Deployment", "rm-predictor") not in fake_cluster.calls
    assert isvc_reads(fake_cluster) == 2, "the InferenceService as each sync read it"


def test_a_child_gone_meanwhile_is_decided_without_it(fake_cluster, stored_isvc):
    decided_from: list = []
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster, decided_from))
    runner.reconcile("ns", "rm", LOG)  # reads version 30
    fake_cluster.delete("InferenceService", "rm", "ns")
    deliver(runner, isvc(True, "20"))  # older than that read: read again, and it is gone
    assert decided_from == [None, None], "the sync restores it, as after its deletion"


def test_a_forgotten_object_keeps_nothing_of_its_children(fake_cluster, stored_isvc):
    runner, _, _ = make_runner(fake_cluster, sync_from_inference_service(fake_cluster))
    runner.reconcile("ns", "rm", LOG)
    deliver(runner, isvc(True, "30"), reconciled=False)
    runner.forget("ns", "rm")
    deliver(runner, isvc(True, "31"), reconciled=False)  # a late event of the child, its owner gone
    assert runner._records == {}, "nor of its children"
