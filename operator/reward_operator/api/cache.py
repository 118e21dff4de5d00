"""spec.cache's LocalModel cache as render, policy and the controller identify it (its name: api/naming.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kserve import LOCAL_MODEL_CACHE_KIND, LOCAL_MODEL_NAMESPACE_CACHE_KIND
from .naming import cache_name

__all__ = ["cache_identity", "cache_kind", "cache_name"]


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
