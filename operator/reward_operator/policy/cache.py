"""Pure decisions about a RewardModel's LocalModel cache: who uses it, ModelCached from KServe's
report, whether the InferenceService may read from it yet.

The predictor must never start against a partly filled cache (KServe's pod webhook points it at the
volume without checking the download). So the InferenceService is bound to the cache only once
ModelCached is True: a new RewardModel's InferenceService is not created before then (starting it
would download the model a second time, then roll onto the cache); an existing one (spec.cache added
later) keeps serving from its own download, applied with KServe's opt-out annotation, and is bound by
the first apply after ModelCached turns True (KServe binds only at admission). Once bound it stays
bound: a node joining the group later (a copy pending) must not roll every predictor that uses it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..api import conditions
from ..api.cache import cache_identity
from ..api.kserve import DISABLE_LOCAL_MODEL, LOCAL_MODEL_LABEL, NODE_DOWNLOAD_ERROR, NODE_DOWNLOADED
from ..api.names import CACHE_USERS_ANNOTATION
from .status import Condition


def user_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def users(cache: Mapping[str, Any] | None) -> list[str]:
    """The RewardModels recorded on a cache ("<namespace>/<name>"), sorted."""
    if not cache:
        return []
    raw = ((cache.get("metadata") or {}).get("annotations") or {}).get(CACHE_USERS_ANNOTATION)
    try:
        listed = json.loads(raw) if raw else []
    except ValueError:
        return []
    return sorted({u for u in listed if isinstance(u, str)}) if isinstance(listed, list) else []


def users_annotation(keys: list[str] | set[str]) -> str:
    return json.dumps(sorted(set(keys)), separators=(",", ":"))


def uses(reward_model: Mapping[str, Any] | None, identity: tuple[str, str, str | None]) -> bool:
    """Whether ``reward_model`` (as stored: None once gone) still uses the cache ``identity``
    ((kind, name, namespace), see :func:`reward_operator.api.cache.cache_identity`)."""
    if reward_model is None or (reward_model.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return cache_identity(reward_model) == identity


def conflict(stored_spec: Mapping[str, Any], wanted_spec: Mapping[str, Any]) -> str | None:
    """What differs between the shared cache as stored and as this RewardModel would make it, or None."""
    differences = [
        f"{field} is {stored_spec.get(field)!r}, this spec asks {wanted_spec.get(field)!r}"
        for field in ("modelSize", "nodeGroups", "serviceAccountName")
        if str(stored_spec.get(field)) != str(wanted_spec.get(field))
    ]
    return "; ".join(differences) or None


def model_cached(cache: Mapping[str, Any] | None, conflict_message: str | None = None) -> Condition:
    """ModelCached from KServe's report on the cache (status.copies and status.nodeStatus)."""
    name = ((cache or {}).get("metadata") or {}).get("name", "")
    if conflict_message:
        return Condition(
            conditions.MODEL_CACHED,
            "False",
            conditions.CACHE_CONFLICT,
            f"{(cache or {}).get('kind', 'cache')} {name} is shared and set up differently ({conflict_message}): "
            "make spec.cache agree with the other RewardModels that use this model",
        )
    status = (cache or {}).get("status") or {}
    copies = status.get("copies") or {}
    nodes: dict[str, str] = status.get("nodeStatus") or {}
    if not copies and not nodes:
        return Condition(
            conditions.MODEL_CACHED, "Unknown", conditions.CACHE_DOWNLOADING,
            f"waiting for KServe's LocalModel controller to report on {name}",
        )  # fmt: skip
    total, available = int(copies.get("total") or len(nodes)), int(copies.get("available") or 0)
    failed = sorted(node for node, state in nodes.items() if state == NODE_DOWNLOAD_ERROR)
    if failed or int(copies.get("failed") or 0):
        return Condition(
            conditions.MODEL_CACHED, "False", conditions.CACHE_DOWNLOAD_FAILED,
            f"{name}: download failed on {', '.join(failed) or 'a node'} ({available}/{total} copies available); "
            "see the download Jobs in KServe's job namespace",
        )  # fmt: skip
    if total == 0:
        return Condition(
            conditions.MODEL_CACHED, "False", conditions.CACHE_NO_NODES,
            f"{name}: the node groups select no node to cache on",
        )  # fmt: skip
    if available >= total:
        return Condition(
            conditions.MODEL_CACHED, "True", conditions.CACHE_DOWNLOADED, f"{name}: {available}/{total} copies"
        )
    pending = ", ".join(f"{node} {state}" for node, state in sorted(nodes.items()) if state != NODE_DOWNLOADED)
    return Condition(
        conditions.MODEL_CACHED, "Unknown", conditions.CACHE_DOWNLOADING,
        f"{name}: {available}/{total} copies" + (f" ({pending})" if pending else ""),
    )  # fmt: skip


def bound(cached: Condition, isvc: Mapping[str, Any] | None, cache_name: str) -> bool:
    """Whether the InferenceService is to read from the cache (see the module's docstring)."""
    if cached.status == "True":
        return True
    labels = ((isvc or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(LOCAL_MODEL_LABEL) == cache_name


def held(cached: Condition) -> Condition:
    """Ready while a new RewardModel's InferenceService waits for its cache."""
    failed = cached.status == "False"
    return Condition(
        conditions.READY,
        "False" if failed else "Unknown",
        conditions.MODEL_CACHE_FAILED if failed else conditions.AWAITING_MODEL_CACHE,
        f"the InferenceService is created once the model cache is filled: {cached.message}",
    )


def identity_status(identity: tuple[str, str, str | None]) -> dict[str, str]:
    """status.modelCache for a cache identity (kind, name, namespace or None)."""
    kind, name, namespace = identity
    return {"kind": kind, "name": name, **({"namespace": namespace} if namespace else {})}


def previous_identity(reward_model: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """The cache the status says this RewardModel used when last reconciled, or None."""
    recorded = (reward_model.get("status") or {}).get("modelCache") or {}
    if not recorded.get("kind") or not recorded.get("name"):
        return None
    return recorded["kind"], recorded["name"], recorded.get("namespace")


def released(reward_model: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """The cache this RewardModel used and no longer does (spec.cache removed, or its URI or scope
    changed), to be let go of: its InferenceService opted out of it, and its users swept."""
    previous = previous_identity(reward_model)
    return previous if previous is not None and previous != cache_identity(reward_model) else None


def bound_to(isvc: Mapping[str, Any] | None) -> str | None:
    """The name of the cache KServe bound an InferenceService to, or None."""
    return (((isvc or {}).get("metadata") or {}).get("labels") or {}).get(LOCAL_MODEL_LABEL)


def opted_out(isvc: Mapping[str, Any] | None) -> bool:
    return DISABLE_LOCAL_MODEL in (((isvc or {}).get("metadata") or {}).get("annotations") or {})
