"""The name of every child the operator derives from its owner's name, in one place.

Render names what it renders with these, and the cluster and controller layers find
the same objects again by them, without reaching into render/. The names KServe
gives what it creates itself (``<isvc>-predictor``, ``<isvc>-canary-predictor``) are
KServe's vocabulary, in api/kserve.py. The fixed names (labels, field manager) are in
api/names.py.
"""

from __future__ import annotations

import hashlib
import re

from .kserve import CANARY_PREDICTOR, canary_predictor_name, predictor_name

# ---- a RewardModel's children (its InferenceService carries the RewardModel's own name) ----


def chat_template_config_map_name(owner_name: str) -> str:
    """The ConfigMap with spec.model.chatTemplate, mounted into vLLM and the gateway."""
    return f"{owner_name}-chat-template"


def candidate_template_config_map_name(owner_name: str) -> str:
    """The ConfigMap with spec.canary.model.chatTemplate, the candidate's own template."""
    return f"{owner_name}-candidate-chat-template"


def rollout_config_map_name(owner_name: str) -> str:
    """The ConfigMap with the candidate's current share, which the gateway's pods mount and follow."""
    return f"{owner_name}-rollout"


def identity_config_map_name(owner_name: str) -> str:
    """The ConfigMap with the RewardModel's generation, which the gateway's pods mount and follow."""
    return f"{owner_name}-identity"


def candidate_isvc_name(owner_name: str) -> str:
    """Knative mode: the candidate's InferenceService (its predictor Service is <owner>-canary-predictor, the
    name KServe gives the canary predictor in Standard mode)."""
    return f"{owner_name}-{CANARY_PREDICTOR}"


def candidate_service(owner_name: str, mode: str) -> str:
    """The Service of the candidate's vLLM, in either mode (the same name)."""
    if mode == "Knative":
        return predictor_name(candidate_isvc_name(owner_name))
    return canary_predictor_name(owner_name)


def scaler_service_name(owner_name: str) -> str:
    """The headless Service over the gateway's pods that KEDA and the gateway's peers ask."""
    return f"{owner_name}-gateway-scaler"


def scaled_object_name(isvc: str) -> str:
    """KEDA's ScaledObject: named as the predictor Deployment it scales."""
    return predictor_name(isvc)


def gateway_policy_name(owner_name: str) -> str:
    return f"{owner_name}-gateway"


def predictor_policy_name(owner_name: str) -> str:
    return f"{owner_name}-predictor"


def candidate_predictor_policy_name(owner_name: str) -> str:
    """Knative mode: the NetworkPolicy of the candidate InferenceService's vLLM."""
    return f"{owner_name}-candidate-predictor"


# KServe puts the cache's name in a label of each InferenceService it binds (63 characters at most)
# and derives PV and PVC names from it, the node group and the namespace.
_CACHE_SLUG_MAX = 40


def cache_name(uri: str) -> str:
    """spec.cache's LocalModel cache: ``<the URI's last path segment>-<digest of the URI>``; readable, and one
    name per URI, so every RewardModel with that model renders the same (shared) cache."""
    tail = uri.rstrip("/").rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[:_CACHE_SLUG_MAX].strip("-") or "model"
    return f"{slug}-{hashlib.sha256(uri.encode()).hexdigest()[:10]}"


# ---- an RLHFPipeline's children (its InferenceGraph carries the pipeline's own name) ----

# The roles an RLHFPipeline serves, as its spec names them (spec.actor, spec.reference, spec.critic).
ACTOR, REFERENCE, CRITIC = "actor", "reference", "critic"


def role_isvc_name(pipeline: str, role: str) -> str:
    """The InferenceService of one role (actor, reference, critic)."""
    return f"{pipeline}-{role}"
