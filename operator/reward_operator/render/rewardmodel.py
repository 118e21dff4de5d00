"""RewardModel -> its children: a ConfigMap with its chat template (when it has
one), NetworkPolicies for the gateway's allowed clients (when it names them) and
the InferenceService (vLLM pooling predictor, reward gateway transformer)."""

from __future__ import annotations

from typing import Any

from ..api.kserve import STORAGE_SECRET_NAME
from ..api.types import RewardModel
from . import chat_template, networkpolicy
from .gateway import transformer
from .inferenceservice import annotations, inference_service
from .metadata import child_metadata
from .predictor import model, model_env, predictor, resources
from .vllm_args import vllm_args

COMPONENT = "reward-model"
# Children that come and go with the spec: the controller deletes the ones of
# these kinds it owns and no longer renders (the rest live as long as their owner).
PRUNED_KINDS = ((networkpolicy.API_VERSION, networkpolicy.KIND),)


def served_name(reward_model: RewardModel) -> str:
    return reward_model["spec"]["model"].get("servedName") or reward_model["metadata"]["name"]


def reward_model_children(reward_model: RewardModel, gateway_image: str) -> list[dict[str, Any]]:
    """Every child of a (defaulted) RewardModel, in apply order."""
    children = []
    if template := reward_model["spec"]["model"].get("chatTemplate"):
        children.append(chat_template.config_map(reward_model, template))  # mounted: applied first
    # before the InferenceService, so its pods never run unprotected
    children += networkpolicy.network_policies(
        reward_model, reward_model["metadata"]["name"], reward_model["spec"]["gateway"], reward_model["spec"]["serving"]
    )
    children.append(reward_model_inference_service(reward_model, gateway_image))
    return children


def reward_model_inference_service(reward_model: RewardModel, gateway_image: str) -> dict[str, Any]:
    """The InferenceService for a (defaulted) RewardModel; ``gateway_image`` runs its transformer."""
    name, spec = reward_model["metadata"]["name"], reward_model["spec"]
    credentials = spec.get("credentials", {})
    templated = "chatTemplate" in spec["model"]
    model_spec = model(
        spec["model"]["uri"],
        spec["runtime"],
        vllm_args(spec["model"], served_name(reward_model), chat_template.PATH if templated else None),
        model_env(spec.get("env", []), credentials),
        resources(spec["resources"]),
        [chat_template.volume_mount()] if templated else None,
    )
    rendered_predictor = predictor(
        model_spec,
        spec["serving"],
        credentials,
        spec.get("nodeSelector", {}),
        spec.get("tolerations", []),
        [chat_template.volume(name)] if templated else None,
    )
    rendered_transformer = None
    if spec["gateway"]["enabled"]:
        rendered_transformer = transformer(
            name,
            reward_model["metadata"].get("namespace", "default"),
            spec["model"],
            spec["gateway"],
            spec["serving"],
            served_name(reward_model),
            gateway_image,
        )
    isvc_annotations = annotations(spec["serving"])
    token = credentials.get("huggingFaceToken")
    if token and spec["model"]["uri"].startswith("hf://"):
        # KServe's storage initializer downloads hf:// models; it takes the token
        # from this Secret (key HF_TOKEN), not from the vLLM container's env.
        isvc_annotations[STORAGE_SECRET_NAME] = token["name"]
    metadata = child_metadata(reward_model, name, COMPONENT, isvc_annotations)
    return inference_service(metadata, rendered_predictor, rendered_transformer)
