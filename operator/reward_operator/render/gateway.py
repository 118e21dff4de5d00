"""The reward gateway as the InferenceService's transformer.

KServe routes the InferenceService's URL to the transformer, so trainers reach
the gateway and the gateway reaches vLLM through the predictor's Service. The
environment below is the gateway's whole contract (runtimes/gateway/README.md).
"""

from __future__ import annotations

from typing import Any

GATEWAY_PORT = 8080
AUTH_MOUNT = "/var/run/secrets/reward-gateway"
DEFAULT_GATEWAY_RESOURCES = {"cpu": "1", "memory": "1Gi"}

# spec.gateway field -> REWARD_GATEWAY_* variable, for the optional settings.
_OPTIONAL_ENV = (
    ("bosToken", "BOS_TOKEN"),
    ("stepTag", "STEP_TAG"),
    ("stepAggregate", "STEP_AGGREGATE"),
    ("maxConcurrency", "MAX_CONCURRENCY"),
    ("requestTimeoutSeconds", "REQUEST_TIMEOUT_SECONDS"),
    ("scaleFromZeroTimeoutSeconds", "SCALE_FROM_ZERO_TIMEOUT_SECONDS"),
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


def predictor_url(name: str, namespace: str) -> str:
    """The predictor Service KServe creates, in either deployment mode."""
    return f"http://{name}-predictor.{namespace}.svc.cluster.local"


def _env(reward_model: dict[str, Any], served_name: str) -> list[dict[str, Any]]:
    metadata, spec = reward_model["metadata"], reward_model["spec"]
    gateway, model = spec["gateway"], spec["model"]
    env = {
        "UPSTREAM_URL": predictor_url(metadata["name"], metadata.get("namespace", "default")),
        "MODEL_NAME": served_name,
        "MODEL_KIND": model["kind"],
        "CHAT_TEMPLATE_MODE": gateway["chatTemplateMode"],
        "PORT": str(GATEWAY_PORT),
    }
    if gateway["chatTemplateMode"] == "gateway":
        env["CHAT_TEMPLATE"] = model["chatTemplate"]
    for field, variable in _OPTIONAL_ENV:
        if field in gateway:
            env[variable] = str(gateway[field])
    if "authSecretRef" in gateway:
        env["AUTH_TOKEN_FILE"] = f"{AUTH_MOUNT}/token"
    return [{"name": f"REWARD_GATEWAY_{key}", "value": value} for key, value in env.items()]


def render_transformer(reward_model: dict[str, Any], served_name: str, image: str) -> dict[str, Any]:
    spec = reward_model["spec"]
    gateway, serving = spec["gateway"], spec["serving"]
    wanted = {**DEFAULT_GATEWAY_RESOURCES, **{k: str(v) for k, v in gateway.get("resources", {}).items()}}
    container: dict[str, Any] = {
        "name": "kserve-container",
        "image": image,
        "command": ["python", "-m", "reward_gateway"],
        "env": _env(reward_model, served_name),
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
    # The gateway scales with the predictor: at zero together between bursts.
    return {
        "minReplicas": serving["minReplicas"],
        "maxReplicas": serving["maxReplicas"],
        "containers": [container],
        "volumes": volumes,
    }
