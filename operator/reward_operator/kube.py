"""The few API calls the controllers make, on the official kubernetes client.

Kept in one place so the controllers read as policy (read, render, apply,
summarise) and so every write goes through server-side apply with one field
manager.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .render.metadata import FIELD_MANAGER

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api_client())


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def plural_of(kind: str) -> str:
    return kind.lower() + "s"


def is_not_found(error: ApiException) -> bool:
    return error.status == 404


def _or_none(read: Callable[[], T]) -> T | None:
    """The object ``read`` returns, or None when the API server says it does not exist."""
    try:
        return read()
    except ApiException as error:
        if is_not_found(error):
            return None
        raise


def get_namespaced(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    group, version = _group_version(api_version)
    return _or_none(lambda: custom().get_namespaced_custom_object(group, version, namespace, plural_of(kind), name))


def get_cluster(api_version: str, kind: str, name: str) -> dict[str, Any] | None:
    group, version = _group_version(api_version)
    return _or_none(lambda: custom().get_cluster_custom_object(group, version, plural_of(kind), name))


def apply(manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Server-side apply of a namespaced custom object, taking ownership of its fields."""
    group, version = _group_version(manifest["apiVersion"])
    metadata = manifest["metadata"]
    # The generated client maps only a 200 response to a body, and an apply that
    # creates answers 201, so the body is read here whatever the status.
    response = custom().patch_namespaced_custom_object(
        group,
        version,
        metadata["namespace"],
        plural_of(manifest["kind"]),
        metadata["name"],
        manifest,
        field_manager=FIELD_MANAGER,
        force=True,
        dry_run="All" if dry_run else None,
        _content_type=APPLY_PATCH,
        _preload_content=False,
    )
    return json.loads(response.data)


def patch_status(api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    group, version = _group_version(api_version)
    custom().patch_namespaced_custom_object_status(
        group, version, namespace, plural_of(kind), name, {"status": status}, _content_type=MERGE_PATCH
    )


def secret_keys(namespace: str, name: str) -> set[str] | None:
    """The keys of a Secret (never its values), or None when it does not exist."""
    secret = _or_none(lambda: core().read_namespaced_secret(name, namespace))
    if secret is None:
        return None
    return set((secret.data or {}).keys()) | set((secret.string_data or {}).keys())


def service_account_exists(namespace: str, name: str) -> bool:
    return _or_none(lambda: core().read_namespaced_service_account(name, namespace)) is not None


def ready_replicas(namespace: str, deployment: str) -> int | None:
    found = _or_none(lambda: apps().read_namespaced_deployment(deployment, namespace))
    if found is None:
        return None
    return (found.status.ready_replicas or 0) if found.status else 0


def post_event(owner: dict[str, Any], event_type: str, reason: str, message: str) -> None:
    """One core/v1 Event about ``owner``, reported by reward-operator."""
    metadata = owner["metadata"]
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{metadata['name']}.", namespace=metadata["namespace"]),
        involved_object=client.V1ObjectReference(
            api_version=owner["apiVersion"],
            kind=owner["kind"],
            name=metadata["name"],
            namespace=metadata["namespace"],
            uid=metadata.get("uid"),
            resource_version=metadata.get("resourceVersion"),
        ),
        type=event_type,
        reason=reason,
        message=message[:1024],
        first_timestamp=now,
        last_timestamp=now,
        count=1,
        source=client.V1EventSource(component=FIELD_MANAGER),
        reporting_component=FIELD_MANAGER,
        reporting_instance=FIELD_MANAGER,
    )
    core().create_namespaced_event(metadata["namespace"], event)
