"""What the rest of the test bed, and the tests, know of the real node: its name, label and taint, its
addresses, and a namespace whose pods all run on it."""

from __future__ import annotations

import ipaddress
import json
import socket
from pathlib import Path

NAME = "real-node"  # the Node object's name
LABEL = ("testenv.rlhf.dev/node", "real")
TAINT = {"key": "testenv.rlhf.dev/real-node", "value": "true", "effect": "NoSchedule"}
# Pod addresses of the real node; kwok's fake pods use 10.244.0.0/16, Services 10.0.0.0/16.
POD_SUBNET = ipaddress.ip_network("10.89.0.0/16")
BRIDGE = "rwo-testenv0"
GATEWAY = str(next(POD_SUBNET.hosts()))  # the bridge's own address: CoreDNS listens there
CLUSTER_DOMAIN = "cluster.local"
# The node's sockets, removed on down. Not under the control plane's folder: a unix socket's path has
# at most 104 bytes, and a test's temporary folder is longer (one real node per machine: one folder).
RUN_DIR = Path("/run/reward-operator-testenv-node")
CONTAINERD_SOCKET = RUN_DIR / "containerd.sock"


def in_pod_subnet(address: str) -> bool:
    return ipaddress.ip_address(address) in POD_SUBNET


def host_address() -> str:
    """The host's own non-loopback address (the kubelet refuses a loopback node IP): the source
    address of the default route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        # connect() on UDP sends nothing; it only picks the route and so the source address
        probe.connect(("198.51.100.1", 9))  # TEST-NET-2: any routed address does
        address = probe.getsockname()[0]
    if ipaddress.ip_address(address).is_loopback:
        raise RuntimeError("the host has no non-loopback IPv4 address for the real node")
    return address


def namespace_for_real_node(name: str, labels: dict | None = None) -> dict:
    """A Namespace whose pods run on the real node (PodNodeSelector, PodTolerationRestriction)."""
    toleration = {"key": TAINT["key"], "operator": "Exists", "effect": TAINT["effect"]}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": labels or {},
            "annotations": {
                "scheduler.alpha.kubernetes.io/node-selector": f"{LABEL[0]}={LABEL[1]}",
                "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps([toleration]),
            },
        },
    }
