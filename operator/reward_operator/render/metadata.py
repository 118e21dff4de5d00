"""Labels, owner references and metadata shared by every rendered child."""

from __future__ import annotations

from typing import Any

from ..api import API_VERSION
from ..api.names import COMPONENT_LABEL, MANAGED_BY, PART_OF, owner_label


def child_labels(owner: dict[str, Any], component: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        **PART_OF,
        COMPONENT_LABEL: component,
        owner_label(owner["kind"]): owner["metadata"]["name"],
    }


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A controller reference, so the garbage collector removes the child with its owner."""
    reference = {
        "apiVersion": owner.get("apiVersion", API_VERSION),
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    # Offline renders (reward-operator render) have no uid; the cluster path always does.
    if owner["metadata"].get("uid"):
        reference["uid"] = owner["metadata"]["uid"]
    return reference


def child_metadata(
    owner: dict[str, Any], name: str, component: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A namespaced child's metadata: same namespace, our labels, owned by ``owner``."""
    metadata: dict[str, Any] = {"name": name}
    if owner["metadata"].get("namespace"):
        metadata["namespace"] = owner["metadata"]["namespace"]
    metadata["labels"] = child_labels(owner, component)
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [owner_reference(owner)]
    return metadata
