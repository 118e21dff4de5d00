"""core/v1 Events about our objects, reported by reward-operator."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from ..api.names import FIELD_MANAGER
from .client import core, translated


def post_event(owner: dict[str, Any], event_type: str, reason: str, message: str) -> None:
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
    with translated():
        core().create_namespaced_event(metadata["namespace"], event)
