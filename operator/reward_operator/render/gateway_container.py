"""The reward gateway's container, as both kinds run it in front of their predictors.

A RewardModel's gateway (render/gateway.py) and an RLHFPipeline role's
(render/pipeline_gateway.py) run the same image, command, port, security context
and scratch volume; they differ only in their settings and what they mount. Every
setting is an environment variable ``REWARD_GATEWAY_<NAME>``, the contract in
runtimes/gateway/README.md: ``gateway_env`` adds the prefix, here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.kserve import CONTAINER_NAME
from .runtime import quantity_bytes

ENV_PREFIX = "REWARD_GATEWAY_"
GATEWAY_PORT = 8080
DEFAULT_GATEWAY_RESOURCES = {"cpu": "1", "memory": "1Gi"}

RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}

# The root filesystem is read-only (restricted profile); the gateway's scratch space.
_TMP_VOLUME = "tmp"
_TMP_SIZE = "256Mi"


@dataclass
class Mounts:
    """What a gateway mounts besides its scratch space: pod volumes and the container's mounts of them."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)

    def add(self, volume: dict[str, Any], mount: dict[str, Any]) -> None:
        self.volumes.append(volume)
        self.mounts.append(mount)


def gateway_env(settings: Mapping[str, str]) -> list[dict[str, Any]]:
    """``{"MODEL_NAME": "x"}`` -> ``[{"name": "REWARD_GATEWAY_MODEL_NAME", "value": "x"}]``, in order."""
    return [{"name": f"{ENV_PREFIX}{key}", "value": value} for key, value in settings.items()]


def memory_limit_env(limit: str | None = None) -> dict[str, Any]:
    """The container's memory limit: the gateway sizes its request budget by it, so a limit set in the spec
    moves the budget with it (runtimes/gateway/README.md, "Memory"). Read through the downward API, or where
    ``limit`` is given, that limit written in bytes: Knative refuses the downward API in a Service's
    environment ("must not set the field(s): ...valueFrom.resourceFieldRef") unless the cluster enables its
    ``kubernetes.podspec-fieldref`` feature, which is off by default."""
    name = f"{ENV_PREFIX}MEMORY_LIMIT_BYTES"
    if limit is not None:
        return {"name": name, "value": str(quantity_bytes(limit))}
    return {"name": name, "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}


def gateway_container(
    image: str, served_name: str, env: list[dict[str, Any]], resources: Mapping[str, str], mounts: Mounts
) -> dict[str, Any]:
    """The gateway's container: requests equal to limits (``resources``), the restricted profile's settings."""
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python", "-m", "reward_gateway"],
        # KServe appends --model_name <isvc> unless one is given; with ours, the
        # gateway and KServe's InferenceGraph agree on the v1 model name.
        "args": [f"--model_name={served_name}"],
        "env": env,
        "ports": [{"containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
        "volumeMounts": [{"name": _TMP_VOLUME, "mountPath": "/tmp"}, *mounts.mounts],
    }


def gateway_volumes(mounts: Mounts) -> list[dict[str, Any]]:
    """The pod's volumes for ``gateway_container``: its scratch space, then ``mounts``' volumes."""
    return [{"name": _TMP_VOLUME, "emptyDir": {"sizeLimit": _TMP_SIZE}}, *mounts.volumes]
