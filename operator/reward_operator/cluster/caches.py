"""The shared LocalModel cache of spec.cache: made (or adopted), its users recorded, removed with the last.

Every user applies the same cache (its name comes from the model URI), but who uses it cannot be part
of that apply: with one field manager, each user's apply would drop the others' records. The users are
recorded instead by a merge patch with the stored resourceVersion as precondition (a concurrent writer
means a conflict and a retry, never a lost user): the annotation ``serving.rlhf.dev/users`` on every
cache, and, on a namespaced cache, an owner reference per user, so Kubernetes' garbage collector removes
it after its last user even while the operator is down. A cluster-scoped cache cannot be owned by a
namespaced RewardModel: :func:`sweep` checks its recorded users and deletes it once none remains, on
every event of the cache (among them the list the operator's watch starts with, so users deleted while
it was stopped are noticed when it starts) and when a user is deleted.

KServe's webhook refuses to delete a cache that an InferenceService it lists still uses; the users'
InferenceServices go with them (garbage collection), KServe's controller then rewrites the cache's
status, and that event sweeps again.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from ..api import API_VERSION, REWARD_MODEL_KIND
from ..api.kserve import (
    DISABLE_LOCAL_MODEL,
    INFERENCE_SERVICE_API_VERSION,
    INFERENCE_SERVICE_KIND,
    LOCAL_MODEL_API_VERSION,
)
from ..api.names import CACHE_USERS_ANNOTATION, FIELD_MANAGER, MANAGED_BY
from ..policy import cache as cache_policy
from ..render.cache import user_reference
from .client import ClusterError, Refused, is_not_found, translated
from .objects import MERGE_PATCH, apply, call, get, object_path

log = logging.getLogger(__name__)

# Attempts at recording a user when other writers keep changing the cache in between.
_RECORD_ATTEMPTS = 3


def _path(cache: dict[str, Any]) -> str:
    metadata = cache["metadata"]
    return object_path(cache["apiVersion"], cache["kind"], metadata["name"], metadata.get("namespace"))


def _merge_patch(path: str, body: dict[str, Any]) -> dict[str, Any]:
    return call("PATCH", path, [("fieldManager", FIELD_MANAGER)], body, content_type=MERGE_PATCH)


def ensure(manifest: dict[str, Any], reward_model: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The cache ``manifest`` describes, made or brought to it, with ``reward_model`` recorded as a user;
    returns (the stored cache, a conflict message or None).

    A cache that others use and that is set up differently (modelSize, nodeGroups) is left as it is:
    the conflict is reported, and this RewardModel is still recorded (KServe binds by URI alone)."""
    metadata = manifest["metadata"]
    key = cache_policy.user_key(reward_model["metadata"]["namespace"], reward_model["metadata"]["name"])
    stored = get(manifest["apiVersion"], manifest["kind"], metadata["name"], metadata.get("namespace"))
    conflict = None
    if stored is not None and stored["metadata"].get("deletionTimestamp"):
        # its last user went a moment ago: made again once KServe has cleaned it up
        raise ClusterError(None, "Conflict", f"{manifest['kind']} {metadata['name']} is being deleted")
    if stored is not None:
        others = [user for user in cache_policy.users(stored) if user != key]
        conflict = cache_policy.conflict(stored.get("spec") or {}, manifest["spec"]) if others else None
    if conflict is None:
        stored = apply(manifest)  # Refused when KServe's webhook refuses it (e.g. a node group missing)
    assert stored is not None
    for attempt in range(_RECORD_ATTEMPTS):
        recorded = cache_policy.users(stored)
        references = stored["metadata"].get("ownerReferences") or []
        namespaced = "namespace" in stored["metadata"]
        uid = reward_model["metadata"]["uid"]
        owned = not namespaced or any(ref.get("uid") == uid for ref in references)
        if key in recorded and owned:
            break
        patch: dict[str, Any] = {
            "metadata": {
                "resourceVersion": stored["metadata"]["resourceVersion"],
                "annotations": {CACHE_USERS_ANNOTATION: cache_policy.users_annotation([*recorded, key])},
            }
        }
        if not owned:
            patch["metadata"]["ownerReferences"] = [*references, user_reference(reward_model)]  # type: ignore[arg-type]
        try:
            with translated():
                stored = _merge_patch(_path(stored), patch)
            break
        except ClusterError as error:
            if error.status != 409 or attempt == _RECORD_ATTEMPTS - 1:
                raise
            stored = get(manifest["apiVersion"], manifest["kind"], metadata["name"], metadata.get("namespace"))
            if stored is None:
                raise
    return stored, conflict


def _reward_model(key: str) -> dict[str, Any] | None:
    namespace, _, name = key.partition("/")
    return get(API_VERSION, REWARD_MODEL_KIND, name, namespace)


def sweep(kind: str, name: str, namespace: str | None) -> str:
    """Drop the users of a cache we made that no longer use it, and delete it once none is left;
    returns what happened (kept | updated | deleted | refused | gone)."""
    stored = get(LOCAL_MODEL_API_VERSION, kind, name, namespace)
    if stored is None or stored["metadata"].get("deletionTimestamp"):
        return "gone"
    labels = stored["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in MANAGED_BY.items()):
        return "kept"  # not ours
    recorded = cache_policy.users(stored)
    if not recorded:
        return "kept"  # just made: its maker records itself next
    identity = (kind, name, namespace)
    alive = [user for user in recorded if cache_policy.uses(_reward_model(user), identity)]
    if alive == recorded:
        return "kept"
    path = object_path(LOCAL_MODEL_API_VERSION, kind, name, namespace)
    precondition = stored["metadata"]["resourceVersion"]
    with translated():
        try:
            if alive:
                _merge_patch(
                    path,
                    {
                        "metadata": {
                            "resourceVersion": precondition,
                            "annotations": {CACHE_USERS_ANNOTATION: cache_policy.users_annotation(alive)},
                        }
                    },
                )
                return "updated"
            # the precondition: a user recorded since the read keeps it
            call("DELETE", path, [], {"preconditions": {"resourceVersion": precondition}})
        except ApiException as error:
            if is_not_found(error):
                return "gone"
            if error.status == 409:
                return "kept"  # changed meanwhile: its next event sweeps again
            raise
    return "deleted"


def sweep_quietly(kind: str, name: str, namespace: str | None, logger: logging.Logger | logging.LoggerAdapter) -> str:
    """:func:`sweep` for event handlers: KServe's refusal (an InferenceService still listed) and API
    errors wait for the cache's next event instead of raising."""
    try:
        result = sweep(kind, name, namespace)
    except Refused as error:
        logger.info("%s %s kept for now: %s", kind, name, error.message)
        return "refused"
    except ClusterError as error:
        logger.info("%s %s not swept (%s); its next event retries", kind, name, error)
        return "error"
    if result in ("updated", "deleted"):
        where = f"{namespace}/" if namespace else ""
        logger.info("%s %s%s: %s (its users are gone)", kind, where, name, result)
    return result


def set_cache_opt_out(isvc_name: str, namespace: str, out: bool) -> None:
    """Set (or clear) KServe's opt-out annotation on an InferenceService by merge patch: an admission
    of its own, at which KServe's webhook unbinds (or binds) the cache. Not part of the operator's
    server-side apply, so a later apply that no longer renders it does not take it away again."""
    path = object_path(INFERENCE_SERVICE_API_VERSION, INFERENCE_SERVICE_KIND, isvc_name, namespace)
    with translated():
        try:
            _merge_patch(path, {"metadata": {"annotations": {DISABLE_LOCAL_MODEL: "true" if out else None}}})
        except ApiException as error:
            if not is_not_found(error):
                raise
