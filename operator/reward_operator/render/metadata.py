"""Names, labels and owner references shared by every rendered child."""

from __future__ import annotations

from typing import Any

from ..api import API_VERSION, GROUP

FIELD_MANAGER = "reward-operator"
MANAGED_BY = {"app.kubernetes.io/managed-by": "reward-operator"}


def owner_label(kind: str) -> str:
    """``serving.rlhf.dev/rewardmodel`` for a RewardModel, and so on per kind."""
    return f"{GROUP}/{kind.lower()}"


def child_labels(owner: dict[str, Any], component: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        "app.kubernetes.io/part-of": "reward-operator",
        "app.kubernetes.io/component": component,
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
