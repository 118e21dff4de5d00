"""Reads, server-side applies and status patches of custom objects.

Namespaced and cluster-scoped objects alike (an InferenceService, a
LocalModelCache), addressed by apiVersion and kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from ..api.names import FIELD_MANAGER
from .client import custom, is_not_found, translated

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def plural_of(kind: str) -> str:
    return kind.lower() + "s"


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
    """A custom object (cluster-scoped when ``namespace`` is None), or None."""
    group, version = _group_version(api_version)
    if namespace is None:
        return or_none(lambda: custom().get_cluster_custom_object(group, version, plural_of(kind), name))
    return or_none(lambda: custom().get_namespaced_custom_object(group, version, namespace, plural_of(kind), name))


def apply(manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply, taking ownership of the fields in ``manifest``; returns the object as stored.

    A manifest without metadata.namespace is applied as a cluster-scoped object."""
    group, version = _group_version(manifest["apiVersion"])
    metadata, plural = manifest["metadata"], plural_of(manifest["kind"])
    options: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "dry_run": "All" if dry_run else None,
        "_content_type": APPLY_PATCH,
        # The generated client maps only a 200 response to a body, and an apply
        # that creates answers 201, so the body is read here whatever the status.
        "_preload_content": False,
    }
    with translated():
        if metadata.get("namespace"):
            response = custom().patch_namespaced_custom_object(
                group, version, metadata["namespace"], plural, metadata["name"], manifest, **options
            )
        else:
            response = custom().patch_cluster_custom_object(
                group, version, plural, metadata["name"], manifest, **options
            )
    return json.loads(response.data)


def patch_status(api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    group, version = _group_version(api_version)
    with translated():
        custom().patch_namespaced_custom_object_status(
            group, version, namespace, plural_of(kind), name, {"status": status}, _content_type=MERGE_PATCH
        )
