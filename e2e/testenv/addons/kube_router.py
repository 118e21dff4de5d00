"""NetworkPolicies enforced on the real node: kube-router's firewall, an add-on.

`make network-policy-real` only (``TESTENV_KUBE_ROUTER=1``; it needs the real node). The test bed's CNI (the
bridge plugin) does not filter packets, so the policies the operator renders for ``gateway.allowedClients``
are accepted and select the right pods everywhere else, but nothing refuses a connection. Here kube-router
(builds/go/kube-router: its own Go module) runs as a recorded process of the test bed with the admin's
kubeconfig, as prometheus-operator does, with its firewall only: no routing (the bridge plugin routes) and no
service proxy (kube-proxy runs). It watches pods, namespaces and NetworkPolicies and writes iptables chains
(``KUBE-ROUTER-*``, ``KUBE-NWPLCY-*``, ``KUBE-POD-FW-*``) and ipsets (``KUBE-SRC-*``, ``KUBE-DST-*``) for the
pods of the real node.

Why kube-router: SIG Network's kube-network-policies needs the kernel's ``NFT_QUEUE``, which this machine's
kernel lacks (docs/network-policy.md). kube-router v2.1.0 is the only version the Go module proxy serves
here, and security flaws are reported for it: a test-bed tool on loopback and the node's bridge, never
shipped, never in front of anything but the tests' own pods.

``down`` removes what it leaves on the host (``LEFTOVERS``): the real node's cleanup deletes its chains with
the node's, its ipsets after them, and stops an interrupted run's kube-router with the node's processes.
"""

from __future__ import annotations

import shutil

from reward_testing import versions
from reward_testing.ports import free_port

from ..node.facts import NAME as NODE_NAME
from ..plane.addon import AddOn, Leftovers, Plane, log

PROCESS = "kube-router"  # the recorded process's name, and its binary's
HEALTH_PORT = "kube-router-health"
# Its chains, and its ipsets: each policy's sources and destinations (v2.1.0's kubeSourceIPSetPrefix and
# kubeDestinationIPSetPrefix), IPv6 ones with ipset's family prefix; the sets go after the chains.
LEFTOVERS = Leftovers(
    chain_prefixes=("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"),
    ipset_prefixes=("KUBE-SRC-", "KUBE-DST-", "inet6:KUBE-SRC-", "inet6:KUBE-DST-"),
    binaries=(PROCESS,),
)


def missing_host_tools() -> list[str]:
    """kube-router runs Debian's ``ipset`` (and the node's iptables) for its sets."""
    return [tool for tool in ("ipset",) if shutil.which(tool) is None]


def command(binary: str, kubeconfig: str, service_range: str, health_port: int) -> list[str]:
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",  # its own pods are those of this Node
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        # pods reach Services in it before the policies of the pods behind them decide
        f"--service-cluster-ip-range={service_range}",
        f"--health-port={health_port}",
        "--metrics-port=0",
    ]


class KubeRouter(AddOn):
    """The add-on: started after the real node, ready once its /healthz answers (its informers synced, so the
    policies already there are being written)."""

    name = "kube-router"
    title = f"kube-router v{versions.KUBE_ROUTER}'s firewall"
    requires = ("node",)
    processes = (PROCESS,)
    build_components = ("kube-router",)
    leftovers = LEFTOVERS

    def start(self, plane: Plane, deadline: float) -> None:
        if missing := missing_host_tools():
            raise RuntimeError(f"kube-router needs {', '.join(missing)} on the host: make host-packages installs it")
        log(f"starting {self.title} on the real node")
        health = plane.state.ports[HEALTH_PORT] = free_port()
        plane.spawn(PROCESS, command(str(plane.bin / PROCESS), plane.state.kubeconfig, plane.service_range, health))

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        # its informers synced once it answers: the policies already there are being written
        return {PROCESS: (f"http://127.0.0.1:{ports.get(HEALTH_PORT)}/healthz", False)}
