"""The RewardBatch schema: the one source of its CRD, defaults and validation.

A RewardBatch scores a dataset with a RewardModel of its namespace: an Indexed Job (one index per shard) whose
pods run ``reward-gateway-client score`` against the RewardModel's ``status.url``, reading the input and writing
the output in chunks, each committed with a checkpoint, so a pod lost at any moment goes on from its shard's last
chunk. The field mapping is the worker's ``Fields`` (reward_gateway_client.batch.rows), so a field means the same
on the command line and here.
"""

from __future__ import annotations

from .common import Schema, defaulted_obj, integer, key_ref, kind_schema, obj, quantity, rule, status_schema, string

# Where data is read and written, as KServe's storage initializer names it: a PersistentVolumeClaim of the
# batch's namespace and a path in it, or an S3 bucket (any S3-compatible store) and a key or prefix in it.
PVC_URI_PATTERN = r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^/]+)+/?$"
S3_URI_PATTERN = r"^s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/[^/]+)+/?$"
# An input may also be a file a web server serves (a presigned URL included); an output is written, so never one.
HTTPS_URI_PATTERN = r"^https?://[^/?#]+/[^?#]*[^/?#](\\?[^#]*)?$"
# A Secret in KServe's S3 convention: a pair of keys, and the store's endpoint and settings in annotations. The
# keys' names are KServe's inferenceservice-config (s3AccessKeyIDName, s3SecretAccessKeyName): AWS_ACCESS_KEY_ID
# and AWS_SECRET_ACCESS_KEY in KServe 0.20's, awsAccessKeyID and awsSecretAccessKey where it names none. The
# first pair the Secret holds is used.
S3_SECRET_KEY_PAIRS = (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("awsAccessKeyID", "awsSecretAccessKey"))
INPUT_FORMATS = ("jsonl", "parquet")
OUTPUT_FORMATS = ("jsonl",)
MAX_SHARDS = 1000
# Kueue's queue label and Kubernetes' job-name label hold at most 63 characters: the Job is <name>-<8 hex>.
MAX_NAME_LENGTH = 52
DEFAULT_MAX_RETRIES_PER_SHARD = 3

# The worker's defaults (reward_gateway_client.batch.cli), repeated so that `kubectl explain` shows them.
DEFAULT_CHUNK_ROWS = 256
DEFAULT_MAX_IN_FLIGHT = 8
DEFAULT_MAX_ITEMS_PER_CALL = 64
DEFAULT_WORKER_CPU = "500m"
DEFAULT_WORKER_MEMORY = "512Mi"

FIELD_NAMES = {
    "id": "the row's id, repeated in its output row (default: its position in the file)",
    "prompt": "the prompt, scored with response",
    "response": "the response to prompt",
    "messages": "a conversation ending with the response (instead of prompt and response)",
    "text": "finished text, scored as given (with a prompt it starts with, for a judge)",
    "group": "the rows of one prompt (best-of-N): adjacent rows with one value are scored in one call",
    "reference": "what a judge compares a response with",
}


def _uri(field: str, description: str, readable_only: bool = False) -> Schema:
    patterns = [PVC_URI_PATTERN, S3_URI_PATTERN] + ([HTTPS_URI_PATTERN] if readable_only else [])
    forms = ["pvc://<claim>/<path> (a PersistentVolumeClaim of this namespace)", "s3://<bucket>/<key> (an S3 store)"]
    forms += ["https://<host>/<path> (a file a web server serves)"] if readable_only else []
    said = f"{field} must be {', '.join(forms[:-1])} or {forms[-1]}"
    return string(
        description,
        minLength=8,
        maxLength=2048,
        **{"x-kubernetes-validations": [rule(" || ".join(f"self.matches('{pattern}')" for pattern in patterns), said)]},
    )


FIELDS = defaulted_obj(
    "Which field of an input row holds each part of the item (JSONL: one JSON object per line).",
    {
        name: string(f"The field of {what}.", minLength=1, maxLength=256, default=name)
        for name, what in FIELD_NAMES.items()
    },
)

INPUT = obj(
    "The dataset to score.",
    {
        "uri": _uri(
            "spec.input.uri",
            "The file, read by every shard's pod (each keeps its own groups): pvc://<claim>/<path> on a "
            "PersistentVolumeClaim of this namespace, s3://<bucket>/<key> (spec.s3SecretName), or "
            "https://<host>/<path> (a presigned URL too; never shown with its query).",
            readable_only=True,
        ),
        "format": string(
            "The file's format: jsonl (a JSON object a line) or parquet (a row a record: columns by name, nested "
            "lists and structs as JSON arrays and objects).",
            enum=list(INPUT_FORMATS),
            default="jsonl",
        ),
        "fields": FIELDS,
    },
    required=["uri"],
)

OUTPUT = obj(
    "Where the scored rows go: a directory holding one directory per shard (its chunks, its checkpoint and, "
    "once finished, its manifest). A finished output outlives the RewardBatch.",
    {
        "uri": _uri(
            "spec.output.uri",
            "The directory: pvc://<claim>/<directory> on a PersistentVolumeClaim of this namespace, or "
            "s3://<bucket>/<prefix> (spec.s3SecretName).",
        ),
        "format": string("The output rows' format.", enum=list(OUTPUT_FORMATS), default="jsonl"),
    },
    required=["uri"],
)

SELECTION = obj(
    "A selection written into every output row beside its reward (selected: true or false).",
    {
        "bestOfGroup": {
            "type": "boolean",
            "description": "Select the highest reward of each group (best-of-N).",
        },
        "threshold": {
            "type": "number",
            "format": "double",
            "description": "Select rows whose reward is at least this (rejection sampling; with bestOfGroup: the "
            "best of a group only if it reaches it).",
        },
    },
)

WORKER = defaulted_obj(
    "Each shard's pod: how it calls the gateway, and its compute.",
    {
        "chunkRows": integer(
            "Rows per committed chunk (at least; a group is never cut): a lost pod scores at most one chunk again.",
            minimum=1,
            maximum=100000,
            default=DEFAULT_CHUNK_ROWS,
        ),
        "maxInFlight": integer(
            "Calls to the gateway at once, per pod.", minimum=1, maximum=1024, default=DEFAULT_MAX_IN_FLIGHT
        ),
        "maxItemsPerCall": integer(
            "Items in one call (a group is split above it).",
            minimum=1,
            maximum=4096,
            default=DEFAULT_MAX_ITEMS_PER_CALL,
        ),
        "cpu": {**quantity("CPU request and limit of each pod."), "default": DEFAULT_WORKER_CPU},
        "memory": {**quantity("Memory request and limit of each pod."), "default": DEFAULT_WORKER_MEMORY},
    },
)

SPEC = obj(
    "Desired state of a dataset scored with a RewardModel.",
    {
        "rewardModel": string(
            "The RewardModel that scores, in this namespace (its gateway must be enabled). The batch reads it and "
            "never changes it: one at zero replicas is woken by the batch's first calls, and goes back to zero "
            "after the last.",
            minLength=1,
            maxLength=253,
            pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        ),
        "input": INPUT,
        "output": OUTPUT,
        "shards": integer(
            "How many shards the input is cut into, one Job index each (group g goes to shard g mod shards).",
            minimum=1,
            maximum=MAX_SHARDS,
            default=1,
        ),
        "parallelism": integer(
            "Shards scored at once (the Job's parallelism; at most shards). Unset: all of them.",
            minimum=1,
            maximum=MAX_SHARDS,
        ),
        "maxRetriesPerShard": integer(
            "Pod failures a shard may have before it is failed (the Job's backoffLimitPerIndex). A pod evicted "
            "or its node lost does not count; a worker that cannot go on (an unreadable input, an output of "
            "another batch) fails its shard at once.",
            minimum=0,
            maximum=100,
            default=DEFAULT_MAX_RETRIES_PER_SHARD,
        ),
        "selection": SELECTION,
        "queueName": string(
            "A Kueue LocalQueue of this namespace: the Job is created suspended with Kueue's queue label, and runs "
            "once Kueue admits it. Unset: it runs at once.",
            minLength=1,
            maxLength=63,
            pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        ),
        "s3SecretName": string(
            "A Secret of this namespace in KServe's S3 convention, for s3:// URIs: its keys AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (KServe 0.20's names; or awsAccessKeyID and awsSecretAccessKey), passed to the "
            "pods by reference, and its annotations "
            "serving.kserve.io/s3-endpoint, s3-usehttps, s3-region and s3-verifyssl (the store and how to reach "
            "it). Unset: the pods' own credentials (boto3's chain, such as a workload identity).",
            minLength=1,
            maxLength=253,
            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        ),
        "tokenSecretRef": key_ref(
            "A Secret key whose first line is the bearer token the gateway expects (a token of the RewardModel's "
            "gateway.authSecretRef file), mounted into the pods as a file. Unset: no token is sent."
        ),
        "worker": WORKER,
    },
    required=["rewardModel", "input", "output"],
    **{
        "x-kubernetes-validations": [
            rule(
                "!has(self.parallelism) || self.parallelism <= self.shards",
                "spec.parallelism must be at most spec.shards",
            ),
            rule(
                "self.input.uri != self.output.uri",
                "spec.output.uri must differ from spec.input.uri (the output is a directory beside the input)",
            ),
            # as a Job's pod template: one batch scores one dataset one way (a new model revision is scored
            # again without an edit)
            rule(
                "self == oldSelf",
                "spec is immutable: a RewardBatch scores one dataset one way; create another to score it otherwise",
            ),
        ]
    },
)

PHASES = ("Pending", "Queued", "Running", "Complete", "Failed")

STATUS = status_schema(
    "Complete, and Admitted, Running and Failed.",
    {
        "phase": string(
            "Pending (waiting on its RewardModel or an earlier Job's pods), Queued (suspended until Kueue admits "
            "it), Running, Complete or Failed.",
            enum=list(PHASES),
        ),
        "job": string("The Job that scores the shards."),
        "progress": string(
            "Rows of the finished shards (and how many failed), and the shards ended, as kubectl get shows it."
        ),
        "shards": obj(
            "The Job's indexes.",
            {
                name: integer(what, minimum=0)
                for name, what in (
                    ("total", "Shards in all."),
                    ("succeeded", "Shards finished."),
                    ("failed", "Shards failed (past maxRetriesPerShard, or refused by the worker)."),
                    ("active", "Shards being scored now."),
                )
            },
        ),
        "rows": obj(
            "Rows of the finished shards (a shard's figures come with its end).",
            {
                "total": {"type": "integer", "format": "int64", "description": "Rows read.", "minimum": 0},
                "scored": {"type": "integer", "format": "int64", "description": "Rows with a reward.", "minimum": 0},
                "failed": {
                    "type": "integer",
                    "format": "int64",
                    "description": "Rows with a null reward and their failure.",
                    "minimum": 0,
                },
                "scoredTwice": {
                    "type": "integer",
                    "format": "int64",
                    "description": "Rows scored again after a pod was lost (at most a chunk per loss).",
                    "minimum": 0,
                },
            },
        ),
        "finishedShards": {
            "type": "array",
            "description": "Each finished shard's figures, as its pod's worker said them (kept once read: a pod "
            "deleted later takes nothing with it).",
            "maxItems": MAX_SHARDS,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["index"],
            "items": obj(
                "One shard's figures.",
                {
                    "index": integer("The shard (the Job's completion index).", minimum=0),
                    **{
                        name: {"type": "integer", "format": "int64", "minimum": 0, "description": what}
                        for name, what in (
                            ("rows", "Rows read."),
                            ("scored", "Rows with a reward."),
                            ("failed", "Rows with a null reward and their failure."),
                            ("scoredTwice", "Rows its run scored again after an earlier pod of the shard was lost."),
                        )
                    },
                    "failures": {
                        "type": "object",
                        "description": "Failed rows by reason.",
                        "additionalProperties": {"type": "integer", "format": "int64"},
                    },
                    "finishedAt": string("When its pod finished.", format="date-time"),
                    "model": obj(
                        "The model that scored it.",
                        {name: string(f"The model's {name}.") for name in ("name", "revision", "digest")},
                    ),
                },
                required=["index", "rows", "scored", "failed", "scoredTwice"],
            ),
        },
        "failures": {
            "type": "object",
            "description": "Failed rows by reason (invalid, too_long, ...), over the finished shards.",
            "additionalProperties": {"type": "integer", "format": "int64"},
        },
        "rowsPerSecond": {
            "type": "number",
            "format": "double",
            "description": "Rows of the finished shards over the time from the Job's start to the last shard's end.",
        },
        "model": obj(
            "The model that scored, as its gateway answered (every output row carries it too).",
            {
                "name": string("The served model's name."),
                "revision": string("The weights' revision (their storage URI)."),
                "digest": string("The weights' content digest, where the URI pins one."),
            },
        ),
        "startTime": string("When the Job started.", format="date-time"),
        "completionTime": string("When the last shard finished.", format="date-time"),
    },
)

REWARD_BATCH = kind_schema(
    "A dataset scored with a RewardModel, sharded on an Indexed Job, resumable, written beside every row's reward.",
    SPEC,
    STATUS,
    MAX_NAME_LENGTH,
    "its Job is <name>-<8 characters>, and Kubernetes' job-name label holds at most 63",
)
