"""A candidate reward model beside the stable one (spec.canary, issue #13).

Standard mode: the candidate is KServe v0.20's ``spec.canary[]`` entry named
``canary``, for which KServe makes its own Deployment and Service
``<isvc>-canary-predictor``. KServe merges the entry over the stable predictor
(so node selector, tolerations, service account and strategy carry over) and
runs it at the entry's fixed ``minReplicas``.

The split itself happens in the reward gateway, never in KServe: v0.20.0 routes
no traffic to a canary (weighted routes came after the release), our transformer
calls the stable predictor's Service directly, and a per-request split between
two predictors would let one GRPO group, or one batch, be scored by two models
with two scales. So ``trafficPercent`` stays 0 (KServe's "dark launch") and
the gateway is told the candidate's Service, the mode and the current share
(``REWARD_GATEWAY_CANARY_*``, runtimes/gateway/README.md). Its share comes from
the operator's rollout (status.canary), never from the spec alone: the
operator moves it step by step and back to 0.

Knative mode: the candidate is a second InferenceService ``<isvc>-canary``, a
predictor without a transformer, whose predictor Service the gateway calls, for
shadow and split alike. Not ``canaryTrafficPercent``: Knative splits requests
between two revisions of one predictor per HTTP call, with no stickiness, so the
calls of one batch (the gateway makes one per group) would be scored by two models
with two scales, and the gateway would never see which one answered, so nothing
could be compared; a candidate revision would also replace the stable one on
promotion whatever the gates said. The second InferenceService keeps the gateway
in charge of the split in both modes, and scales to zero as the stable one does.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..api.kserve import CANARY_PREDICTOR, canary_predictor_name, cluster_local_url, predictor_name
from ..api.types import CanarySpec, ModelSpec, ResourcesSpec
from . import chat_template
from .metadata import child_metadata
from .predictor import model, resources
from .runtime import engine_args, runtime
from .vllm_args import vllm_args

# The candidate's own chat template: its ConfigMap, and where the gateway reads it
# (vLLM's candidate container mounts it where the stable one mounts its own).
TEMPLATE_COMPONENT = "candidate-chat-template"
GATEWAY_TEMPLATE_VOLUME = "candidate-chat-template"
GATEWAY_TEMPLATE_DIR = "/etc/reward-model-candidate"
GATEWAY_TEMPLATE_PATH = f"{GATEWAY_TEMPLATE_DIR}/{chat_template.FILE_NAME}"

# Knative mode's candidate InferenceService, and its component label.
CANDIDATE_COMPONENT = "candidate-model"


def candidate_isvc_name(owner_name: str) -> str:
    """Knative mode: the candidate's InferenceService (its predictor Service is <owner>-canary-predictor, the
    name KServe gives the canary predictor in Standard mode)."""
    return f"{owner_name}-{CANARY_PREDICTOR}"


def candidate_service(owner_name: str, mode: str) -> str:
    """The Service of the candidate's vLLM, in either mode (the same name)."""
    if mode == "Knative":
        return predictor_name(candidate_isvc_name(owner_name))
    return canary_predictor_name(owner_name)


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def interval_seconds(duration: str) -> float:
    """A Go duration as the schema admits it (90s, 10m, 1h30m) in seconds."""
    parts = _DURATION_PART.findall(duration)
    if not parts or "".join(number + unit for number, unit in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def template_config_map_name(owner_name: str) -> str:
    return f"{owner_name}-candidate-chat-template"


def candidate_model(stable: ModelSpec, canary: CanarySpec) -> dict[str, Any]:
    """spec.model with the candidate's fields over it; kind is always the stable model's."""
    merged: dict[str, Any] = {**stable, **canary["model"], "kind": stable["kind"]}
    if stable["kind"] != "process":
        merged.pop("stepTagId", None)
        merged.pop("returnedTokenIds", None)
    return merged


def candidate_resources(stable: ResourcesSpec, canary: CanarySpec) -> dict[str, Any]:
    return {**stable, **canary.get("resources", {})}


def has_own_template(canary: CanarySpec) -> bool:
    return "chatTemplate" in canary["model"]


def template_config_map(owner: dict[str, Any], canary: CanarySpec) -> dict[str, Any] | None:
    """The candidate's own chat template as a file (see render/chat_template.py), or None."""
    if not has_own_template(canary):
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(owner, template_config_map_name(owner["metadata"]["name"]), TEMPLATE_COMPONENT),
        "data": {chat_template.FILE_NAME: canary["model"]["chatTemplate"]},
    }


def canary_entry(
    owner_name: str,
    stable_model: ModelSpec,
    stable_resources: ResourcesSpec,
    canary: CanarySpec,
    named_runtime: str | None,
    served_name: str,
    env: list[dict[str, Any]],
) -> dict[str, Any]:
    """The InferenceService's ``spec.canary[]`` entry for the candidate (Standard mode), on
    ``named_runtime`` (spec.runtime) or else the default for its own GPUs.

    Every field of its model is rendered whole, as KServe's merge replaces lists
    rather than merging them; the stable predictor's pod settings carry over."""
    merged = candidate_model(stable_model, canary)
    templated = "chatTemplate" in merged
    compute = candidate_resources(stable_resources, canary)
    model_spec = model(
        merged["uri"],
        runtime(named_runtime, compute["gpus"]),
        vllm_args(merged, served_name, chat_template.PATH if templated else None, engine_args(merged, compute, env)),
        env,
        resources(compute),  # type: ignore[arg-type]
        [chat_template.volume_mount()] if templated else None,
    )
    predictor: dict[str, Any] = {"name": CANARY_PREDICTOR, "minReplicas": canary["replicas"]}
    if has_own_template(canary):
        # KServe's merge replaces the stable predictor's volumes with these: the
        # candidate's template under the stable one's volume name and path.
        predictor["volumes"] = [
            {"name": chat_template.VOLUME, "configMap": {"name": template_config_map_name(owner_name)}}
        ]
    predictor["model"] = model_spec
    # 0: KServe routes nothing to it; the gateway splits (see the module's docstring).
    return {"predictor": predictor, "trafficPercent": 0}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def candidate_digest(entry: dict[str, Any], canary: CanarySpec) -> str:
    """What identifies the candidate: its rendered predictor and template."""
    return _digest({"predictor": entry["predictor"], "template": canary["model"].get("chatTemplate")})


def rollout_revision(candidate: str, canary: CanarySpec) -> str:
    """What makes one rollout: the candidate, how it is rolled out, and its attempt. A change starts it
    over; the gates' thresholds and the interval may change within one."""
    keys = ("mode", "percent", "steps", "sticky", "clientHeader", "attempt")
    shares = {key: canary.get(key) for key in keys}  # type: ignore[misc]
    return _digest({"candidate": candidate, **shares})[:16]


def candidate_name(served_name: str, digest: str) -> str:
    """The candidate's name in the gateway's metrics and GET /canary: new with every candidate, so
    the figures of two candidates are never pooled."""
    return f"{served_name}-candidate-{digest[:8]}"


def gateway_env(
    isvc: str,
    mode: str,
    namespace: str,
    canary: CanarySpec,
    stable_served_name: str,
    candidate_served_name: str,
    name: str,
    percent: int,
    gateway_templated: bool,
) -> dict[str, str]:
    """The gateway's REWARD_GATEWAY_CANARY_* settings (without the prefix) for the current share."""
    env = {"CANARY_URL": cluster_local_url(candidate_service(isvc, mode), namespace)}
    if candidate_served_name != stable_served_name:
        env["CANARY_MODEL_NAME"] = candidate_served_name
    env["CANARY_NAME"] = name
    env["CANARY_MODE"] = canary["mode"]
    if canary["mode"] == "split":
        env["CANARY_PERCENT"] = str(percent)
        env["CANARY_STICKY"] = canary["sticky"]
        if "clientHeader" in canary:
            env["CANARY_CLIENT_HEADER"] = canary["clientHeader"]
    # the gateways' window covers about one step
    env["CANARY_HALF_LIFE_SECONDS"] = str(int(interval_seconds(canary["interval"])))
    if gateway_templated and has_own_template(canary):
        env["CANARY_CHAT_TEMPLATE_FILE"] = GATEWAY_TEMPLATE_PATH
    return env


def gateway_template_volume(owner_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume and mount that give the gateway the candidate's own template."""
    volume = {"name": GATEWAY_TEMPLATE_VOLUME, "configMap": {"name": template_config_map_name(owner_name)}}
    mount = {"name": GATEWAY_TEMPLATE_VOLUME, "mountPath": GATEWAY_TEMPLATE_DIR, "readOnly": True}
    return volume, mount
