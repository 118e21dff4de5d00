"""What a render owns: its children, and the sets of objects it answers for, so that the controller
deletes what it owns and no longer renders (kubectl's ApplySet idea: prune = owned - rendered).

Each builder of a child that comes and goes with the spec declares an :class:`Owned` set beside
the child (render/networkpolicy.py, render/scaler.py, render/canary.py, render/model_identity.py,
render/rlhfpipeline.py); the controller lists each set once and deletes the objects of it that the
render did not return (controllers/apply.py, `prune`). A child no builder declares a set for (a chat
template's ConfigMap, the InferenceGraph) lives as long as its owner, or until the garbage
collector removes it with the owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Owned:
    """The owner's objects of one kind that a builder answers for: those with the owner's labels and
    ``labels`` (which tell them from other children of the kind, such as the chat templates' ConfigMaps),
    controlled by the owner."""

    api_version: str
    kind: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # A kind that exists only where an add-on serves it (KEDA's ScaledObject): with nothing of this set
    # rendered, the set is listed only where the cluster serves that kind, never on a cluster without it.
    needs: tuple[str, str] | None = None

    def covers(self, child: Mapping[str, Any]) -> bool:
        labels = child["metadata"].get("labels") or {}
        return (child["apiVersion"], child["kind"]) == (self.api_version, self.kind) and all(
            labels.get(key) == value for key, value in self.labels.items()
        )


@dataclass(frozen=True)
class Rendered:
    """Every child, in apply order, and the sets they are pruned within."""

    children: list[dict[str, Any]]
    owned: tuple[Owned, ...] = ()

    def kept(self, owned: Owned) -> set[str]:
        """The names in ``owned`` that this render returns (the rest of the set is pruned)."""
        return {child["metadata"]["name"] for child in self.children if owned.covers(child)}
