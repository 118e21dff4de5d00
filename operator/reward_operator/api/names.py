"""Names that must not drift: field manager, labels, finalizer, default images."""

from __future__ import annotations

from .. import __version__
from . import GROUP

# Server-side apply field manager: every field the operator writes is owned by it.
FIELD_MANAGER = "reward-operator"
# kopf's finalizer (present because of the drift timer) carries the project's
# name, so `kubectl get -o yaml` says who holds the object.
FINALIZER = f"{GROUP}/reward-operator"
# Prefix of kopf's progress and diff-base annotations on our objects.
KOPF_ANNOTATION_PREFIX = GROUP

MANAGED_BY = {"app.kubernetes.io/managed-by": "reward-operator"}
PART_OF = {"app.kubernetes.io/part-of": "reward-operator"}
COMPONENT_LABEL = "app.kubernetes.io/component"

# The operator's own image carries the gateway; it moves with the version.
DEFAULT_GATEWAY_IMAGE = f"reward-operator:{__version__}"


# A RewardBatch's Job: its pods' one container, named in the pod failure policy and read back for the
# termination message.
BATCH_WORKER_CONTAINER = "worker"


def owner_label(kind: str) -> str:
    """``serving.rlhf.dev/rewardmodel`` for a RewardModel, and so on per kind."""
    return f"{GROUP}/{kind.lower()}"


# On a shared LocalModel cache: the RewardModels that use it, as a JSON list of "<namespace>/<name>".
# The cache lives while one of them does (cluster-scoped caches cannot be owned by a namespaced object).
CACHE_USERS_ANNOTATION = f"{GROUP}/users"

# On a gateway pod: the values it follows from ConfigMaps its pod mounts (the rollout's share, the model's
# generation), set by the operator when one moves. Changing the pod makes the kubelet sync it, projecting
# the new value into the running gateway at once rather than at its next periodic sync (cluster/gateways.py).
SHARE_ANNOTATION = f"{GROUP}/rollout-share"
GENERATION_ANNOTATION = f"{GROUP}/generation"
