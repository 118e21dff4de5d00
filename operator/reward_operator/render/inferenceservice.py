"""RewardModel -> KServe InferenceService (serving.kserve.io/v1beta1).

Only fields the operator owns are rendered: server-side apply then leaves every
field KServe's webhook defaults to KServe, so defaulting never causes an update
loop.
"""

from __future__ import annotations

from typing import Any

from .gateway import render_transformer
from .metadata import child_labels, owner_reference
from .vllm_args import vllm_args

ISVC_API_VERSION = "serving.kserve.io/v1beta1"
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
# The format our vLLM pooling runtimes declare in supportedModelFormats.
MODEL_FORMAT = "vLLM"
GPU_RESOURCE = "nvidia.com/gpu"


def served_name(reward_model: dict[str, Any]) -> str:
    return reward_model["spec"]["model"].get("servedName") or reward_model["metadata"]["name"]


def _resources(spec: dict[str, Any]) -> dict[str, Any]:
    wanted: dict[str, Any] = {}
    resources = spec.get("resources", {})
    for field in ("cpu", "memory"):
        if field in resources:
            wanted[field] = str(resources[field])
    if resources.get("gpus", 0) > 0:
        wanted[GPU_RESOURCE] = str(resources["gpus"])
    # requests == limits: a reward model's footprint is known up front, and
    # Guaranteed QoS keeps it from being evicted mid-burst.
    return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


def _env(spec: dict[str, Any]) -> list[dict[str, Any]]:
    env = [dict(item) for item in spec.get("env", [])]
    token = spec.get("credentials", {}).get("huggingFaceToken")
    if token and not any(item["name"] == "HF_TOKEN" for item in env):
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token["name"], "key": token["key"]}},
            }
        )
    return env


def _annotations(serving: dict[str, Any]) -> dict[str, str]:
    annotations = {DEPLOYMENT_MODE: serving["mode"]}
    if serving["mode"] == "Standard":
        annotations[AUTOSCALER_CLASS] = "hpa"
    return annotations


def render_inference_service(reward_model: dict[str, Any], gateway_image: str) -> dict[str, Any]:
    """The InferenceService for a (defaulted) RewardModel; ``gateway_image`` runs its transformer."""
    metadata, spec = reward_model["metadata"], reward_model["spec"]
    serving, model = spec["serving"], spec["model"]

    model_spec: dict[str, Any] = {
        "modelFormat": {"name": MODEL_FORMAT},
        "runtime": spec["runtime"],
        "storageUri": model["uri"],
        "args": vllm_args(model, served_name(reward_model)),
    }
    if env := _env(spec):
        model_spec["env"] = env
    if resources := _resources(spec):
        model_spec["resources"] = resources

    predictor: dict[str, Any] = {
        "minReplicas": serving["minReplicas"],
        "maxReplicas": serving["maxReplicas"],
    }
    if "targetConcurrency" in serving:
        predictor["scaleMetric"] = "concurrency"
        predictor["scaleTarget"] = serving["targetConcurrency"]
    if "timeoutSeconds" in serving:
        predictor["timeout"] = serving["timeoutSeconds"]
    if account := spec.get("credentials", {}).get("serviceAccountName"):
        predictor["serviceAccountName"] = account
    if spec.get("nodeSelector"):
        predictor["nodeSelector"] = dict(spec["nodeSelector"])
    if spec.get("tolerations"):
        predictor["tolerations"] = [dict(t) for t in spec["tolerations"]]
    predictor["model"] = model_spec

    isvc_metadata: dict[str, Any] = {"name": metadata["name"]}
    if metadata.get("namespace"):
        isvc_metadata["namespace"] = metadata["namespace"]
    isvc_metadata["labels"] = child_labels(reward_model, "reward-model")
    isvc_metadata["annotations"] = _annotations(serving)
    isvc_metadata["ownerReferences"] = [owner_reference(reward_model)]
    isvc_spec: dict[str, Any] = {"predictor": predictor}
    if spec["gateway"]["enabled"]:
        isvc_spec["transformer"] = render_transformer(reward_model, served_name(reward_model), gateway_image)
    return {
        "apiVersion": ISVC_API_VERSION,
        "kind": "InferenceService",
        "metadata": isvc_metadata,
        "spec": isvc_spec,
    }
