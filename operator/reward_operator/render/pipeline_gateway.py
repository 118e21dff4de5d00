"""The gateway of each RLHFPipeline role, as its InferenceService's transformer.

The same reward_gateway image as a RewardModel's, started in a pipeline role
(``REWARD_GATEWAY_PIPELINE_ROLE``): KServe's router can neither reshape a payload
nor combine answers, and vLLM's generate and pooling servers answer neither
KServe's v1 predict path nor one another's shapes, so every step of the graph
(render/inferencegraph.py) calls a gateway route under ``/v1/pipeline/``. The
environment below is the contract between the operator and those roles; the
routes themselves are the gateway's (reward_gateway.pipeline.routes).
"""

from __future__ import annotations

import json
from typing import Any

from ..api.kserve import cluster_local_url, predictor_name
from ..api.types import RewardRef, RoleGateway, RoleServing
from .gateway_container import (
    DEFAULT_GATEWAY_RESOURCES,
    GATEWAY_PORT,
    Mounts,
    gateway_container,
    gateway_env,
    gateway_volumes,
    memory_limit_env,
)

_OPTIONAL_ENV = (("maxConcurrency", "MAX_CONCURRENCY"), ("requestTimeoutSeconds", "REQUEST_TIMEOUT_SECONDS"))


def role_env(
    role: str,
    upstream_url: str,
    served_name: str,
    gateway: RoleGateway,
    rewards: list[RewardRef] | None = None,
    best_of_n: int | None = None,
) -> list[dict[str, Any]]:
    """``rewards`` and ``best_of_n`` for the actor's gateway only: it combines the parts of a score (the
    weights and normalisations by the graph's step names) and picks the best of n candidates."""
    env = {
        "PIPELINE_ROLE": role,
        "UPSTREAM_URL": upstream_url,
        "MODEL_NAME": served_name,
        "PORT": str(GATEWAY_PORT),
    }
    for field, variable in _OPTIONAL_ENV:
        if field in gateway:
            env[variable] = str(gateway[field])  # type: ignore[literal-required]
    if rewards is not None:
        env["PIPELINE_REWARDS"] = json.dumps(
            [{"step": reward_step(r["name"]), "weight": r["weight"], "normalise": r["normalise"]} for r in rewards],
            separators=(",", ":"),
        )
    if best_of_n is not None:
        env["PIPELINE_BEST_OF_N"] = str(best_of_n)
    return [*gateway_env(env), memory_limit_env()]


def reward_step(reward_model: str) -> str:
    """The graph's step (and the key of its part in the Ensemble's answer) for a reward model."""
    return f"reward-{reward_model}"


def role_transformer(
    isvc: str,
    namespace: str,
    role: str,
    served_name: str,
    gateway: RoleGateway,
    serving: RoleServing,
    image: str,
    rewards: list[RewardRef] | None = None,
    best_of_n: int | None = None,
) -> dict[str, Any]:
    """The gateway in front of the predictor KServe creates for InferenceService ``isvc``; it scales with
    the predictor (the pipeline's roles never go to zero)."""
    wanted = {**DEFAULT_GATEWAY_RESOURCES, **{k: str(v) for k, v in gateway.get("resources", {}).items()}}
    env = role_env(role, cluster_local_url(predictor_name(isvc), namespace), served_name, gateway, rewards, best_of_n)
    return {
        "minReplicas": serving["minReplicas"],
        "maxReplicas": serving["maxReplicas"],
        "containers": [gateway_container(image, served_name, env, wanted, Mounts())],
        "volumes": gateway_volumes(Mounts()),
    }
