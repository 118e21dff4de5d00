"""Reads, server-side applies and status patches of custom objects.

Namespaced and cluster-scoped objects alike (an InferenceService, a
LocalModelCache), addressed by apiVersion and kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ..api.names import FIELD_MANAGER
from .client import api_client, custom, is_not_found, translated

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def plural_of(kind: str) -> str:
    """The resource name of a kind: ``inferenceservices``, ``networkpolicies``, ``rewardbatches``."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in tuple("aeiou"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def or_none(read: Callable[[], T]) -> T | None:
    """The object ``read`` returns, or None when the API server says it does not exist."""
    with translated():
        try:
            return read()
        except ApiException as error:
            if is_not_found(error):
                return None
            raise


def get(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """An object of any kind, core (``v1``) or a group's (cluster-scoped when ``namespace`` is None), or None."""
    if "/" not in api_version:
        return or_none(lambda: call("GET", object_path(api_version, kind, name, namespace), []))
    group, version = _group_version(api_version)
    if namespace is None:
        return or_none(lambda: custom().get_cluster_custom_object(group, version, plural_of(kind), name))
    return or_none(lambda: custom().get_namespaced_custom_object(group, version, namespace, plural_of(kind), name))


def object_path(api_version: str, kind: str, name: str, namespace: str | None = None) -> str:
    """The REST path of an object of any kind: core (``v1``) or a group's."""
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{scope}/{plural_of(kind)}/{name}"


def apply(manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply of any kind, taking ownership of the fields in ``manifest``; returns the stored object.

    A manifest without metadata.namespace is applied as a cluster-scoped object."""
    metadata = manifest["metadata"]
    path = object_path(manifest["apiVersion"], manifest["kind"], metadata["name"], metadata.get("namespace"))
    query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
    if dry_run:
        query.append(("dryRun", "All"))
    client = api_client()
    request = client.param_serialize(
        method="PATCH",
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": APPLY_PATCH, "Accept": "application/json"},
        body=manifest,
        auth_settings=["BearerToken"],
    )
    with translated():
        # The typed clients cover one group each; an apply is the same PATCH for
        # every kind, and its answer (200, or 201 on create) is the object.
        response = client.call_api(*request)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
    return json.loads(response.data)


def create(manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the object, or return the one of its name as stored (untouched) where it exists."""
    metadata = manifest["metadata"]
    namespace = metadata.get("namespace")
    path = object_path(manifest["apiVersion"], manifest["kind"], metadata["name"], namespace)
    with translated():
        try:
            return call("POST", path.rpartition("/")[0], [("fieldManager", FIELD_MANAGER)], manifest)
        except ApiException as error:
            if error.status != 409:
                raise
    found = get(manifest["apiVersion"], manifest["kind"], metadata["name"], namespace)
    if found is None:  # made and deleted between the two calls: a conflict, retried
        with translated():
            raise ApiException(status=409, reason=f"{manifest['kind']} {metadata['name']} was deleted as it was read")
    return found


def serialized(
    client: ApiClient,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: dict[str, Any] | None,
    content_type: str = "application/json",
) -> tuple[Any, ...]:
    """A request to any kind's REST path, as ``client.call_api`` takes it (JSON answers, the client's token)."""
    return client.param_serialize(
        method=method,
        resource_path=path,
        query_params=query,
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )


def call(
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: dict[str, Any] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One request to any kind's REST path; the decoded answer (ApiException on a non-2xx)."""
    client = api_client()
    response = client.call_api(*serialized(client, method, path, query, body, content_type))
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return json.loads(response.data)


def served(api_version: str, kind: str) -> bool:
    """Whether the API server serves ``kind`` in ``api_version`` (its CRD is installed), from discovery."""
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    with translated():
        try:
            listed = call("GET", root, [])
        except ApiException as error:
            if is_not_found(error):
                return False
            raise
    return any(resource.get("name") == plural_of(kind) for resource in listed.get("resources", []))


def prune(
    api_version: str, kind: str, namespace: str, labels: dict[str, str], owner_uid: str, keep: set[str]
) -> list[str]:
    """Delete the objects of ``kind`` labelled ``labels`` and controlled by ``owner_uid`` whose names are not
    in ``keep``; returns the names deleted. Nothing else is touched: an object someone else made, even one
    with our labels, has no controller reference to this owner."""
    collection = object_path(api_version, kind, "", namespace).rstrip("/")
    selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    deleted = []
    with translated():
        listed = call("GET", collection, [("labelSelector", selector)])
        for item in listed.get("items", []):
            metadata = item["metadata"]
            controlled = any(
                ref.get("controller") and ref.get("uid") == owner_uid for ref in metadata.get("ownerReferences", [])
            )
            if not controlled or metadata["name"] in keep:
                continue
            try:
                # the uid precondition: a same-named object made since the list is left alone
                call(
                    "DELETE",
                    f"{collection}/{metadata['name']}",
                    [],
                    {"preconditions": {"uid": metadata["uid"]}, "propagationPolicy": "Background"},
                )
            except ApiException as error:
                if not is_not_found(error):
                    raise
            deleted.append(metadata["name"])
    return deleted


def patch_status(api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch an object's status; returns the object as stored after the patch."""
    group, version = _group_version(api_version)
    with translated():
        return custom().patch_namespaced_custom_object_status(
            group, version, namespace, plural_of(kind), name, {"status": status}, _content_type=MERGE_PATCH
        )
