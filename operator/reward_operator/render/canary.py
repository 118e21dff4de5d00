"""A candidate reward model beside the stable one (spec.canary): its predictor and what its gateway is told.

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
the gateway is told the candidate's Service and the mode
(``REWARD_GATEWAY_CANARY_*``, runtimes/gateway/README.md). Its share comes from
the operator's rollout (status.canary), never from the spec alone: the
operator moves it step by step and back to 0.

The share is not in the gateway's environment but in a ConfigMap
``<owner>-rollout`` (key ``percent``) that the gateway's pods mount and follow
(``REWARD_GATEWAY_CANARY_PERCENT_FILE``): a step rewrites the ConfigMap, the
kubelet projects it into the running pods (within its sync period, about a
minute) and the gateways take it up without a restart, so a step changes no pod
template, rolls no gateway and keeps their figures; a gateway started
mid-rollout reads the current share at start. Not an admin endpoint the
operator calls, nor the gateway reading the RewardModel: neither credentials nor
a write endpoint in the data path, a new or restarted pod needs nothing from the
operator, and it works alike in both modes. The lag costs nothing: the
operator's gates pool only the replicas whose GET /canary reports the decided
share (policy/canary.py).

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
from dataclasses import dataclass
from typing import Any

from ..api import kserve
from ..api.canary import CanaryIdentity
from ..api.duration import interval_seconds
from ..api.kserve import CANARY_PREDICTOR, cluster_local_url
from ..api.names import COMPONENT_LABEL
from ..api.naming import candidate_isvc_name, candidate_service, rollout_config_map_name
from ..api.naming import candidate_template_config_map_name as template_config_map_name
from ..api.types import CanarySpec, ModelSpec, ResourcesSpec, RewardModelSpec
from . import chat_template
from .gateway_container import Mounts
from .gateway_wait import gateway_wait
from .judge import judge_setting
from .metadata import child_metadata
from .model_identity import identity_settings
from .owned import Owned
from .predictor import model_env, predictor
from .served_model import served_model

# Names that lived here first: the controllers and the tests import them from here.
__all__ = [
    "CanaryIdentity",
    "Candidate",
    "GatewayRollout",
    "canary_entry",
    "candidate_isvc_name",
    "candidate_predictor",
    "candidate_service",
    "gateway_rollout",
    "interval_seconds",
    "template_config_map",
    "template_config_map_name",
]

# The candidate's own chat template: its ConfigMap, and where the gateway reads it
# (vLLM's candidate container mounts it where the stable one mounts its own).
TEMPLATE_COMPONENT = "candidate-chat-template"
GATEWAY_TEMPLATE_VOLUME = "candidate-chat-template"
GATEWAY_TEMPLATE_DIR = "/etc/reward-model-candidate"
GATEWAY_TEMPLATE_PATH = f"{GATEWAY_TEMPLATE_DIR}/{chat_template.FILE_NAME}"

# Knative mode's candidate InferenceService, and its component label.
CANDIDATE_COMPONENT = "candidate-model"

# The rollout's ConfigMap: the candidate's current share, which the gateway mounts and follows. Its
# component label is what sets it apart from the chat templates' ConfigMaps when it is pruned.
ROLLOUT_COMPONENT = "rollout"
ROLLOUT_KEY = "percent"
ROLLOUT_VOLUME = "rollout"
ROLLOUT_DIR = "/etc/reward-rollout"
ROLLOUT_PATH = f"{ROLLOUT_DIR}/{ROLLOUT_KEY}"


@dataclass(frozen=True)
class Candidate:
    """The candidate as rendered once per reconcile: KServe's ``spec.canary[]`` entry, which Standard mode's
    InferenceService carries and which names it in either mode (:func:`candidate_digest`), and who it is."""

    entry: dict[str, Any]
    identity: CanaryIdentity


@dataclass
class GatewayRollout:
    """What the stable model's gateway adds for a rollout: its settings (without the prefix) and mounts."""

    settings: dict[str, str]
    mounts: Mounts


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


def _template_volume(owner_name: str, canary: CanarySpec, standalone: bool, templated: bool) -> dict[str, Any] | None:
    """The candidate's own template under the stable one's volume name and path (so vLLM reads it where the
    stable model reads its own); else, in an InferenceService of its own, the stable model's template."""
    if has_own_template(canary):
        return {"name": chat_template.VOLUME, "configMap": {"name": template_config_map_name(owner_name)}}
    if standalone and templated:
        return chat_template.volume(owner_name)
    return None


def candidate_predictor(owner_name: str, spec: RewardModelSpec, served_name: str, standalone: bool) -> dict[str, Any]:
    """The candidate's predictor, on spec.runtime or else the default for its own GPUs.

    ``standalone`` False: Standard mode's ``spec.canary[]`` entry, which KServe merges over the stable
    predictor, so the stable one's pod settings carry over; every field of its model is rendered whole, as
    KServe's merge replaces lists rather than merging them. ``standalone`` True: the whole predictor of
    Knative mode's candidate InferenceService, with the stable one's pod settings spelled out."""
    canary = spec["canary"]
    credentials = spec.get("credentials", {})
    merged = candidate_model(spec["model"], canary)
    env = model_env(spec.get("env", []), credentials)
    model_spec = served_model(
        merged, candidate_resources(spec["resources"], canary), spec.get("runtime"), served_name, env
    )
    volume = _template_volume(owner_name, canary, standalone, "chatTemplate" in merged)
    if standalone:
        return predictor(
            model_spec,
            {**spec["serving"], "minReplicas": canary["replicas"]},
            credentials,
            spec.get("nodeSelector", {}),
            spec.get("tolerations", []),
            [volume] if volume else None,
            held_for=gateway_wait(spec),
        )
    entry: dict[str, Any] = {"name": CANARY_PREDICTOR, "minReplicas": canary["replicas"]}
    if volume:
        # KServe's merge replaces the stable predictor's volumes with these
        entry["volumes"] = [volume]
    entry["model"] = model_spec
    return entry


def rollout_config_map(owner: dict[str, Any], percent: int) -> dict[str, Any]:
    """The candidate's current share (0 in shadow mode) as the file the gateway follows."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(owner, rollout_config_map_name(owner["metadata"]["name"]), ROLLOUT_COMPONENT),
        "data": {ROLLOUT_KEY: str(percent)},
    }


def canary_entry(owner_name: str, spec: RewardModelSpec, served_name: str) -> dict[str, Any]:
    """The InferenceService's ``spec.canary[]`` entry for the candidate (Standard mode)."""
    # 0: KServe routes nothing to it; the gateway splits (see the module's docstring).
    return {"predictor": candidate_predictor(owner_name, spec, served_name, standalone=False), "trafficPercent": 0}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def candidate_digest(entry: dict[str, Any], canary: CanarySpec) -> str:
    """What identifies the candidate: its rendered predictor and template, and a judge's own prompt and verdict
    (a new judge template is a new candidate, even on the same weights)."""
    identity = {"predictor": entry["predictor"], "template": canary["model"].get("chatTemplate")}
    if "judge" in canary:
        identity["judge"] = canary["judge"]
    return _digest(identity)


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


def candidate(owner_name: str, spec: RewardModelSpec, served_name: str) -> Candidate:
    """spec.canary's candidate: its entry, rendered once, and the identity digested from it."""
    canary = spec["canary"]
    entry = canary_entry(owner_name, spec, served_name)
    name = candidate_name(served_name, candidate_digest(entry, canary))
    return Candidate(entry, CanaryIdentity(name, rollout_revision(name, canary)))


def owned(owner: dict[str, Any]) -> tuple[Owned, ...]:
    """What a rollout leaves once spec.canary goes: the share's ConfigMap (by its component label: the chat
    templates' ConfigMaps are never listed) and, in Knative mode, the candidate's InferenceService. Listed
    only while a rollout is on or was just on (status.canary still reports it)."""
    if "canary" not in owner["spec"] and "canary" not in (owner.get("status") or {}):
        return ()
    sets = [Owned("v1", "ConfigMap", {COMPONENT_LABEL: ROLLOUT_COMPONENT})]
    if owner["spec"]["serving"]["mode"] == "Knative":
        candidate = {COMPONENT_LABEL: CANDIDATE_COMPONENT}
        sets.append(Owned(kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND, candidate))
    return tuple(sets)


def gateway_rollout(
    isvc: str,
    mode: str,
    namespace: str,
    canary: CanarySpec,
    stable_served_name: str,
    candidate_served_name: str,
    name: str,
    gateway_templated: bool,
) -> GatewayRollout:
    """The gateway's REWARD_GATEWAY_CANARY_* settings, the rollout's ConfigMap it reads the share from, and
    the candidate's own template where the gateway applies templates. Nothing here moves with the share."""
    env = {"CANARY_URL": cluster_local_url(candidate_service(isvc, mode), namespace)}
    if candidate_served_name != stable_served_name:
        env["CANARY_MODEL_NAME"] = candidate_served_name
    env["CANARY_NAME"] = name
    env.update(identity_settings(canary["model"]["uri"], "CANARY_"))
    env["CANARY_MODE"] = canary["mode"]
    env["CANARY_PERCENT_FILE"] = ROLLOUT_PATH
    if canary["mode"] == "split":
        env["CANARY_STICKY"] = canary["sticky"]
        if "clientHeader" in canary:
            env["CANARY_CLIENT_HEADER"] = canary["clientHeader"]
    # the gateways' window covers about one step
    env["CANARY_HALF_LIFE_SECONDS"] = str(int(interval_seconds(canary["interval"])))
    if "judge" in canary:
        env["CANARY_JUDGE"] = judge_setting(canary["judge"])
    mounts = Mounts()
    if gateway_templated and has_own_template(canary):
        env["CANARY_CHAT_TEMPLATE_FILE"] = GATEWAY_TEMPLATE_PATH
        mounts.add(
            {"name": GATEWAY_TEMPLATE_VOLUME, "configMap": {"name": template_config_map_name(isvc)}},
            {"name": GATEWAY_TEMPLATE_VOLUME, "mountPath": GATEWAY_TEMPLATE_DIR, "readOnly": True},
        )
    # A directory, not a subPath: the kubelet re-projects a changed ConfigMap only into directory mounts.
    mounts.add(
        {"name": ROLLOUT_VOLUME, "configMap": {"name": rollout_config_map_name(isvc)}},
        {"name": ROLLOUT_VOLUME, "mountPath": ROLLOUT_DIR, "readOnly": True},
    )
    return GatewayRollout(env, mounts)
