"""A RewardBatch on the real node: a dataset scored through a RewardModel's ``status.url`` by the operator's Indexed
Job, nothing standing in.

The operator renders the Job; Kubernetes' Job controller runs one pod per shard on the real node (containerd, the
operator's image, ``reward-gateway-client score``), each reading the dataset from a PersistentVolumeClaim (a
hostPath volume of the node) and writing its chunks and checkpoints beside it; the RewardModel serves the tiny
sequence model on vLLM's CPU build behind its gateway, at zero replicas between batches (Standard mode, KEDA: the
suite's make rule sets ``TESTENV_KEDA=1``, and ``testenv.wake.keda_reaches_the_gateway`` lets KEDA's operator on
the host reach the gateway's scaler).

1. A batch of BATCH_ROWS rows (prompts with 8 responses each, adjacent, plus malformed rows and one text over the
   model's context) in 8 shards, 4 at once, against the RewardModel at zero: Complete, every row once, the good
   rows' rewards at transformers' numbers (a sample, within TOLERANCE), the bad rows null with their reason, the
   best of each group selected, the status's figures equal to the output's, and the RewardModel back at zero
   after it, its spec untouched.
2. The same batch again into another directory with two worker pods lost mid-way, one by kill -9 of its process
   (from the host: it is the node), one by deleting the pod: Complete, the output row for row the first one's,
   and the rows scored twice printed.

`make batch-real`; not in `make test` (vLLM's cold start and 20,000 rows on the node's 2 cores).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reward_testing.object_store import ObjectStore
from reward_testing.scoring_cases import TOLERANCE
from reward_testing.tiny_models import TinyModel, reference_scores, tar_model
from reward_testing.waiting import wait_until
from testenv import node, served, wake
from testenv.addons import object_store
from testenv.diagnose import explained
from testenv.helpers import condition, get_json

NAME = "batch-rm"
CLAIM = "batch-data"
SHARDS, PARALLELISM, GROUP = 8, 4, 8
BATCH_ROWS = int(os.environ.get("BATCH_ROWS", "10240"))
S3_ROWS = 2048  # the part of the dataset read from and written to the object store
SAMPLED = 64  # good rows whose reward is compared with transformers'
BATCH_TIMEOUT_S = 1800
WAKE_TIMEOUT_S = 900  # vLLM's cold start on the node's 2 cores, shared with the batch's pods
COOLDOWN = "10s"  # KEDA's cooldown before zero (spec.serving.scaleDownDelay)
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu")


def dataset(rows: int) -> tuple[list[str], dict[str, dict]]:
    """The input's lines, and each good row by id: groups of GROUP responses to one prompt, adjacent; three
    malformed lines; one text far over the model's context."""
    generator = random.Random(7)
    lines, good = [], {}
    for prompt_number in range(rows // GROUP):
        prompt = " ".join(generator.choices(WORDS, k=12))
        for response_number in range(GROUP):
            row = {
                "id": f"p{prompt_number}-r{response_number}",
                "group": f"p{prompt_number}",
                "text": f"{prompt} answer {' '.join(generator.choices(WORDS, k=6))}",
            }
            lines.append(json.dumps(row))
            good[row["id"]] = row
        if prompt_number == 10:
            lines.append("{not json")
            lines.append(json.dumps({"id": "numeric-text", "text": 12345}))
            lines.append(json.dumps({"id": "no-item", "comment": "neither text nor prompt"}))
            lines.append(json.dumps({"id": "too-long", "text": " ".join(["theta"] * 6000)}))
    return lines, good


@pytest.fixture(scope="module")
def data_dir(plane) -> Path:
    directory = Path(plane.directory) / "batch-data"
    directory.mkdir(exist_ok=True)
    directory.chmod(0o777)  # the worker runs as 65532; a hostPath volume takes no fsGroup
    return directory


@pytest.fixture(scope="module")
def served_namespace(cluster, operator, runtimes, plane, data_dir) -> Iterator[str]:
    if not cluster.local or cluster.kubectl("get", f"node/{node.NAME}", check=False).returncode != 0:
        pytest.skip("needs the test bed's real node (TESTENV_NODE=0 leaves it out)")
    with served.client_namespace(cluster) as name:
        volume = f"{name}-{CLAIM}"
        cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(data_dir), "type": "Directory"},
                     "claimRef": {"namespace": name, "name": CLAIM}},
        }))  # fmt: skip
        cluster.kubectl("apply", "-n", name, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))  # fmt: skip
        try:
            yield name
        finally:
            cluster.kubectl("delete", "persistentvolume", volume, "--wait=false", check=False)


@pytest.fixture(scope="module")
def store(cluster, served_namespace) -> ObjectStore | None:
    """The test bed's object store (None without the add-on), its Secret copied into the namespace as ``store``
    and named by the ServiceAccount ``models``, as a user gives KServe's storage initializer S3 credentials."""
    if cluster.kubectl("get", f"secret/{object_store.SECRET}", "-n", object_store.NAMESPACE, check=False).returncode:
        return None
    found_store, found = object_store.store(cluster)
    endpoint = found["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"]
    secret = object_store.secret(found_store.keys, endpoint, served_namespace, "store")
    metadata = {"name": "models", "namespace": served_namespace}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata, "secrets": [{"name": "store"}]}
    for manifest in (secret, account):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    return found_store


def model_uri(plane, store, namespace: str, model: TinyModel) -> tuple[str, dict]:
    """Where the model is served from: the object store (s3://, the files as a user uploads them, read with the
    ServiceAccount's Secret), else the test bed's storage server (an archive over HTTP); and the spec's extra."""
    if store is None:
        archive = tar_model(model, node.storage_dir(plane.directory) / "batch-sequence.tar.gz")
        return node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name), {}
    bucket = store.bucket(f"models-{namespace}")
    for path in sorted(p for p in model.path.rglob("*") if p.is_file()):
        store.put(bucket, f"{NAME}/{path.relative_to(model.path)}", path.read_bytes())
    return f"s3://{bucket}/{NAME}", {"credentials": {"serviceAccountName": "models"}}


@pytest.fixture(scope="module")
def scored(cluster, plane, served_namespace, store, tiny_models, data_dir) -> Iterator[dict]:
    """The RewardModel served and then at zero, KEDA reaching its gateway; the dataset written, and its good rows'
    transformers rewards (a sample)."""
    plane.load_images(("vllm-cpu",))
    uri, extra = model_uri(plane, store, served_namespace, tiny_models["sequence"])
    lines, good = dataset(BATCH_ROWS)
    (data_dir / "samples.jsonl").write_text("\n".join(lines) + "\n")
    sample = random.Random(11).sample(sorted(good), SAMPLED)
    want = reference_scores(tiny_models["sequence"], [{"text": good[row_id]["text"]} for row_id in sample])
    spec = served.reward_model(
        NAME, "sequence", uri, 0,
        serving={"minReplicas": 0, "maxReplicas": 1, "scaleDownDelay": COOLDOWN},
        gateway={"scaleFromZeroTimeoutSeconds": WAKE_TIMEOUT_S, "requestTimeoutSeconds": 300}, **extra,
    )  # fmt: skip
    stored = served.serve(cluster, served_namespace, spec)
    print(f"\n{NAME} served from {uri}")
    with wake.keda_reaches_the_gateway(cluster, served_namespace, NAME):
        wake.asleep(cluster, served_namespace, NAME, timeout=WAKE_TIMEOUT_S)
        yield {
            "lines": len(lines),
            "good": good,
            "want": {i: a["reward"] for i, a in zip(sample, want, strict=True)},
            "generation": stored["metadata"]["generation"],
        }


def apply_batch(cluster, namespace: str, name: str, directory: str, **spec) -> None:
    """A RewardBatch over the claim's dataset into ``directory`` on it (``spec``: what differs from that)."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "serving.rlhf.dev/v1alpha1", "kind": "RewardBatch", "metadata": {"name": name},
        "spec": {
            "rewardModel": NAME,
            "input": {"uri": f"pvc://{CLAIM}/samples.jsonl"},
            "output": {"uri": f"pvc://{CLAIM}/{directory}"},
            "shards": SHARDS, "parallelism": PARALLELISM,
            "selection": {"bestOfGroup": True},
            "worker": {"chunkRows": 256, "cpu": "50m", "memory": "256Mi"},
            **spec,
        },
    }))  # fmt: skip


def finished(cluster, namespace: str, name: str) -> dict:
    def complete() -> dict | None:
        found = get_json(cluster, "rewardbatch", name, "-n", namespace) or {}
        said = condition(found, "Complete") or {}
        assert said.get("reason") != "ShardsFailed", json.dumps(found.get("status"), indent=1)
        return found if said.get("status") == "True" else None

    with explained(cluster.kubectl, namespace, f"serving.rlhf.dev/rewardbatch={name}"):
        return wait_until(f"RewardBatch {name} Complete", complete, timeout=BATCH_TIMEOUT_S, interval=5)


def output_rows(directory: Path) -> list[dict]:
    """Every shard's rows, shard by shard, chunk by chunk."""
    rows = []
    for shard in sorted(directory.glob("shard-*")):
        for part in sorted(shard.glob("part-*.jsonl")):
            rows += [json.loads(line) for line in part.read_text().splitlines()]
    return rows


def assert_scored(rows: list[dict], lines: int, good: dict[str, dict], want: dict[str, float], status: dict,
                  shards: int) -> None:  # fmt: skip
    """Every line once; the sampled rewards at transformers' numbers; the bad rows null with their reason; the best
    of each group selected; the status's figures the output's."""
    assert sorted(row["row"] for row in rows) == list(range(lines)), "every row once"
    by_id = {row["id"]: row for row in rows if row["id"] is not None}
    diffs = [abs(by_id[row_id]["reward"] - reward) for row_id, reward in want.items() if row_id in by_id]
    print(f"largest |reward - transformers'| over {len(diffs)} rows: {max(diffs):.2e}")
    assert diffs and max(diffs) <= TOLERANCE
    assert by_id["too-long"]["reward"] is None and by_id["too-long"]["failure"]["reason"] == "too_long"
    for bad in ("numeric-text", "no-item"):
        assert by_id[bad]["reward"] is None and by_id[bad]["failure"]["reason"] == "invalid", by_id[bad]
    assert sum(1 for row in rows if row["id"] is None and row["failure"]["reason"] == "invalid") == 1  # not JSON
    # best of each group: exactly its highest reward selected
    groups: dict[str, list[dict]] = {}
    for row_id, row in good.items():
        if row_id in by_id:
            groups.setdefault(row["group"], []).append(by_id[row_id])
    for members in groups.values():
        best = max(members, key=lambda row: row["reward"])
        assert [row["id"] for row in members if row["selected"]] == [best["id"]]
    assert status["rows"]["total"] == len(rows)
    assert status["rows"]["failed"] == sum(1 for row in rows if row["failure"] is not None) == 4
    assert status["shards"] == {"total": shards, "succeeded": shards, "failed": 0, "active": 0}
    assert status["model"]["name"] and status["phase"] == "Complete"


def test_a_dataset_scored_in_eight_shards_on_the_real_node(cluster, served_namespace, scored, data_dir):
    assert not wake.pods(cluster, served_namespace, NAME, "predictor", going=True), "the model at zero"
    started = time.time()
    apply_batch(cluster, served_namespace, "uninterrupted", "out-a")
    done = finished(cluster, served_namespace, "uninterrupted")
    took = time.time() - started
    rows = output_rows(data_dir / "out-a")
    status = done["status"]
    print(f"\nuninterrupted: {len(rows)} rows in {took:.0f} s; status {json.dumps(status['rows'])}, "
          f"{status.get('rowsPerSecond')} rows/s, failures {status.get('failures')}, "
          f"model {status.get('model')}")  # fmt: skip
    assert_scored(rows, scored["lines"], scored["good"], scored["want"], status, SHARDS)
    # the batch woke the model and never touched it: back at zero after the last shard, its spec as it was
    wake.asleep(cluster, served_namespace, NAME, timeout=WAKE_TIMEOUT_S)
    model = get_json(cluster, "rewardmodel", NAME, "-n", served_namespace)
    assert model["metadata"]["generation"] == scored["generation"]
    print(f"{NAME} back at zero {time.time() - started - took:.0f} s after the batch completed")


def shard_pods(cluster, namespace: str, job: str) -> str:
    """Each pod of the Job: its index, phase, exit code and termination message's start, a line each."""
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}") or {}
    lines = []
    for pod in listed.get("items", []):
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        ended = next(
            (c["state"].get("terminated") or {} for c in pod["status"].get("containerStatuses", [])), {}
        )  # fmt: skip
        lines.append(f"  shard {index} {pod['metadata']['name']} {pod['status'].get('phase')} exit "
                     f"{ended.get('exitCode')}: {(ended.get('message') or '')[:160]}")  # fmt: skip
    return "\n".join(sorted(lines))


def _without_reward(row: dict) -> dict:
    return {key: value for key, value in row.items() if key != "reward"}


def _worker_pids(output: str) -> dict[int, int]:
    """shard -> the host PID of the worker writing ``output`` (the node's containers are the host's processes)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a.endswith(f"/{output}") and a.startswith("--output=") for a in arguments) and "score" in arguments:
            shard = next((a.split("=", 1)[1] for a in arguments if a.startswith("--shard=")), None)
            if shard is not None and shard.isdigit():
                found[int(shard)] = int(entry.name)
    return found


def _committed(directory: Path, shard: int) -> int:
    """Chunks the shard's checkpoint counts (0 before its first, and once the shard is done: nothing to stop)."""
    checkpoint = directory / f"shard-{shard:05d}-of-{SHARDS:05d}" / "_checkpoint.json"
    try:
        said = json.loads(checkpoint.read_text())
    except (OSError, ValueError):
        return 0
    return 0 if said.get("done") else int(said.get("chunks", 0))


def test_two_workers_lost_mid_way_leave_the_same_output(cluster, served_namespace, scored, data_dir):
    apply_batch(cluster, served_namespace, "interrupted", "out-b")
    out = data_dir / "out-b"
    # one worker killed with SIGKILL once its shard has committed a chunk
    pids = wait_until(
        "a worker past its first chunk",
        lambda: {s: p for s, p in _worker_pids("out-b").items() if _committed(out, s) >= 1} or None,
        timeout=BATCH_TIMEOUT_S,
        interval=0.5,
    )
    killed_shard, pid = sorted(pids.items())[0]
    os.kill(pid, signal.SIGKILL)
    print(f"\nkill -9 of shard {killed_shard}'s worker (pid {pid}) after {_committed(out, killed_shard)} chunks")

    # another shard's pod deleted once it has committed a chunk
    def another() -> dict | None:
        listed = get_json(cluster, "pods", "-n", served_namespace, "-l", "serving.rlhf.dev/rewardbatch=interrupted")
        for pod in (listed or {}).get("items", []):
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            if index != killed_shard and pod["status"].get("phase") == "Running" and _committed(out, index) >= 1:
                return pod
        return None

    pod = wait_until("another running worker past its first chunk", another, timeout=BATCH_TIMEOUT_S, interval=0.5)
    cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", served_namespace, "--wait=false")
    deleted = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    print(f"deleted pod {pod['metadata']['name']} (shard {deleted}) after {_committed(out, deleted)} chunks")

    done = finished(cluster, served_namespace, "interrupted")
    status = done["status"]
    print(f"interrupted: status {json.dumps(status['rows'])}: rows scored twice {status['rows']['scoredTwice']}")
    pods = shard_pods(cluster, served_namespace, status["job"])
    print(pods)
    # both losses were real: each shard finished in a pod after the one lost
    for shard in (killed_shard, deleted):
        assert any(line.startswith(f"  shard {shard} ") and " Succeeded exit 0" in line for line in pods.splitlines())
    assert f"shard {killed_shard} " in pods and "Failed exit 137" in pods
    first, second = output_rows(data_dir / "out-a"), output_rows(out)
    assert [_without_reward(row) for row in second] == [_without_reward(row) for row in first], "row for row"
    # vLLM's sums may differ in the last bits with how requests were batched together: equal within TOLERANCE
    diffs = [abs(a["reward"] - b["reward"]) for a, b in zip(first, second, strict=True) if a["reward"] is not None]
    print(f"rewards against the uninterrupted run's: largest difference {max(diffs):.2e} over {len(diffs)} rows")
    assert max(diffs) <= TOLERANCE
    assert status["rows"]["total"] == len(second), "the figures of every shard, the restarted ones' too"
    assert status["rows"]["scoredTwice"] <= 2 * 256 + GROUP * 2, "at most a chunk per loss"


def test_a_dataset_in_an_object_store_scored_into_it_with_the_stores_secret(cluster, served_namespace, store, scored):
    """s3:// in and out, through the test bed's versitygw (the add-on, at the host's address the pods reach), its
    keys and endpoint from a Secret in KServe's S3 convention: a part of the dataset, in 2 shards."""
    if store is None:
        pytest.skip("no test-bed object store (TESTENV_OBJECT_STORE=1)")
    lines, good = dataset(S3_ROWS)
    bucket = store.bucket(f"batch-{served_namespace}")
    store.put(bucket, "round-3/samples.jsonl", ("\n".join(lines) + "\n").encode())
    apply_batch(
        cluster, served_namespace, "from-s3", "unused",
        input={"uri": f"s3://{bucket}/round-3/samples.jsonl"}, output={"uri": f"s3://{bucket}/round-3/scored"},
        shards=2, parallelism=2, s3SecretName="store",
    )  # fmt: skip
    done = finished(cluster, served_namespace, "from-s3")
    client = store.client()
    keys = sorted(
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="round-3/scored/")
        for item in page.get("Contents", [])
        if item["Key"].rsplit("/", 1)[-1].startswith("part-")
    )
    rows = [
        json.loads(line)
        for key in keys
        for line in client.get_object(Bucket=bucket, Key=key)["Body"].read().decode().splitlines()
    ]
    print(f"\ns3 in and out: {len(rows)} rows in {len(keys)} parts; status {json.dumps(done['status']['rows'])}")
    assert_scored(rows, len(lines), good, scored["want"], done["status"], 2)
