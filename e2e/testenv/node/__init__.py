"""A real node beside kwok's fake ones: kubelet, containerd + runc, CNI, kube-proxy and CoreDNS.

kwok's nodes make pods Running without running anything; this node runs them. The kubelet and
kube-proxy are built from the control plane's own Kubernetes module, containerd, the CNI plugins
and CoreDNS from their Go modules (``testenv.builds``); runc and iptables come from Debian's
packages. Each runs as one more recorded process of the control plane.

Real and fake nodes are kept apart by a taint: the real node carries ``TAINT`` and the label
``LABEL``. Nothing lands on it by accident. A namespace made for it (``namespace_for_real_node``)
carries the annotations of Kubernetes' PodNodeSelector and PodTolerationRestriction admission
plugins, so every pod created there (KServe's predictor and transformer alike) is pinned to the real
node and tolerates its taint, without a field of the RewardModel changed for the test bed.

The modules: ``facts`` (its name, label, taint and addresses), ``configs`` (its processes' configuration
files and command lines), ``host`` (the host's changes, recorded, and their undoing), ``storage`` (the
models' storage server), ``addon`` (the add-on that starts it all) and ``pod_host`` (a pod seen from the
host: its process and link, for tests that take a pod away mid-request).
"""

from .addon import RealNode
from .facts import (
    CLUSTER_DOMAIN,
    CONTAINERD_SOCKET,
    LABEL,
    NAME,
    POD_SUBNET,
    TAINT,
    host_address,
    in_pod_subnet,
    namespace_for_real_node,
)
from .host import clean_host, clear_interrupted_run, host_differences, owned_by
from .storage import PROCESS as STORAGE
from .storage import failing_url, storage_command, storage_dir, storage_url

__all__ = [
    "CLUSTER_DOMAIN",
    "CONTAINERD_SOCKET",
    "LABEL",
    "NAME",
    "POD_SUBNET",
    "STORAGE",
    "TAINT",
    "RealNode",
    "clean_host",
    "clear_interrupted_run",
    "failing_url",
    "host_address",
    "host_differences",
    "in_pod_subnet",
    "namespace_for_real_node",
    "owned_by",
    "storage_command",
    "storage_dir",
    "storage_url",
]
