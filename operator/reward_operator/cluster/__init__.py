"""The only layer that talks to the API server (and the only importer of ``kubernetes``).

Every write is a server-side apply with the one field manager, or a status
merge patch; API errors leave this layer as :class:`ClusterError` (retry later)
or :class:`Refused` (the API server refused what we sent: a user-facing problem).
"""

from .client import ClusterError, Refused
from .kubernetes_cluster import KubernetesCluster
from .protocol import Cluster, Logger

__all__ = ["Cluster", "ClusterError", "KubernetesCluster", "Logger", "Refused"]
