"""RewardModel -> its children: today one InferenceService (vLLM pooling
predictor, reward gateway transformer)."""

from __future__ import annotations

from typing import Any

from ..api.types import RewardModel
from .gateway import transformer
from .inferenceservice import annotations, inference_service
from .metadata import child_metadata
from .predictor import model, model_env, predictor, resources
from .vllm_args import vllm_args

COMPONENT = "reward-model"


def served_name(reward_model: RewardModel) -> str:
    return reward_model["spec"]["model"].get("servedName") or reward_model["metadata"]["name"]


def reward_model_inference_service(reward_model: RewardModel, gateway_image: str) -> dict[str, Any]:
    """The InferenceService for a (defaulted) RewardModel; ``gateway_image`` runs its transformer."""
    name, spec = reward_model["metadata"]["name"], reward_model["spec"]
    credentials = spec.get("credentials", {})
    model_spec = model(
        spec["model"]["uri"],
        spec["runtime"],
        vllm_args(spec["model"], served_name(reward_model)),
        model_env(spec.get("env", []), credentials),
        resources(spec["resources"]),
    )
    rendered_predictor = predictor(
        model_spec, spec["serving"], credentials, spec.get("nodeSelector", {}), spec.get("tolerations", [])
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
    metadata = child_metadata(reward_model, name, COMPONENT, annotations(spec["serving"]))
    return inference_service(metadata, rendered_predictor, rendered_transformer)
