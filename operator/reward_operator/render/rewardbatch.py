"""A RewardBatch's Job: one index per shard, each pod running ``reward-gateway-client score`` on its shard.

The Job is named ``<batch>-<8 hex>`` from what its pods do: the spec and the revision of the model that will
score. A Job's pod template cannot change, and a new model revision must score the output again (the worker
drops a shard scored by another model), so either makes another Job; the same spec against the same revision
finds the Job it made before and does no work. The RewardModel's URL is not part of the name: it may move (a
mode changed) without the model changing, and the running Job goes on at the address it was given.

Failures, per pod (the Job's pod failure policy, which needs ``restartPolicy: Never``): the worker's exit code 2
(it cannot go on and a retry cannot help: the input unreadable, an output of another batch) fails its index at
once; a pod disrupted (evicted, preempted, its node gone) is retried without counting; any other failure (exit 3:
the gateway failed past its retries; kill -9, OOM) is retried up to ``maxRetriesPerShard``, each retry going on
from the shard's last chunk. The worker writes its figures (or its last words) to the termination message,
where the controller reads them (policy/batch.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..api import GROUP
from ..api.names import BATCH_WORKER_CONTAINER
from ..api.schema.rewardbatch import FIELD_NAMES
from .gateway_container import RESTRICTED_CONTAINER_SECURITY
from .metadata import child_labels, child_metadata
from .owned import Owned
from .pull_secrets import image_pull_secrets

WORKER_CONTAINER = BATCH_WORKER_CONTAINER
BATCH_COMPONENT = "batch"
WORKER_COMPONENT = "batch-worker"
# Kueue's queue label on a Job: Kueue's webhook keeps such a Job suspended until a ClusterQueue admits it.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The revision the Job was made for, on its pods (a new revision makes another Job).
MODEL_REVISION_ANNOTATION = f"{GROUP}/model-revision"
# The worker's exit codes (reward_gateway_client.batch.cli): 2, a retry cannot help.
REFUSED_EXIT_CODE = 2
# The image's user (the Dockerfile's USER): the group a PersistentVolume's files are made writable for.
WORKER_UID = 65532
DATA_DIR = "/data"
TOKEN_DIR = "/var/run/reward-batch"
TOKEN_FILE = "token"
TERMINATION_LOG = "/dev/termination-log"
JOB_COMPLETION_INDEX = "$(JOB_COMPLETION_INDEX)"  # set by the Job controller in every container of an Indexed Job
# Owned set: the batch's Jobs; one of an earlier spec or revision is deleted once another is rendered.
OWNED_JOBS = Owned("batch/v1", "Job", {"app.kubernetes.io/component": BATCH_COMPONENT})


# KServe's S3 Secret annotations (its storage initializer's convention), and the environment each becomes
S3_ANNOTATION_PREFIX = "serving.kserve.io/"
S3_ENVIRONMENT = {"s3-region": "AWS_DEFAULT_REGION", "s3-verifyssl": "S3_VERIFY_SSL"}
S3_KEY_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass(frozen=True)
class S3Secret:
    """What a Secret in KServe's S3 convention holds, as the Job needs it: never its values."""

    keys: tuple[str, str]  # the access key's and secret key's names in the Secret
    annotations: dict[str, str]


@dataclass(frozen=True)
class Location:
    """Where a URI points: a pvc:// claim and the path in it (mounted), or an s3:// URI (read by the worker)."""

    scheme: str
    claim: str
    path: str

    @classmethod
    def of(cls, uri: str) -> Location:
        parts = urlsplit(uri)
        return cls(parts.scheme, parts.netloc, parts.path.strip("/"))


def claims(batch: dict[str, Any]) -> list[str]:
    """The PersistentVolumeClaims a batch's pvc:// URIs name, input first, each once."""
    spec = batch["spec"]
    found = (Location.of(spec[side]["uri"]) for side in ("input", "output"))
    return list(dict.fromkeys(location.claim for location in found if location.scheme == "pvc"))


def s3_environment(secret: str, keys: tuple[str, str], annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The pods' environment from a Secret in KServe's S3 convention, as KServe's controller sets its storage
    initializer's: ``keys`` (the Secret's access key and secret key names) by reference, the endpoint (with
    http:// where ``s3-usehttps`` is "0", https:// otherwise, unless it names its scheme) and the region and TLS
    check from the annotations."""
    environment: list[dict[str, Any]] = [
        {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for key, variable in zip(keys, S3_KEY_VARIABLES, strict=True)
    ]
    said = {key.removeprefix(S3_ANNOTATION_PREFIX): value for key, value in annotations.items()}
    if endpoint := said.get("s3-endpoint"):
        scheme = "http" if said.get("s3-usehttps") == "0" else "https"
        url = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
        environment.append({"name": "AWS_ENDPOINT_URL", "value": url})
    environment += [{"name": variable, "value": said[key]} for key, variable in S3_ENVIRONMENT.items() if key in said]
    return environment


def job_name(batch: dict[str, Any], model_revision: str) -> str:
    """``<batch>-<8 hex>``: the spec and the scoring model's revision, hashed."""
    digest = hashlib.sha256(json.dumps([batch["spec"], model_revision], sort_keys=True).encode()).hexdigest()
    return f"{batch['metadata']['name']}-{digest[:8]}"


def render_job(
    batch: dict[str, Any],
    url: str,
    model_revision: str,
    image: str,
    s3: S3Secret | None = None,
    pull_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """The Job of a defaulted RewardBatch, scoring through the gateway at ``url``; ``s3``: what spec.s3SecretName's
    Secret holds (its key names, and the store's endpoint and settings); ``pull_secrets``: the Secrets its pods
    pull ``image`` with (render/pull_secrets.py)."""
    spec = batch["spec"]
    metadata = child_metadata(batch, job_name(batch, model_revision), BATCH_COMPONENT)
    if queue := spec.get("queueName"):
        metadata["labels"][KUEUE_QUEUE_LABEL] = queue
    volumes, mounts = _volumes(batch)
    worker = spec["worker"]
    resources = {"cpu": worker["cpu"], "memory": worker["memory"]}
    container = {
        "name": WORKER_CONTAINER,
        "image": image,
        "command": ["reward-gateway-client", "score"],
        "args": _arguments(batch, url),
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": mounts,
        **({"env": s3_environment(spec["s3SecretName"], s3.keys, s3.annotations)} if s3 is not None else {}),
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
        "terminationMessagePath": TERMINATION_LOG,
        # the worker's own message: its figures, or why it stopped (FallbackToLogsOnError would hide a
        # missing message behind the log's last lines)
        "terminationMessagePolicy": "File",
    }
    shards = spec["shards"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": spec.get("parallelism", shards),
            "backoffLimitPerIndex": spec["maxRetriesPerShard"],
            # a shard's next pod starts only once its last has ended: never two writers on one shard's output
            # (the default with a pod failure policy, said here because the checkpoints rely on it)
            "podReplacementPolicy": "Failed",
            # every shard runs to its end, whatever the others do: the output keeps what finished
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailIndex",
                        "onExitCodes": {
                            "containerName": WORKER_CONTAINER,
                            "operator": "In",
                            "values": [REFUSED_EXIT_CODE],
                        },
                    },
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            # with a queue, created suspended: Kueue's admission is what starts it (its webhook would set this
            # too; set here, the Job never runs a pod before Kueue has seen it)
            "suspend": "queueName" in spec,
            "template": {
                "metadata": {
                    "labels": child_labels(batch, WORKER_COMPONENT),
                    "annotations": {MODEL_REVISION_ANNOTATION: model_revision},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": WORKER_UID,
                        "runAsGroup": WORKER_UID,
                        "fsGroup": WORKER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": volumes,
                    **image_pull_secrets(pull_secrets),
                },
            },
        },
    }


def _volumes(batch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One volume per claim (read-only where only the input is on it), scratch space, and the token's Secret."""
    spec = batch["spec"]
    output = Location.of(spec["output"]["uri"])
    output_claim = output.claim if output.scheme == "pvc" else None
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    for number, claim in enumerate(claims(batch)):
        read_only = claim != output_claim
        volumes.append({"name": f"data-{number}", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}})
        mounts.append({"name": f"data-{number}", "mountPath": f"{DATA_DIR}/{claim}", "readOnly": read_only})
    if token := spec.get("tokenSecretRef"):
        items = [{"key": token["key"], "path": TOKEN_FILE}]
        volumes.append({"name": "token", "secret": {"secretName": token["name"], "items": items}})
        mounts.append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
    return volumes, mounts


def _path(uri: str) -> str:
    """Where the worker finds a URI: a claim's path as mounted, an s3:// or https:// URI as written."""
    location = Location.of(uri)
    return f"{DATA_DIR}/{location.claim}/{location.path}" if location.scheme == "pvc" else uri


def _arguments(batch: dict[str, Any], url: str) -> list[str]:
    spec = batch["spec"]
    worker = spec["worker"]
    arguments = [
        f"--url={url}",
        f"--input={_path(spec['input']['uri'])}",
        f"--output={_path(spec['output']['uri'])}",
        f"--shards={spec['shards']}",
        f"--shard={JOB_COMPLETION_INDEX}",
        # the gateway's fair share and its metrics tell the batch from trainers by this
        f"--client=rewardbatch/{batch['metadata']['name']}",
        f"--chunk-rows={worker['chunkRows']}",
        f"--max-in-flight={worker['maxInFlight']}",
        f"--max-items-per-call={worker['maxItemsPerCall']}",
        f"--result-file={TERMINATION_LOG}",
    ]
    if spec["input"]["format"] != "jsonl":
        arguments.append(f"--input-format={spec['input']['format']}")
    fields = spec["input"]["fields"]
    arguments += [f"--{name}-field={fields[name]}" for name in FIELD_NAMES if fields[name] != name]
    selection = spec.get("selection") or {}
    if selection.get("bestOfGroup"):
        arguments.append("--best-of-group")
    if "threshold" in selection:
        arguments.append(f"--threshold={selection['threshold']}")
    if "tokenSecretRef" in spec:
        arguments.append(f"--token-file={TOKEN_DIR}/{TOKEN_FILE}")
    return arguments
