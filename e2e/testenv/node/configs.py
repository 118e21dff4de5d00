"""The real node's processes and their configuration files: containerd (with runc and the CNI plugins),
CoreDNS, kube-proxy and the kubelet, each with its command line and health endpoint."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from .facts import BRIDGE, CLUSTER_DOMAIN, CONTAINERD_SOCKET, GATEWAY, LABEL, NAME, POD_SUBNET, RUN_DIR, TAINT

CONTAINERD = "containerd"
KUBELET = "kubelet"
KUBE_PROXY = "kube-proxy"
COREDNS = "coredns"
PROCESSES = (CONTAINERD, COREDNS, KUBE_PROXY, KUBELET)  # start order; down stops them in reverse
PORT_NAMES = (
    "kubelet",
    "kubelet-healthz",
    "kube-proxy-metrics",
    "kube-proxy-healthz",
    "coredns-health",
    "coredns-ready",
)


def registry_hosts_dir(node_dir: Path) -> Path:
    """containerd's registry hosts folder: ``<host:port>/hosts.toml`` per registry, read at each pull."""
    return node_dir / "containerd" / "certs.d"


def containerd_config(node_dir: Path, cni_bin: Path, pause_image: str) -> str:
    """containerd 2.x (config version 3) with its state under the node's folder."""
    runc = shutil.which("runc") or "runc"
    return f"""version = 3
root = "{node_dir / "containerd" / "root"}"
state = "{node_dir / "containerd" / "state"}"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins."io.containerd.cri.v1.images".registry]
  # a registry's hosts.toml (its CA): the test bed's registry writes one there when it runs (addons/registry.py)
  config_path = "{registry_hosts_dir(node_dir)}"

[plugins."io.containerd.cri.v1.images".pinned_images]
  # the pause image built here (images.py): no registry is reachable
  sandbox = "{pause_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # The VM withholds CAP_SYS_RESOURCE, so runc cannot set the pause container's oom_score_adj
  # below the shim's: without this every pod sticks in ContainerCreating with
  # "runc create failed: ... can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{cni_bin}"]
  conf_dir = "{node_dir / "cni" / "net.d"}"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  # Debian's runc; crun fails on this cgroup v1 hybrid host
  BinaryName = "{runc}"
  SystemdCgroup = false
"""


def cni_config(node_dir: Path) -> dict:
    """A bridge with the node's pod subnet: the host routes to every pod, pods reach the host and
    each other, and a pod reaches a Service that leads back to itself (hairpin)."""
    return {
        "cniVersion": "1.0.0",
        "name": "testenv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(POD_SUBNET), "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node_dir / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(node_dir: Path, address: str, port: int, healthz_port: int) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        # a cgroup v1 ("hybrid") host without systemd managing our cgroups
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # The test bed's API server has no kubelet client certificate, so logs, exec and
        # port-forward reach the kubelet anonymously: acceptable only inside this VM.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        # a shared developer machine: evict only when really short, never collect our images
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(node_dir / "pod-logs"),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [GATEWAY],
        "serializeImagePulls": False,
        "maxPods": 110,
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(kubeconfig: str, metrics_port: int, healthz_port: int) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "mode": "iptables",
        "hostnameOverride": NAME,
        "clusterCIDR": str(POD_SUBNET),
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        # NodePorts on 127.0.0.1 would need route_localnet, a host-wide sysctl
        "iptables": {"localhostNodePorts": False},
        # zero: kube-proxy leaves the host's conntrack sysctls as they are
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig: str, health_port: int, ready_port: int) -> str:
    """Cluster names only: pods of the test bed have no business resolving the outside world."""
    return f""".:53 {{
    bind {GATEWAY}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} testenv
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""


def write_configs(
    node_dir: Path, bin_dir: Path, kubeconfig: str, address: str, ports: dict[str, int], pause_image: str
) -> dict[str, list[str]]:
    """Write every configuration file into ``node_dir``; returns each process's command line."""
    for folder in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
        (node_dir / folder).mkdir(parents=True, exist_ok=True)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    (node_dir / "containerd" / "config.toml").write_text(containerd_config(node_dir, bin_dir, pause_image))
    (node_dir / "cni" / "net.d" / "10-testenv.conflist").write_text(json.dumps(cni_config(node_dir), indent=2))
    kubelet_file = node_dir / "kubelet-config.yaml"
    kubelet_file.write_text(
        yaml.safe_dump(kubelet_config(node_dir, address, ports["kubelet"], ports["kubelet-healthz"]))
    )
    proxy_file = node_dir / "kube-proxy-config.yaml"
    proxy_file.write_text(
        yaml.safe_dump(kube_proxy_config(kubeconfig, ports["kube-proxy-metrics"], ports["kube-proxy-healthz"]))
    )
    corefile_path = node_dir / "Corefile"
    corefile_path.write_text(corefile(kubeconfig, ports["coredns-health"], ports["coredns-ready"]))
    return {
        CONTAINERD: [str(bin_dir / "containerd"), f"--config={node_dir / 'containerd' / 'config.toml'}"],
        COREDNS: [str(bin_dir / "coredns"), "-conf", str(corefile_path)],
        KUBE_PROXY: [str(bin_dir / "kube-proxy"), f"--config={proxy_file}"],
        KUBELET: [
            str(bin_dir / "kubelet"),
            f"--config={kubelet_file}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node_dir / 'kubelet'}",
            f"--hostname-override={NAME}",
            f"--node-ip={address}",
            f"--node-labels={LABEL[0]}={LABEL[1]}",
            f"--register-with-taints={TAINT['key']}={TAINT['value']}:{TAINT['effect']}",
        ],
    }


def health_urls(ports: dict[str, int]) -> dict[str, str]:
    """Each node process's health endpoint (none before the node's ports were chosen)."""
    if "kubelet-healthz" not in ports:
        return {}
    return {
        COREDNS: f"http://127.0.0.1:{ports['coredns-ready']}/ready",
        KUBE_PROXY: f"http://127.0.0.1:{ports['kube-proxy-healthz']}/healthz",
        KUBELET: f"http://127.0.0.1:{ports['kubelet-healthz']}/healthz",
    }


def process_environment(bin_dir: Path) -> dict[str, str]:
    """containerd finds its shim on PATH; the kubelet and kube-proxy find iptables there."""
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return dict(os.environ, PATH=path)
