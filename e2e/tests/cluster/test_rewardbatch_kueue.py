"""A RewardBatch on a Kueue queue, with Kueue running for real (testenv.addons.kueue): held while its ClusterQueue has
no quota, run once it has. Kueue's own webhooks, Workload and scheduler decide; the operator only made the Job
suspended with the queue's label, and reports what Kueue did (kwok runs the pods).

Skipped where the control plane has no Kueue: a plain run (`make integration`) leaves it out; `make batch-kueue`
starts a control plane with it (TESTENV_KUEUE=1, without the real node)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.addons.kueue import Kueue
from testenv.helpers import condition, get_json

# the RewardModel's status.url is KServe's report; without Kueue, skipped before anything is made
pytestmark = pytest.mark.usefixtures("kserve_runs", "kueue_runs")

BATCH = yaml.safe_load((REPO / "manifests/samples/rewardbatch-best-of-n.yaml").read_text())
REWARD_MODEL = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
NAME = BATCH["metadata"]["name"]
CLAIM = "rlhf-data"
QUEUE = "team-a"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# The sample's Job: 4 pods at once (parallelism) of the worker's default cpu 500m and memory 512Mi each
ENOUGH = {"cpu": "4", "memory": "4Gi"}


def apply(cluster, manifest: dict, namespace: str | None = None):
    where = ("-n", namespace) if namespace else ()
    return cluster.kubectl("apply", *where, "-f", "-", input=yaml.safe_dump(manifest))


@pytest.fixture(scope="module")
def kueue_runs(cluster):
    """Kueue's manager and webhooks on the cluster; skipped where they are absent."""
    probe, missing = Kueue.probe
    if cluster.kubectl("get", probe, check=False).returncode != 0:
        pytest.skip(f"{missing}: needs Kueue on the control plane (`make batch-kueue`, or TESTENV_KUEUE=1)")


def cluster_queue(name: str, flavor: str, namespace: str, quota: dict[str, str]) -> dict:
    """A ClusterQueue for the namespace's LocalQueues alone, with ``quota`` of cpu and memory in one flavor."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{
                "coveredResources": sorted(quota),
                "flavors": [{
                    "name": flavor,
                    "resources": [{"name": resource, "nominalQuota": amount} for resource, amount in quota.items()],
                }],
            }],
        },
    }  # fmt: skip


@pytest.fixture
def queue(cluster, namespace) -> Iterator[dict]:
    """A ResourceFlavor, a ClusterQueue of no quota (cpu and memory 0) and the LocalQueue team-a in the namespace;
    the cluster-scoped two named after the namespace, removed afterwards."""
    flavor, name = f"{namespace}-flavor", f"{namespace}-queue"
    apply(cluster, {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}})
    no_quota = cluster_queue(name, flavor, namespace, {"cpu": "0", "memory": "0"})
    apply(cluster, no_quota)
    apply(cluster, {
        "apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": QUEUE},
        "spec": {"clusterQueue": name},
    }, namespace)  # fmt: skip
    try:
        yield no_quota
    finally:
        cluster.kubectl("delete", "rewardbatch", NAME, "-n", namespace, "--ignore-not-found", "--wait=true",
                        "--timeout=120s", check=False)  # fmt: skip
        cluster.kubectl("delete", "localqueue", QUEUE, "-n", namespace, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clusterqueue", name, "resourceflavor", flavor, "--ignore-not-found",
                        "--wait=false", check=False)  # fmt: skip


@pytest.fixture
def serving(cluster, namespace, operator) -> str:
    """The sample RewardModel, once KServe gave it an address (status.url), and the claim the sample batch names
    (no provisioner binds it: kwok's pods need no volume)."""
    apply(cluster, REWARD_MODEL, namespace)
    apply(cluster, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }, namespace)  # fmt: skip
    return wait_until(
        "the RewardModel's status.url",
        lambda: ((get_json(cluster, "rewardmodel", REWARD_MODEL["metadata"]["name"], "-n", namespace) or {})
                 .get("status", {}).get("url")),
        timeout=180,
    )  # fmt: skip


def batch_at(cluster, namespace: str, phase: str, admitted: str, reason: str, timeout: float = 180) -> dict:
    """The batch once its phase and its Admitted condition are these, for its generation."""
    seen: dict = {}

    def reached() -> dict | None:
        found = seen["batch"] = get_json(cluster, "rewardbatch", NAME, "-n", namespace) or {}
        status = found.get("status") or {}
        current = status.get("observedGeneration") == found.get("metadata", {}).get("generation")
        said = condition(found, "Admitted") or {}
        return found if current and (status.get("phase"), said.get("status"), said.get("reason")) == (
            phase, admitted, reason) else None  # fmt: skip

    try:
        return wait_until(f"RewardBatch {phase}, Admitted {admitted} ({reason})", reached, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; last status: {json.dumps(seen['batch'].get('status'), indent=1)}") from None


def workload_of(cluster, namespace: str, job: dict) -> dict | None:
    """The Workload Kueue made for ``job`` (owned by it)."""
    listed = get_json(cluster, "workloads.kueue.x-k8s.io", "-n", namespace) or {"items": []}
    uid = job["metadata"]["uid"]
    owned = [w for w in listed["items"] if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences", []))]
    assert len(owned) <= 1, [w["metadata"]["name"] for w in owned]
    return owned[0] if owned else None


def pods_of(cluster, namespace: str, job_name: str) -> list[dict]:
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}")
    return [pod for pod in (listed or {}).get("items", []) if not pod["metadata"].get("deletionTimestamp")]


def test_a_batch_waits_suspended_on_a_queue_without_quota_then_runs_once_kueue_admits_it(
    cluster, namespace, serving, queue
):
    queued = copy.deepcopy(BATCH)
    queued["spec"]["queueName"] = QUEUE
    applied = time.monotonic()
    apply(cluster, queued, namespace)
    found = batch_at(cluster, namespace, "Queued", "False", "AwaitingAdmission")
    queued_after = time.monotonic() - applied
    assert condition(found, "Complete")["reason"] == "AwaitingAdmission"
    job_name = found["status"]["job"]
    job = get_json(cluster, "job", job_name, "-n", namespace)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE

    # Kueue took the Job (its Workload, owned by the Job) and keeps it pending: no quota in its ClusterQueue
    def pending() -> dict | None:
        workload = workload_of(cluster, namespace, job)
        reserved = condition(workload, "QuotaReserved") or {}
        return workload if reserved.get("status") == "False" and reserved.get("message") else None

    workload = wait_until("Kueue's Workload for the Job, pending", pending, timeout=120)
    pending_after = time.monotonic() - applied
    reserved = condition(workload, "QuotaReserved")
    assert "insufficient quota" in reserved["message"], reserved
    assert (condition(workload, "Admitted") or {}).get("status") != "True"
    assert workload["spec"]["queueName"] == QUEUE
    [pod_set] = workload["spec"]["podSets"]
    assert pod_set["count"] == 4, pod_set  # the Job's parallelism
    # Kueue has decided, and the Job is still held, with no pods; the batch still says so
    job = get_json(cluster, "job", job_name, "-n", namespace)
    assert job["spec"]["suspend"] is True
    assert not pods_of(cluster, namespace, job_name)
    found = batch_at(cluster, namespace, "Queued", "False", "AwaitingAdmission", timeout=10)
    assert found["status"]["job"] == job_name

    # quota enough for the Job's four pods: Kueue admits the Workload and unsuspends the Job
    quota_given = time.monotonic()
    enough = copy.deepcopy(queue)
    enough["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [
        {"name": resource, "nominalQuota": amount} for resource, amount in ENOUGH.items()
    ]
    apply(cluster, enough)

    def admitted() -> dict | None:
        workload = workload_of(cluster, namespace, job)
        return workload if (condition(workload, "Admitted") or {}).get("status") == "True" else None

    workload = wait_until("Kueue's Workload admitted", admitted, timeout=120)
    admitted_after = time.monotonic() - quota_given
    assert (condition(workload, "QuotaReserved") or {}).get("status") == "True"
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["count"] == 4
    assert assignment["flavors"] == dict.fromkeys(("cpu", "memory"), f"{namespace}-flavor")

    made = wait_until("the Job's pods", lambda: pods_of(cluster, namespace, job_name) if len(
        pods_of(cluster, namespace, job_name)) == 4 else None, timeout=120)  # fmt: skip
    pods_after = time.monotonic() - quota_given
    assert get_json(cluster, "job", job_name, "-n", namespace)["spec"]["suspend"] is False
    indexes = sorted(int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for pod in made)
    assert indexes == [0, 1, 2, 3]

    running = batch_at(cluster, namespace, "Running", "True", "JobAdmitted", timeout=120)
    running_after = time.monotonic() - quota_given
    assert running["status"]["job"] == job_name, "the same Job, unsuspended: no second one"
    events = json.loads(
        cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                        f"involvedObject.name={NAME},involvedObject.kind=RewardBatch", "-o", "json").stdout
    )["items"]  # fmt: skip
    reasons = [event["reason"] for event in events]
    assert reasons.count("JobAdmitted") == 1, reasons
    print(
        f"\nKueue: applied -> Queued {queued_after:.1f}s, -> Workload pending (quota) {pending_after:.1f}s; "
        f"quota given -> Workload admitted {admitted_after:.1f}s -> 4 pods {pods_after:.1f}s "
        f"-> batch Running (JobAdmitted) {running_after:.1f}s"
    )
