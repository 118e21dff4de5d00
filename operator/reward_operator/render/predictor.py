"""The InferenceService predictor, built from parts of a spec.

Each builder takes only the part it needs (model, resources, serving, ...), not
a whole custom resource, so every kind that runs a model on KServe (a
RewardModel today; a pipeline's actor, reference and critic next) renders its
predictor with the same code.
"""

from __future__ import annotations

from typing import Any

from ..api.kserve import GPU_RESOURCE, KNATIVE_PROGRESS_DEADLINE, MODEL_FORMAT, PROTOCOL_VERSION
from ..api.types import CredentialsSpec, EnvVar, ResourcesSpec, ServingSpec, Toleration

# How long Knative gives a new revision to become ready: the download by
# KServe's storage initializer, then the runtime's startup probe budget (900 x
# 2 s in runtimes/vllm-reward.yaml). Knative's 600 s default would fail a cold
# 8B model mid-load.
KNATIVE_PROGRESS_DEADLINE_SECONDS = 3600

# A predictor pod's termination grace in Standard mode (Kubernetes' default is 30 s). vLLM answers SIGTERM by
# aborting its engine's work (its default, `--shutdown-timeout 0`), then waits without bound for the HTTP calls
# still open, which will never be answered: idle, it exits in under a second; with a call in flight, only the
# kubelet's SIGKILL at the grace's end stops it. Until then the scheduler counts the pod's requests, so on a
# full node (a GPU pool, the test bed's two cores) its replacement waits out the whole grace. 10 s leaves the
# engine time to free its memory and cuts 20 s from a plain deletion's recovery. Knative sets its own
# (the revision's timeout, during which its queue-proxy drains).
PREDICTOR_GRACE_SECONDS = 10


def resources(wanted_resources: ResourcesSpec) -> dict[str, Any]:
    wanted: dict[str, Any] = {}
    for field in ("cpu", "memory"):
        if field in wanted_resources:
            wanted[field] = str(wanted_resources[field])  # type: ignore[literal-required]
    if wanted_resources.get("gpus", 0) > 0:
        wanted[GPU_RESOURCE] = str(wanted_resources["gpus"])
    # requests == limits: a reward model's footprint is known up front, and
    # Guaranteed QoS keeps it from being evicted mid-burst.
    return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


def model_env(env: list[EnvVar], credentials: CredentialsSpec) -> list[dict[str, Any]]:
    """The model container's environment: the spec's own, plus HF_TOKEN from its Secret reference."""
    rendered: list[dict[str, Any]] = [dict(item) for item in env]
    token = credentials.get("huggingFaceToken")
    if token and not any(item["name"] == "HF_TOKEN" for item in rendered):
        rendered.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token["name"], "key": token["key"]}},
            }
        )
    return rendered


def model(
    uri: str,
    runtime: str,
    args: list[str],
    env: list[dict[str, Any]],
    compute: dict[str, Any],
    volume_mounts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``predictor.model``: our named runtime, the storage URI, and what runs on top of the runtime."""
    spec: dict[str, Any] = {
        "modelFormat": {"name": MODEL_FORMAT},
        "runtime": runtime,
        "protocolVersion": PROTOCOL_VERSION,
        "storageUri": uri,
        "args": args,
    }
    if env:
        spec["env"] = env
    if compute:
        spec["resources"] = compute
    if volume_mounts:
        spec["volumeMounts"] = volume_mounts
    return spec


def predictor(
    model_spec: dict[str, Any],
    serving: ServingSpec,
    credentials: CredentialsSpec,
    node_selector: dict[str, str],
    tolerations: list[Toleration],
    volumes: list[dict[str, Any]] | None = None,
    held_for: int | None = None,
) -> dict[str, Any]:
    """``held_for``: how long its caller (the gateway) waits for an answer, a wake from zero included; in
    Knative mode the predictor's revision timeout unless serving.timeoutSeconds sets one. Knative's activator
    holds a request for a revision at zero only that long: past it, it answers 504 ("activator request
    timeout") however far vLLM has come, so Knative's default (300 s) would cut a cold start the gateway
    still waits for."""
    knative = serving["mode"] == "Knative"
    spec: dict[str, Any] = {
        "minReplicas": serving["minReplicas"],
        "maxReplicas": serving["maxReplicas"],
    }
    if knative and "targetConcurrency" in serving:
        # Knative's concurrency autoscaler; the schema refuses it in Standard
        # mode, where KServe's HPA takes only cpu or memory.
        spec["scaleMetric"] = "concurrency"
        spec["scaleTarget"] = serving["targetConcurrency"]
    if "timeoutSeconds" in serving:
        spec["timeout"] = serving["timeoutSeconds"]
    elif knative and held_for is not None:
        spec["timeout"] = held_for
    if knative:
        spec["annotations"] = {KNATIVE_PROGRESS_DEADLINE: f"{KNATIVE_PROGRESS_DEADLINE_SECONDS}s"}
    elif GPU_RESOURCE in model_spec.get("resources", {}).get("limits", {}):
        # A rolling update of a GPU predictor needs a spare GPU for the surge pod,
        # which a full pool does not have: replace the pods instead. (Knative
        # refuses the field; it rolls revisions its own way.) A CPU predictor
        # keeps KServe's rolling update: the old pod serves until the new one is Ready.
        spec["deploymentStrategy"] = {"type": "Recreate"}
    if not knative:
        spec["terminationGracePeriodSeconds"] = PREDICTOR_GRACE_SECONDS
    if account := credentials.get("serviceAccountName"):
        spec["serviceAccountName"] = account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if volumes:
        spec["volumes"] = volumes
    spec["model"] = model_spec
    return spec
