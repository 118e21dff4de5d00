"""NetworkPolicies enforced on the real node: kube-router's firewall.

`make network-policy-real` only. The test bed's CNI (the bridge plugin) does not filter packets, so the
policies the operator renders for ``gateway.allowedClients`` are accepted and select the right pods
everywhere else, but nothing refuses a connection. Here kube-router (go/kube-router: its own Go module)
runs as a recorded process of the test bed with the admin's kubeconfig, as prometheus-operator does, with
its firewall only: no routing (the bridge plugin routes) and no service proxy (kube-proxy runs). It watches
pods, namespaces and NetworkPolicies and writes iptables chains (``KUBE-ROUTER-*``, ``KUBE-NWPLCY-*``,
``KUBE-POD-FW-*``) and ipsets (``KUBE-SRC-*``, ``KUBE-DST-*``) for the pods of the real node.

Why kube-router: SIG Network's kube-network-policies needs the kernel's ``NFT_QUEUE``, which this machine's
kernel lacks (docs/network-policy.md). kube-router v2.1.0 is the only version the Go module proxy serves
here, and security flaws are reported for it: a test-bed tool on loopback and the node's bridge, never
shipped, never in front of anything but the tests' own pods.

``down`` removes what it leaves on the host: its chains go with the node's (``KUBE-`` chains,
``node.clean_host``), its ipsets after them, and ``node.host_state`` lists the ipsets, so the host test
would see one left behind. An interrupted run's kube-router is stopped with the node's processes
(``node.NODE_BINARIES``).
"""

from __future__ import annotations

import shutil

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

from . import build, node
from .helpers import answers_ok

PROCESS = "kube-router"  # the recorded process's name
# The test bed's Service range (controlplane.py: kube-apiserver's --service-cluster-ip-range); kube-router
# lets pods reach Services in it before the policies of the pods behind them decide.
SERVICE_RANGE = "10.0.0.0/16"


def missing_host_tools() -> list[str]:
    """kube-router runs Debian's ``ipset`` (and the node's iptables) for its sets."""
    return [tool for tool in ("ipset",) if shutil.which(tool) is None]


def start(plane) -> int:
    """kube-router's firewall as a process of the test bed, for the real node; returns its health port once
    it answers (its informers synced, so the policies already there are being written)."""
    if missing := missing_host_tools():
        raise RuntimeError(f"kube-router needs {', '.join(missing)} on the host: make host-packages installs it")
    binary = build.build(only=["kube-router"]) / "kube-router"
    health = free_port()
    plane.spawn(
        PROCESS,
        [
            str(binary),
            f"--kubeconfig={plane.state.kubeconfig}",
            f"--hostname-override={node.NAME}",  # its own pods are those of this Node
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            f"--health-port={health}",
            "--metrics-port=0",
        ],
    )
    log = plane.directory / "logs" / f"{PROCESS}.log"
    wait_until(f"kube-router's /healthz (its log: {log})", lambda: answers_ok(f"http://127.0.0.1:{health}/healthz"),
               timeout=120, interval=0.5)  # fmt: skip
    return health
