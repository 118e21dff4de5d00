"""The reward gateway as the InferenceService's transformer.

KServe routes the InferenceService's URL to the transformer, so trainers reach
the gateway and the gateway reaches vLLM through the predictor's Service. The
environment below is the gateway's whole contract (runtimes/gateway/README.md).
"""

from __future__ import annotations

from typing import Any

from ..api.keda import scales_through_keda
from ..api.kserve import CONTAINER_NAME, cluster_local_url, predictor_name
from ..api.schema.rewardmodel import GATEWAY_REQUEST_TIMEOUT_SECONDS, GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS
from ..api.types import GatewaySpec, ModelSpec, ServingSpec
from . import chat_template, scaler

GATEWAY_PORT = 8080
AUTH_MOUNT = "/var/run/secrets/reward-gateway"
# The gateway's memory budget for the requests it holds is its container's
# limit less what the process takes (runtimes/gateway/README.md, "Memory"); it
# reads the limit through the downward API, so a limit set in the spec moves the
# budget with it. A token model's answers carry a value per token, and its
# requests cost that much more: twice the memory keeps the same request sizes.
DEFAULT_GATEWAY_RESOURCES = {"cpu": "1", "memory": "1Gi"}
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

RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _env(upstream_url: str, model: ModelSpec, gateway: GatewaySpec, served_name: str) -> list[dict[str, Any]]:
    env = {
        "UPSTREAM_URL": upstream_url,
        "MODEL_NAME": served_name,
        "MODEL_KIND": model["kind"],
        "CHAT_TEMPLATE_MODE": gateway["chatTemplateMode"],
        "PORT": str(GATEWAY_PORT),
    }
    if gateway["chatTemplateMode"] == "gateway":
        env["CHAT_TEMPLATE_FILE"] = chat_template.PATH
    for field, variable in _OPTIONAL_ENV:
        if field in gateway:
            env[variable] = str(gateway[field])
    if "authSecretRef" in gateway:
        env["AUTH_TOKEN_FILE"] = f"{AUTH_MOUNT}/token"
    rendered: list[dict[str, Any]] = [{"name": f"REWARD_GATEWAY_{key}", "value": value} for key, value in env.items()]
    rendered.append(
        {"name": "REWARD_GATEWAY_MEMORY_LIMIT_BYTES", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}
    )
    return rendered


def transformer(
    isvc: str,
    namespace: str,
    model: ModelSpec,
    gateway: GatewaySpec,
    serving: ServingSpec,
    served_name: str,
    image: str,
    rollout: bool = False,
) -> dict[str, Any]:
    """The gateway in front of the predictor KServe creates for InferenceService ``isvc``; ``rollout``: a
    candidate model is rolled out beside the stable one (spec.canary)."""
    upstream_url = cluster_local_url(predictor_name(isvc), namespace)
    memory = DEFAULT_GATEWAY_MEMORY_BY_KIND.get(model["kind"], "1Gi")
    if rollout:
        number, unit = memory[:-2], memory[-2:]
        memory = f"{int(number) * ROLLOUT_MEMORY_FACTOR}{unit}"
    defaults = {**DEFAULT_GATEWAY_RESOURCES, "memory": memory}
    wanted = {**defaults, **{k: str(v) for k, v in gateway.get("resources", {}).items()}}
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python", "-m", "reward_gateway"],
        # KServe appends --model_name <isvc> unless one is given; with ours, the
        # gateway and KServe's InferenceGraph agree on the v1 model name.
        "args": [f"--model_name={served_name}"],
        "env": _env(upstream_url, model, gateway, served_name),
        "ports": [{"containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(wanted), "limits": dict(wanted)},
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    if auth := gateway.get("authSecretRef"):
        container["volumeMounts"].append({"name": "gateway-auth", "mountPath": AUTH_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "gateway-auth",
                "secret": {"secretName": auth["name"], "items": [{"key": auth["key"], "path": "token"}]},
            }
        )
    if gateway["chatTemplateMode"] == "gateway":
        container["volumeMounts"].append(chat_template.volume_mount())
        volumes.append(chat_template.volume(isvc))
    if scales_through_keda(serving):
        container["env"][-1:-1] = [
            {"name": f"REWARD_GATEWAY_{key}", "value": value}
            for key, value in scaler.gateway_env(isvc, namespace, serving).items()
        ]
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
    spec["volumes"] = volumes
    return spec


def worst_case_seconds(gateway: GatewaySpec) -> int:
    """How long the gateway may take to answer: the wait for vLLM to come up, then one call."""
    return gateway.get("scaleFromZeroTimeoutSeconds", GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS) + gateway.get(
        "requestTimeoutSeconds", GATEWAY_REQUEST_TIMEOUT_SECONDS
    )
