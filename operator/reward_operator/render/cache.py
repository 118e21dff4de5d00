"""spec.cache -> KServe's LocalModel cache of spec.model.uri, shared by every RewardModel that names it.

The cache's name comes from the URI alone, so two RewardModels with one model (in one namespace, or
anywhere with scope: Cluster) render the same object. Who uses it is not rendered: that is recorded on
the stored cache by the cluster layer (:mod:`reward_operator.cluster.caches`), since one apply per user
would overwrite the others' records.
"""

from __future__ import annotations

from typing import Any

from ..api import API_VERSION
from ..api.cache import cache_kind, cache_name
from ..api.kserve import LOCAL_MODEL_API_VERSION
from ..api.names import COMPONENT_LABEL, MANAGED_BY, PART_OF
from ..api.types import RewardModel

COMPONENT = "model-cache"


def cache_namespace(reward_model: RewardModel) -> str | None:
    """Where the cache lives: the RewardModel's namespace, or None for a cluster-wide one."""
    cache = reward_model["spec"]["cache"]
    return None if cache["scope"] == "Cluster" else reward_model["metadata"].get("namespace", "default")


def local_model_cache(reward_model: RewardModel) -> dict[str, Any]:
    """The cache a (defaulted) RewardModel with spec.cache uses."""
    spec = reward_model["spec"]
    cache = spec["cache"]
    metadata: dict[str, Any] = {"name": cache_name(spec["model"]["uri"])}
    if (namespace := cache_namespace(reward_model)) is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {**MANAGED_BY, **PART_OF, COMPONENT_LABEL: COMPONENT}
    body: dict[str, Any] = {
        "sourceModelUri": spec["model"]["uri"],
        "modelSize": cache["modelSize"],
        "nodeGroups": list(cache["nodeGroups"]),
    }
    if account := cache.get("serviceAccountName"):
        body["serviceAccountName"] = account
    return {
        "apiVersion": LOCAL_MODEL_API_VERSION,
        "kind": cache_kind(cache["scope"]),
        "metadata": metadata,
        "spec": body,
    }


def user_reference(reward_model: RewardModel) -> dict[str, Any]:
    """An owner reference from a namespaced cache to one of its users: not the controller (there are
    several), and not blocking the user's deletion on the cache's."""
    return {
        "apiVersion": reward_model.get("apiVersion", API_VERSION),
        "kind": reward_model["kind"],
        "name": reward_model["metadata"]["name"],
        "uid": reward_model["metadata"]["uid"],
    }
