"""The reward gateway as the InferenceService's transformer.

KServe routes the InferenceService's URL to the transformer, so trainers reach
the gateway and the gateway reaches vLLM through the predictor's Service. The
environment below is the gateway's whole contract (runtimes/gateway/README.md).
"""

from __future__ import annotations

from typing import Any

from ..api.keda import scales_through_keda
from ..api.kserve import cluster_local_url, predictor_name
from ..api.types import GatewaySpec, JudgeSpec, ModelSpec, ServingSpec
from . import chat_template, scaler
from .canary import GatewayRollout
from .gateway_container import (
    DEFAULT_GATEWAY_RESOURCES,
    GATEWAY_PORT,
    RESTRICTED_CONTAINER_SECURITY,
    Mounts,
    gateway_container,
    gateway_env,
    gateway_volumes,
    memory_limit_env,
)
from .gateway_scheduling import scheduling_settings
from .gateway_wait import worst_case_seconds
from .judge import judge_setting
from .model_identity import generation_settings, identity_settings

# Where they were first defined: the cluster layer and the tests import them from here.
__all__ = ["DEFAULT_GATEWAY_RESOURCES", "GATEWAY_PORT", "RESTRICTED_CONTAINER_SECURITY", "transformer"]

AUTH_MOUNT = "/var/run/secrets/reward-gateway"
# The gateway's memory budget for the requests it holds is its container's
# limit less what the process takes (runtimes/gateway/README.md, "Memory"); it
# reads the limit through the downward API, so a limit set in the spec moves the
# budget with it. A token model's answers carry a value per token, and its
# requests cost that much more: twice the memory keeps the same request sizes.
DEFAULT_GATEWAY_MEMORY_BY_KIND = {"token": "2Gi"}
# During a rollout the gateway charges each request twice (both models may score it at
# once, runtimes/gateway/README.md): the default memory doubles with it, so the same
# requests still fit. A memory set in the spec is the user's, and stays as set.
ROLLOUT_MEMORY_FACTOR = 2

# spec.gateway field -> REWARD_GATEWAY_* variable, for the optional settings.
_OPTIONAL_ENV = (
    ("bosToken", "BOS_TOKEN"),
    ("eosToken", "EOS_TOKEN"),
    ("stepTag", "STEP_TAG"),
    ("stepAggregate", "STEP_AGGREGATE"),
    ("maxConcurrency", "MAX_CONCURRENCY"),
    ("requestTimeoutSeconds", "REQUEST_TIMEOUT_SECONDS"),
    ("scaleFromZeroTimeoutSeconds", "SCALE_FROM_ZERO_TIMEOUT_SECONDS"),
    ("maxHeldRequests", "MAX_HELD_REQUESTS"),
    ("maxItems", "MAX_ITEMS"),
    ("truncatePromptTokens", "TRUNCATE_PROMPT_TOKENS"),
)


def _settings(
    upstream_url: str, model: ModelSpec, gateway: GatewaySpec, served_name: str, judge: JudgeSpec | None
) -> dict[str, str]:
    settings = {
        "UPSTREAM_URL": upstream_url,
        "MODEL_NAME": served_name,
        **identity_settings(model["uri"]),
        "MODEL_KIND": model["kind"],
        "CHAT_TEMPLATE_MODE": gateway["chatTemplateMode"],
        "PORT": str(GATEWAY_PORT),
    }
    if "rewardTokenId" in model:  # vLLM appends nothing: the gateway appends it (reward_gateway.scoring.reward_token)
        settings["REWARD_TOKEN_ID"] = str(model["rewardTokenId"])
    if judge is not None:
        settings["JUDGE"] = judge_setting(judge)
    if gateway["chatTemplateMode"] == "gateway":
        settings["CHAT_TEMPLATE_FILE"] = chat_template.PATH
    for field, variable in _OPTIONAL_ENV:
        if field in gateway:
            settings[variable] = str(gateway[field])
    settings.update(scheduling_settings(gateway.get("scheduling", {})))
    if "authSecretRef" in gateway:
        settings["AUTH_TOKEN_FILE"] = f"{AUTH_MOUNT}/token"
    return settings


def _memory(model: ModelSpec, rollout: bool) -> str:
    memory = DEFAULT_GATEWAY_MEMORY_BY_KIND.get(model["kind"], DEFAULT_GATEWAY_RESOURCES["memory"])
    if rollout:
        number, unit = memory[:-2], memory[-2:]
        memory = f"{int(number) * ROLLOUT_MEMORY_FACTOR}{unit}"
    return memory


def transformer(
    isvc: str,
    namespace: str,
    model: ModelSpec,
    gateway: GatewaySpec,
    serving: ServingSpec,
    served_name: str,
    image: str,
    rollout: GatewayRollout | None = None,
    judge: JudgeSpec | None = None,
) -> dict[str, Any]:
    """The gateway in front of the predictor KServe creates for InferenceService ``isvc``; ``rollout``: the
    settings and mounts of a candidate model rolled out beside the stable one (spec.canary); ``judge``: a
    judge's prompt and verdict (spec.judge)."""
    settings = _settings(cluster_local_url(predictor_name(isvc), namespace), model, gateway, served_name, judge)
    defaults = {**DEFAULT_GATEWAY_RESOURCES, "memory": _memory(model, rollout is not None)}
    wanted = {**defaults, **{k: str(v) for k, v in gateway.get("resources", {}).items()}}
    mounts = Mounts()
    if auth := gateway.get("authSecretRef"):
        mounts.add(
            {
                "name": "gateway-auth",
                "secret": {"secretName": auth["name"], "items": [{"key": auth["key"], "path": "token"}]},
            },
            {"name": "gateway-auth", "mountPath": AUTH_MOUNT, "readOnly": True},
        )
    if gateway["chatTemplateMode"] == "gateway":
        mounts.add(chat_template.volume(isvc), chat_template.volume_mount())
    settings.update(generation_settings(isvc, mounts))
    keda = scales_through_keda(serving)
    if keda:
        settings.update(scaler.gateway_env(isvc, namespace, serving))
    if serving["mode"] == "Knative":
        # Knative's activator holds the call while the predictor wakes: the call may take the wait too
        settings["REQUEST_TIMEOUT_SECONDS"] = str(worst_case_seconds(gateway))
    # Knative's Service takes no downward API by default: the limit as a number there
    env = [*gateway_env(settings), memory_limit_env(wanted["memory"] if serving["mode"] == "Knative" else None)]
    if rollout is not None:
        env += gateway_env(rollout.settings)
        mounts.volumes += rollout.mounts.volumes
        mounts.mounts += rollout.mounts.mounts
    container = gateway_container(image, served_name, env, wanted, mounts)
    if keda:
        # KServe's transformer Service takes every container port, so each needs a name (the first's must
        # not say grpc or h2c: KServe would mark the HTTP port h2c)
        container["ports"][0]["name"] = "http"
        container["ports"].append(scaler.gateway_port())
        # The gateway holds the requests and wakes the predictor, so it never goes to zero; with
        # autoscalerClass external KServe keeps it at the count it was created with. (A replica added by hand
        # is counted too: each answers KEDA for all of them, through the scaler Service.)
        spec: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 1}
    else:
        # The gateway scales with the predictor: at zero together between bursts (Knative mode).
        spec = {"minReplicas": serving["minReplicas"], "maxReplicas": serving["maxReplicas"]}
    if serving["mode"] == "Knative":
        # Knative cuts a request at its revision timeout (300 s unless set): the
        # gateway may hold one through a scale from zero and then one vLLM call.
        spec["timeout"] = worst_case_seconds(gateway)
    spec["containers"] = [container]
    spec["volumes"] = gateway_volumes(mounts)
    return spec
