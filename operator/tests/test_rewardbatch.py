"""RewardBatch: the Job it renders, and its reconcile on a fake cluster (the RewardModel waited for, the Job made
once, earlier Jobs' pods waited out, Kueue's suspension, the figures and failures read from the pods' termination
messages). The same kind on the real API server and Job controller: e2e/tests/cluster/test_rewardbatch.py."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import yaml

from reward_operator.api import conditions
from reward_operator.api.defaults import apply_defaults
from reward_operator.api.schema import REWARD_BATCH
from reward_operator.api.validation import validate
from reward_operator.controllers import rewardbatch as controller
from reward_operator.policy import batch as policy
from reward_operator.render.rewardbatch import job_name, render_job
from reward_operator.settings import Settings
from reward_testing.fake_cluster import FakeCluster

LOG = logging.getLogger("test")
SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "rewardbatch-best-of-n.yaml"
URL = "http://skywork-rm.rlhf.svc.cluster.local"


def batch(**spec) -> dict:
    body = yaml.safe_load(SAMPLE.read_text())
    body["spec"].update(spec)
    body["metadata"].update(namespace="rlhf", uid="batch-uid", generation=1)
    return apply_defaults(body, REWARD_BATCH)


def reward_model(uri: str = "hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B", url: str | None = URL) -> dict:
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": "skywork-rm", "namespace": "rlhf"},
        "spec": {"model": {"uri": uri}, "gateway": {"enabled": True}},
        "status": {"url": url} if url else {},
    }


def claim(name: str = "rlhf-data") -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "rlhf"}}


def cluster_with(*objects: dict) -> FakeCluster:
    cluster = FakeCluster()
    for obj in objects:
        cluster.put(obj)
    return cluster


def sync(body: dict, cluster: FakeCluster):
    return controller.sync(body, Settings(), LOG, cluster=cluster)


def conditions_of(outcome) -> dict[str, tuple[str, str]]:
    found = {outcome.ready.type: (outcome.ready.status, outcome.ready.reason)}
    found.update({c.type: (c.status, c.reason) for c in outcome.conditions})
    return found


def pod(job: str, index: int, phase: str, message: dict | str | None, exit_code: int = 0, finished: str = "") -> dict:
    terminated = {"exitCode": exit_code, "reason": "Completed" if phase == "Succeeded" else "Error"}
    if message is not None:
        terminated["message"] = message if isinstance(message, str) else json.dumps(message)
    if finished:
        terminated["finishedAt"] = finished
    return {
        "metadata": {
            "name": f"{job}-{index}-{phase.lower()}",
            "labels": {"batch.kubernetes.io/job-name": job, "serving.rlhf.dev/rewardbatch": "round-3-best-of-8"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "worker", "state": {"terminated": terminated}}]},
    }


def shard_figures(rows: int, failed: int = 0, twice: int = 0) -> dict:
    return {
        "rows": rows,
        "scored": rows - failed,
        "failed": failed,
        "failures": {"invalid": failed} if failed else {},
        "scored_now": rows,
        "scored_twice": twice,
        "nothing_to_do": False,
        "models": [{"model": "skywork-rm", "revision": "hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B"}],
    }


# ---- the schema -------------------------------------------------------------------------------------------


def test_the_sample_is_admitted_and_the_schema_names_what_it_refuses():
    sample = yaml.safe_load(SAMPLE.read_text())
    assert validate(sample) == []
    refused = {
        "parallelism": ({"parallelism": 9}, "spec.parallelism must be at most spec.shards"),
        "same place": ({"output": {"uri": sample["spec"]["input"]["uri"]}}, "spec.output.uri must differ"),
        "not a claim": ({"input": {"uri": "/data/samples.jsonl"}}, "spec.input.uri must be pvc://<claim>/<path>"),
        "a bucket name": ({"output": {"uri": "s3://B/out"}}, "spec.output.uri must be pvc://<claim>/<path>"),
        "a format": ({"output": {"uri": "pvc://rlhf-data/out", "format": "parquet"}}, "supported values"),
        "a web output": ({"output": {"uri": "https://host/out"}}, "spec.output.uri must be pvc://<claim>/<path>"),
    }
    for case, (spec, words) in refused.items():
        document = copy.deepcopy(sample)
        document["spec"].update(spec)
        messages = " ".join(problem.message for problem in validate(document))
        assert words in messages, (case, messages)


# ---- the Job ----------------------------------------------------------------------------------------------


def test_the_job_runs_one_index_per_shard_with_the_worker_on_the_claim():
    body = batch()
    job = render_job(body, URL, "hf://m", "reward-operator:test")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 8, 4)
    assert spec["backoffLimitPerIndex"] == 3 and spec["suspend"] is False
    assert spec["podReplacementPolicy"] == "Failed", "a shard's next pod only once its last has ended"
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailIndex" and rules[0]["onExitCodes"]["values"] == [2]
    assert rules[1] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    pod_spec = spec["template"]["spec"]
    assert pod_spec["restartPolicy"] == "Never" and pod_spec["automountServiceAccountToken"] is False
    (container,) = pod_spec["containers"]
    assert container["command"] == ["reward-gateway-client", "score"]
    assert {
        f"--url={URL}",
        "--input=/data/rlhf-data/round-3/samples.jsonl",
        "--output=/data/rlhf-data/round-3/scored",
        "--shards=8",
        "--shard=$(JOB_COMPLETION_INDEX)",
        "--best-of-group",
        "--id-field=sample_id",
        "--group-field=prompt_id",
        "--result-file=/dev/termination-log",
    } <= set(container["args"])
    assert not any(argument.startswith("--prompt-field") for argument in container["args"])  # defaults unsaid
    # one claim for both: mounted once, writable
    claims = [v for v in pod_spec["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [{"name": "data-0", "persistentVolumeClaim": {"claimName": "rlhf-data", "readOnly": False}}]
    security = container["securityContext"]
    assert (
        security["runAsNonRoot"]
        and security["readOnlyRootFilesystem"]
        and security["capabilities"] == {"drop": ["ALL"]}
    )
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("RewardBatch", "batch-uid", True)


def test_an_input_claim_of_its_own_is_mounted_read_only_and_a_queue_suspends_the_job():
    body = batch(input={"uri": "pvc://datasets/samples.jsonl"}, queueName="team-a")
    job = render_job(body, URL, "hf://m", "img")
    volumes = {v["persistentVolumeClaim"]["claimName"]: v["persistentVolumeClaim"]["readOnly"]
               for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}  # fmt: skip
    assert volumes == {"datasets": True, "rlhf-data": False}
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_the_jobs_pods_pull_with_the_operators_secrets_and_only_when_it_has_some():
    assert "imagePullSecrets" not in render_job(batch(), URL, "hf://m", "img")["spec"]["template"]["spec"]
    cluster = cluster_with(reward_model(), claim())
    outcome = controller.sync(batch(), Settings(image_pull_secrets=("registry",)), LOG, cluster=cluster)
    pod = cluster.stored("Job", outcome.fields["job"])["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["containers"][0]["image"] == Settings().gateway_image


def test_the_job_name_follows_the_spec_and_the_model_revision_only():
    body = batch()
    assert job_name(body, "hf://a") == job_name(copy.deepcopy(body), "hf://a")
    assert job_name(body, "hf://a") != job_name(body, "hf://b")
    assert job_name(body, "hf://a") != job_name(batch(shards=4, parallelism=4), "hf://a")
    assert len(job_name(batch(), "x")) == len("round-3-best-of-8") + 9


# ---- the reconcile ----------------------------------------------------------------------------------------


def test_a_missing_or_unserved_reward_model_makes_no_job():
    cluster = cluster_with(claim())
    outcome = sync(batch(), cluster)
    assert conditions_of(outcome)[conditions.COMPLETE] == ("Unknown", conditions.REWARD_MODEL_NOT_SERVING)
    assert conditions_of(outcome)[conditions.ADMITTED] == ("False", conditions.REWARD_MODEL_NOT_SERVING)
    assert "does not exist" in outcome.ready.message and outcome.fields == {"phase": "Pending"}
    cluster.put(reward_model(url=None))
    assert "no status.url" in sync(batch(), cluster).ready.message
    assert cluster.count("create") == 0


def test_a_missing_claim_holds_the_job_back():
    cluster = cluster_with(reward_model())
    outcome = sync(batch(), cluster)
    assert conditions_of(outcome)[conditions.COMPLETE] == ("Unknown", conditions.CLAIM_NOT_FOUND)
    assert "rlhf-data" in outcome.ready.message and cluster.count("create") == 0


def test_the_job_is_made_once_and_the_batch_runs():
    cluster = cluster_with(reward_model(), claim())
    body = batch()
    outcome = sync(body, cluster)
    name = job_name(body, "hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B")
    assert [c[1:] for c in cluster.calls if c[0] == "create"] == [("Job", name)]
    assert outcome.fields["phase"] == "Running" and outcome.fields["job"] == name
    assert conditions_of(outcome)[conditions.ADMITTED] == ("True", conditions.JOB_ADMITTED)
    assert [event[1] for event in outcome.events] == [conditions.JOB_ADMITTED]
    # the Job controller starts pods: Running turns True, one event; the next reconcile makes nothing
    job = cluster.stored("Job", name)
    job["status"] = {"active": 4, "startTime": "2026-12-06T10:00:00Z"}
    cluster.put(job)
    body["status"] = {"phase": "Running", "conditions": [{"type": "Admitted", "status": "True"}]}
    outcome = sync(body, cluster)
    assert conditions_of(outcome)[conditions.RUNNING] == ("True", conditions.SHARDS_ACTIVE)
    assert [event[1] for event in outcome.events] == [conditions.SHARDS_ACTIVE]
    assert cluster.count("create") == 1


def test_a_queue_keeps_it_queued_until_kueue_lets_the_job_run():
    cluster = cluster_with(reward_model(), claim())
    body = batch(queueName="team-a")
    outcome = sync(body, cluster)
    assert outcome.fields["phase"] == "Queued"
    assert conditions_of(outcome)[conditions.ADMITTED] == ("False", conditions.AWAITING_ADMISSION)
    job = cluster.stored("Job", outcome.fields["job"])
    job["spec"]["suspend"] = False  # Kueue admitted it
    cluster.put(job)
    outcome = sync(body, cluster)
    assert outcome.fields["phase"] == "Running"
    assert conditions_of(outcome)[conditions.ADMITTED] == ("True", conditions.JOB_ADMITTED)


def test_finished_shards_give_the_figures_and_complete_the_batch():
    cluster = cluster_with(reward_model(), claim())
    body = batch(shards=2, parallelism=2)
    name = sync(body, cluster).fields["job"]
    job = cluster.stored("Job", name)
    job["status"] = {
        "completedIndexes": "0-1",
        "startTime": "2026-12-06T10:00:00Z",
        "completionTime": "2026-12-06T10:01:40Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    cluster.put(job)
    cluster.pods = [
        pod(name, 0, "Failed", None, exit_code=137, finished="2026-12-06T10:00:30Z"),  # kill -9: no message
        pod(name, 0, "Succeeded", shard_figures(500, failed=3, twice=40), finished="2026-12-06T10:01:40Z"),
        pod(name, 1, "Succeeded", shard_figures(500, failed=2), finished="2026-12-06T10:01:20Z"),
    ]
    outcome = sync(body, cluster)
    assert conditions_of(outcome)[conditions.COMPLETE] == ("True", conditions.SHARDS_SUCCEEDED)
    fields = outcome.fields
    assert fields["phase"] == "Complete"
    assert fields["rows"] == {"total": 1000, "scored": 995, "failed": 5, "scoredTwice": 40}
    assert fields["failures"] == {"invalid": 5}
    assert fields["shards"] == {"total": 2, "succeeded": 2, "failed": 0, "active": 0}
    assert fields["progress"] == "1000 rows (5 failed), 2/2 shards"
    assert fields["model"] == {"name": "skywork-rm", "revision": "hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B"}
    assert fields["rowsPerSecond"] == 10.0  # 1000 rows from the start to the last shard's end, 100 s


def test_a_refused_shard_fails_the_batch_with_the_workers_words():
    cluster = cluster_with(reward_model(), claim())
    body = batch(shards=2, parallelism=2)
    name = sync(body, cluster).fields["job"]
    job = cluster.stored("Job", name)
    job["status"] = {"completedIndexes": "0", "failedIndexes": "1", "active": 0}
    cluster.put(job)
    said = {"error": "/data/rlhf-data/round-3/samples.jsonl cannot be read: not UTF-8", "exit_code": 2}
    cluster.pods = [pod(name, 0, "Succeeded", shard_figures(10)), pod(name, 1, "Failed", said, exit_code=2)]
    outcome = sync(body, cluster)
    found = conditions_of(outcome)
    assert found[conditions.FAILED] == ("True", conditions.SHARD_FAILED)
    failed = next(c for c in outcome.conditions if c.type == conditions.FAILED)
    assert failed.message == f"shard 1: {said['error']}"
    assert ("Warning", conditions.SHARD_FAILED, failed.message) in outcome.events
    # the Job ends Failed once every index has ended
    job["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "FailedIndexes"}]
    cluster.put(job)
    outcome = sync(body, cluster)
    assert outcome.fields["phase"] == "Failed"
    assert conditions_of(outcome)[conditions.COMPLETE] == ("False", conditions.SHARDS_FAILED)
    assert "shard 1: " in outcome.ready.message


def test_a_new_model_revision_replaces_a_running_job_once_its_pods_are_gone():
    cluster = cluster_with(reward_model(), claim())
    body = batch()
    first = sync(body, cluster).fields["job"]
    cluster.pods = [pod(first, 0, "Running", None)]
    cluster.put(reward_model(uri="hf://Skywork/Skywork-Reward-V2-Llama-3.1-8B:" + "a" * 40))
    outcome = sync(body, cluster)
    assert conditions_of(outcome)[conditions.COMPLETE] == ("Unknown", conditions.AWAITING_PREVIOUS_JOB)
    assert cluster.stored("Job", first) is None  # deleted (pruned): its pods stop
    cluster.pods = []
    outcome = sync(body, cluster)
    assert outcome.fields["job"] not in (None, first) and outcome.fields["phase"] == "Running"


def test_a_finished_batch_keeps_its_job_whatever_the_model_does_later():
    cluster = cluster_with(reward_model(), claim())
    body = batch()
    name = sync(body, cluster).fields["job"]
    job = cluster.stored("Job", name)
    job["status"] = {"completedIndexes": "0-7", "conditions": [{"type": "Complete", "status": "True"}]}
    cluster.put(job)
    body["status"] = {"phase": "Complete", "job": name}
    cluster.put(reward_model(uri="hf://another/model"))
    cluster.calls.clear()
    outcome = sync(body, cluster)
    assert outcome.fields["job"] == name and outcome.fields["phase"] == "Complete"
    assert cluster.count("create") == cluster.count("prune") == cluster.count("get") - 1 == 0  # the Job read


@pytest.mark.parametrize(
    ("text", "indexes"), [("", set()), ("0", {0}), ("1,3-5", {1, 3, 4, 5}), ("0-2,7", {0, 1, 2, 7})]
)
def test_job_index_sets(text, indexes):
    assert policy.index_set(text) == indexes


def test_s3_uris_read_the_store_from_the_secret_in_kserves_convention():
    body = batch(input={"uri": "s3://datasets/round-3/samples.jsonl"}, output={"uri": "s3://datasets/round-3/out"},
                 s3SecretName="store")  # fmt: skip
    assert validate(yaml.safe_load(yaml.safe_dump(body))) == []
    cluster = cluster_with(reward_model())  # no claim needed; the Secret is
    outcome = sync(body, cluster)
    assert conditions_of(outcome)[conditions.COMPLETE] == ("Unknown", conditions.S3_SECRET_NOT_FOUND)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "store", "namespace": "rlhf", "annotations": {
        "serving.kserve.io/s3-endpoint": "minio.storage:9000", "serving.kserve.io/s3-usehttps": "0",
        "serving.kserve.io/s3-region": "eu-west-1"}}, "data": {"AWS_ACCESS_KEY_ID": "a2V5"}}  # fmt: skip
    cluster.put(secret)
    assert "holds neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY nor" in sync(body, cluster).ready.message
    secret["data"]["AWS_SECRET_ACCESS_KEY"] = "c2VjcmV0"
    cluster.put(secret)
    outcome = sync(body, cluster)
    assert outcome.fields["phase"] == "Running"
    job = cluster.stored("Job", outcome.fields["job"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "--input=s3://datasets/round-3/samples.jsonl" in container["args"]
    assert "--output=s3://datasets/round-3/out" in container["args"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "store", "key": "AWS_ACCESS_KEY_ID"}},
        "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "store", "key": "AWS_SECRET_ACCESS_KEY"}},
        "AWS_ENDPOINT_URL": "http://minio.storage:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert not [v for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]


def test_a_finished_shards_figures_outlive_its_pod_but_not_its_job():
    cluster = cluster_with(reward_model(), claim())
    body = batch(shards=2, parallelism=2)
    name = sync(body, cluster).fields["job"]
    job = cluster.stored("Job", name)
    job["status"] = {"completedIndexes": "0-1", "conditions": [{"type": "Complete", "status": "True"}]}
    cluster.put(job)
    cluster.pods = [
        pod(name, 0, "Succeeded", shard_figures(500, twice=40)),
        pod(name, 1, "Succeeded", shard_figures(7)),
    ]
    first = sync(body, cluster).fields
    assert first["rows"]["total"] == 507 and [r["index"] for r in first["finishedShards"]] == [0, 1]
    # a person deletes the finished pods: the status keeps what they said
    body["status"] = {**first, "phase": "Complete"}
    cluster.pods = []
    kept = sync(body, cluster).fields
    assert kept["rows"] == first["rows"] == {"total": 507, "scored": 507, "failed": 0, "scoredTwice": 40}
    assert kept["model"] == first["model"]
    # another Job's records are not this one's
    assert policy.finished_shards(job, [], {**first, "job": "another"}) == []


def test_a_parquet_file_over_https_is_read_by_the_worker_itself():
    body = batch(input={"uri": "https://data.example/round-3/samples.parquet?X-Amz-Signature=abc", "format": "parquet"})
    assert validate(yaml.safe_load(yaml.safe_dump(body))) == []
    job = render_job(body, URL, "hf://m", "img")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "--input=https://data.example/round-3/samples.parquet?X-Amz-Signature=abc" in container["args"]
    assert "--input-format=parquet" in container["args"]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in job["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["rlhf-data"], "only the output's claim"
