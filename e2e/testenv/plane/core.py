"""The core of every control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

Their command lines (a process each, on free loopback ports of the plane's), their health endpoints, and the
cluster's address ranges. ``controlplane`` starts them in this order; the add-ons add flags to the API server
and the controller-manager.
"""

from __future__ import annotations

from pathlib import Path

from reward_testing import pki

HERE = Path(__file__).resolve().parent
KWOK_STAGES = HERE / "kwok-stages.yaml"
FAKE_NODES = HERE / "fake-nodes.yaml"

PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")  # start order
PORTS = ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")
SERVICE_RANGE = "10.0.0.0/16"  # the Services' ClusterIPs
FAKE_POD_RANGE = "10.244.0.1/16"  # kwok's fake pods' addresses (the real node's pods have their own)

# kube-apiserver's address flags while no add-on serves it to pods: no kubelet runs, so nothing
# else may claim the kubernetes Service endpoints
LOOPBACK_ONLY = ("--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none")


def etcd_url(ports: dict[str, int]) -> str:
    return f"http://127.0.0.1:{ports['etcd']}"


def etcd_command(bin_dir: Path, directory: Path, ports: dict[str, int]) -> list[str]:
    url, peer_url = etcd_url(ports), f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        str(bin_dir / "etcd"),
        "--name=testenv",
        f"--data-dir={directory / 'etcd'}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=testenv={peer_url}",
        # a throwaway store: durability only costs start-up and test time
        "--unsafe-no-fsync",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ]


def api_server_command(
    bin_dir: Path, directory: Path, ports: dict[str, int], keys: pki.Pki, extra_flags: list[str]
) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={etcd_url(ports)}",
        f"--secure-port={ports['apiserver']}",
        # a namespace can pin its pods to the real node and let them tolerate its taint
        # (node.namespace_for_real_node)
        "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
        f"--tls-cert-file={keys.serving_cert}",
        f"--tls-private-key-file={keys.serving_key}",
        f"--client-ca-file={keys.ca_cert}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={keys.service_account_pub}",
        f"--service-account-signing-key-file={keys.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        f"--cert-dir={directory / 'pki'}",
        *extra_flags,
    ]


def _controller_flags(kubeconfig: str, port: int) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: the admin's kubeconfig for all they ask, one
    instance (no leader election), their health and metrics on loopback."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]


def controller_manager_command(
    bin_dir: Path, kubeconfig: str, ports: dict[str, int], keys: pki.Pki, extra_flags: list[str]
) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        *_controller_flags(kubeconfig, ports["kcm"]),
        f"--service-account-private-key-file={keys.service_account_key}",
        f"--root-ca-file={keys.ca_cert}",
        "--use-service-account-credentials=false",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        # quicker reaction to fake nodes and deletions than a production cluster wants
        "--node-monitor-grace-period=60s",
        "--concurrent-gc-syncs=5",
        *extra_flags,
    ]


def scheduler_command(bin_dir: Path, kubeconfig: str, ports: dict[str, int]) -> list[str]:
    return [str(bin_dir / "kube-scheduler"), *_controller_flags(kubeconfig, ports["scheduler"])]


def kwok_command(bin_dir: Path, kubeconfig: str, ports: dict[str, int]) -> list[str]:
    return [
        str(bin_dir / "kwok"),
        f"--config={KWOK_STAGES}",
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        f"--cidr={FAKE_POD_RANGE}",
        "--node-ip=10.1.0.1",
    ]


def health_checks(ports: dict[str, int], api_server: str) -> dict[str, tuple[str, bool]]:
    """process name -> (URL of its health endpoint, over TLS); kwok has none."""
    return {
        "etcd": (f"{etcd_url(ports)}/health", False),
        "kube-apiserver": (f"{api_server}/readyz", True),
        "kube-controller-manager": (f"https://127.0.0.1:{ports['kcm']}/healthz", True),
        "kube-scheduler": (f"https://127.0.0.1:{ports['scheduler']}/healthz", True),
    }
