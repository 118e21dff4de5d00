"""RewardBatch on the real API server: its CRD's rules, and the operator's Indexed Job as Kubernetes' own Job
controller and garbage collector handle it (kwok runs the pods, which never finish here: the shards' scoring,
figures and kills are the real node's, e2e/suites/batch)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from reward_testing.paths import REPO
from reward_testing.waiting import wait_until
from testenv.helpers import condition, get_json

pytestmark = pytest.mark.usefixtures("kserve_runs")  # the RewardModel's status.url is KServe's report

BATCH = yaml.safe_load((REPO / "manifests/samples/rewardbatch-best-of-n.yaml").read_text())
REWARD_MODEL = yaml.safe_load((REPO / "manifests/samples/rewardmodel-sequence-standard.yaml").read_text())
NAME = BATCH["metadata"]["name"]
CLAIM = "rlhf-data"


def apply(cluster, namespace: str, manifest: dict, check: bool = True):
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=check)


def claim(cluster, namespace: str) -> None:
    """The claim the sample names (no provisioner binds it: kwok's pods need no volume)."""
    apply(cluster, namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip


def batch_status(cluster, namespace: str, phase: str, reason: str, timeout: float = 180) -> dict:
    """The batch once its phase and Complete's reason are these, for its generation."""

    def reached() -> dict | None:
        found = get_json(cluster, "rewardbatch", NAME, "-n", namespace) or {}
        complete = condition(found, "Complete") or {}
        status = found.get("status") or {}
        current = status.get("observedGeneration") == found.get("metadata", {}).get("generation")
        return found if current and (status.get("phase"), complete.get("reason")) == (phase, reason) else None

    seen: dict = {}

    def noting() -> dict | None:
        seen["status"] = (get_json(cluster, "rewardbatch", NAME, "-n", namespace) or {}).get("status")
        return reached()

    try:
        return wait_until(f"RewardBatch {phase} ({reason})", noting, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; last status: {json.dumps(seen.get('status'), indent=1)}") from None


@pytest.fixture
def serving(cluster, namespace, operator) -> str:
    """The sample RewardModel, once KServe gave it an address (status.url)."""
    apply(cluster, namespace, REWARD_MODEL)
    found = wait_until(
        "the RewardModel's status.url",
        lambda: (
            (get_json(cluster, "rewardmodel", REWARD_MODEL["metadata"]["name"], "-n", namespace) or {})
            .get("status", {})
            .get("url")
        ),
        timeout=180,
    )
    return found


def test_the_api_server_refuses_what_the_schema_refuses_with_the_field_named(cluster, namespace):
    bad = copy.deepcopy(BATCH)
    bad["spec"]["parallelism"] = 9
    refused = apply(cluster, namespace, bad, check=False)
    assert refused.returncode != 0 and "spec.parallelism must be at most spec.shards" in refused.stderr
    bad = copy.deepcopy(BATCH)
    bad["spec"]["input"]["uri"] = "gs://bucket/samples.jsonl"
    refused = apply(cluster, namespace, bad, check=False)
    assert refused.returncode != 0 and "spec.input.uri must be pvc://<claim>/<path>" in refused.stderr
    bad = copy.deepcopy(BATCH)
    bad["spec"]["output"]["uri"] = "https://data.example/scored"
    refused = apply(cluster, namespace, bad, check=False)
    assert refused.returncode != 0 and "spec.output.uri must be pvc://<claim>/<path>" in refused.stderr
    # a presigned URL's query is a file's address too (the rule's regex as the API server's CEL reads it)
    fine = copy.deepcopy(BATCH)
    fine["metadata"]["name"] = "from-the-web"
    fine["spec"]["input"] = {
        "uri": "https://data.example/round-3/samples.parquet?X-Amz-Signature=abc",
        "format": "parquet",
    }
    apply(cluster, namespace, fine)
    # admitted, then immutable
    apply(cluster, namespace, BATCH)
    changed = copy.deepcopy(BATCH)
    changed["spec"]["shards"] = 4
    changed["spec"]["parallelism"] = 4
    refused = apply(cluster, namespace, changed, check=False)
    assert refused.returncode != 0 and "spec is immutable" in refused.stderr
    listed = cluster.kubectl("get", "rwb", "-n", namespace).stdout
    assert listed.split("\n")[0].split() == ["NAME", "PHASE", "PROGRESS", "MODEL", "AGE"]


def test_a_batch_waits_for_its_claim_then_runs_one_indexed_job_that_goes_with_it(cluster, namespace, serving):
    apply(cluster, namespace, BATCH)
    waiting = batch_status(cluster, namespace, "Pending", "PersistentVolumeClaimNotFound")
    assert CLAIM in condition(waiting, "Complete")["message"]
    assert condition(waiting, "Admitted")["status"] == "False"
    claim(cluster, namespace)  # the re-check timer finds it

    running = batch_status(cluster, namespace, "Running", "Scoring")
    job_name = running["status"]["job"]
    job = get_json(cluster, "job", job_name, "-n", namespace)
    # the Job as the API server admitted it: its pod failure policy and per-index retries validated
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == (
        "Indexed", 8, 4, 3,
    )  # fmt: skip
    assert [rule["action"] for rule in spec["podFailurePolicy"]["rules"]] == ["FailIndex", "Ignore"]
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RewardBatch", NAME, True)
    args = spec["template"]["spec"]["containers"][0]["args"]
    assert f"--url={serving}" in args and "--shard=$(JOB_COMPLETION_INDEX)" in args

    # the Job controller made one pod per index up to the parallelism, each with its index
    def pods() -> list[dict]:
        listed = get_json(cluster, "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}")
        return [pod for pod in (listed or {}).get("items", []) if not pod["metadata"].get("deletionTimestamp")]

    made = wait_until("the Job's pods", lambda: pods() if len(pods()) == 4 else None, timeout=120)
    indexes = sorted(int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for pod in made)
    assert indexes == [0, 1, 2, 3]
    env = {e["name"] for e in made[0]["spec"]["containers"][0].get("env", [])}
    assert "JOB_COMPLETION_INDEX" in env, "the Job controller sets the index the worker's --shard expands"

    running = batch_status(cluster, namespace, "Running", "Scoring")
    assert condition(running, "Admitted")["status"] == "True"
    assert running["status"]["shards"]["active"] == 4
    assert running["status"]["progress"] == "0 rows (0 failed), 0/8 shards"
    reasons = [
        event["reason"]
        for event in json.loads(
            cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                            f"involvedObject.name={NAME},involvedObject.kind=RewardBatch", "-o", "json").stdout
        )["items"]
    ]  # fmt: skip
    assert reasons.count("JobAdmitted") == 1, reasons

    # the batch goes, and with it (the garbage collector) its Job and the Job's pods
    cluster.kubectl("delete", "rewardbatch", NAME, "-n", namespace, "--wait=true", "--timeout=120s")
    wait_until("the Job gone", lambda: get_json(cluster, "job", job_name, "-n", namespace) is None, timeout=120)
    wait_until("the Job's pods gone", lambda: not pods(), timeout=120)


def test_a_batch_on_a_queue_waits_suspended(cluster, namespace, serving):
    claim(cluster, namespace)
    queued = copy.deepcopy(BATCH)
    queued["spec"]["queueName"] = "team-a"
    apply(cluster, namespace, queued)
    found = batch_status(cluster, namespace, "Queued", "AwaitingAdmission")
    job = get_json(cluster, "job", found["status"]["job"], "-n", namespace)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert not get_json(
        cluster, "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job['metadata']['name']}"
    )["items"]
