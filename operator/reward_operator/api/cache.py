"""The one naming rule for spec.cache's LocalModel cache, shared by render, policy and the controller."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .kserve import LOCAL_MODEL_CACHE_KIND, LOCAL_MODEL_NAMESPACE_CACHE_KIND

# KServe puts the cache's name in a label of each InferenceService it binds (63 characters at most)
# and derives PV and PVC names from it, the node group and the namespace.
_SLUG_MAX = 40


def cache_name(uri: str) -> str:
    """``<the URI's last path segment>-<digest of the URI>``: readable, and one name per URI, so every
    RewardModel with that model renders the same cache."""
    tail = uri.rstrip("/").rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[:_SLUG_MAX].strip("-") or "model"
    return f"{slug}-{hashlib.sha256(uri.encode()).hexdigest()[:10]}"


def cache_kind(scope: str) -> str:
    return LOCAL_MODEL_CACHE_KIND if scope == "Cluster" else LOCAL_MODEL_NAMESPACE_CACHE_KIND


def cache_identity(reward_model: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """(kind, name, namespace or None when cluster-wide) of the cache a RewardModel uses, or None."""
    spec = reward_model.get("spec") or {}
    cache = spec.get("cache")
    if not cache:
        return None
    scope = cache.get("scope", "Namespace")
    namespace = None if scope == "Cluster" else reward_model["metadata"].get("namespace", "default")
    return cache_kind(scope), cache_name(spec["model"]["uri"]), namespace
