"""Applying an owner's children, and deleting what it owns and no longer renders, for every kind alike.

A child the API server (or a webhook) refuses is :class:`Rejected`: the kind's sync reports
it as ApplyFailed with the server's message. Pruning follows render/owned.py: each set a
render declares is listed once, by the owner's labels plus the set's own, and the objects
in it that the owner controls and the render did not return are deleted (the garbage
collector would only remove them with the owner). A set of a kind only an add-on serves is
listed only where something of it is rendered or the cluster serves that kind.
"""

from __future__ import annotations

from typing import Any

from ..api.names import MANAGED_BY, owner_label
from ..cluster import Cluster, Logger, Refused
from ..render import Rendered


class Rejected(Exception):
    """The API server or a webhook refused an object this reconcile applies: ApplyFailed, with its message."""

    def __init__(self, manifest: dict[str, Any], error: Refused):
        super().__init__(f"{manifest['kind']} {manifest['metadata']['name']} rejected: {error.message}")


def apply(child: dict[str, Any], cluster: Cluster) -> dict[str, Any]:
    """``child`` applied, as stored. Raises :class:`Rejected`."""
    try:
        return cluster.apply(child)
    except Refused as error:
        raise Rejected(child, error) from error


def prune(owner: dict[str, Any], rendered: Rendered, cluster: Cluster, logger: Logger) -> None:
    """Delete the objects of each set ``rendered`` owns that it does not return."""
    metadata = owner["metadata"]
    labels = {**MANAGED_BY, owner_label(owner["kind"]): metadata["name"]}
    for owned in rendered.owned:
        keep = rendered.kept(owned)
        if owned.needs is not None and not keep and not cluster.serves(*owned.needs):
            continue  # none can exist: the kind is not served here
        namespace, selector = metadata["namespace"], {**labels, **owned.labels}
        for name in cluster.prune(owned.api_version, owned.kind, namespace, selector, metadata["uid"], keep):
            logger.info("%s %s is no longer rendered; deleted", owned.kind, name)
