"""A real node beside kwok's fake ones: kubelet, containerd + runc, CNI, kube-proxy and CoreDNS.

kwok's nodes make pods Running without running anything; this node runs them. The kubelet and
kube-proxy are built from the control plane's own Kubernetes module, containerd, the CNI plugins
and CoreDNS from their Go modules (``build.COMPONENTS``); runc and iptables come from Debian's
packages. Each runs as one more recorded process of the control plane.

The node changes the host (it cannot live in a network namespace of its own while the API server
listens on loopback): iptables chains, a bridge, ``net.ipv4.ip_forward``, mounts, cgroups and a few
fixed paths. So there is one real node per machine, recorded in ``HOST_RECORD``; ``down`` undoes
every change (``clean_host``), and ``up`` does the same first when a node of an interrupted run is
left behind. ``host_state`` is what a test compares before ``up`` and after ``down``.

Real and fake nodes are kept apart by a taint: the real node carries ``TAINT`` and the label
``LABEL``. Nothing lands on it by accident. A namespace made for it (``namespace_for_real_node``)
carries the annotations of Kubernetes' PodNodeSelector and PodTolerationRestriction admission
plugins, so every pod created there (KServe's predictor and transformer alike) is pinned to the real
node and tolerates its taint, without a field of the RewardModel changed for the test bed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from reward_testing import pki
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

from . import addon, build, images

NAME = "real-node"  # the Node object's name
CONTAINERD = "containerd"
KUBELET = "kubelet"
KUBE_PROXY = "kube-proxy"
COREDNS = "coredns"
PROCESSES = (CONTAINERD, COREDNS, KUBE_PROXY, KUBELET)  # start order; down stops them in reverse
STORAGE = "model-storage"
# Images every real node gets at start (images.py): the sandbox, the operator and its gateway, and
# KServe's storage initializer. vLLM's (several GB) is loaded by the tests and the demo that serve.
IMAGES = ("pause", "operator", "storage-initializer")  # the HTTP server pods download models from

LABEL = ("testenv.rlhf.dev/node", "real")
TAINT = {"key": "testenv.rlhf.dev/real-node", "value": "true", "effect": "NoSchedule"}
# Pod addresses of the real node; kwok's fake pods use 10.244.0.0/16, Services 10.0.0.0/16.
POD_SUBNET = ipaddress.ip_network("10.89.0.0/16")
BRIDGE = "rwo-testenv0"
GATEWAY = str(next(POD_SUBNET.hosts()))  # the bridge's own address: CoreDNS listens there
CLUSTER_DOMAIN = "cluster.local"

# One real node per machine: what the running one changed, so any process can undo it.
HOST_RECORD = Path("/run/reward-operator-testenv-node.json")
# The node's sockets, removed on down. Not under the control plane's folder: a unix socket's path has
# at most 104 bytes, and a test's temporary folder is longer (one real node per machine: one folder).
RUN_DIR = Path("/run/reward-operator-testenv-node")
CONTAINERD_SOCKET = RUN_DIR / "containerd.sock"
# Chains the kubelet, kube-proxy, the bridge plugin and kube-router (network_policy.py) create; removed on down.
CHAIN_PREFIXES = ("KUBE-", "CNI-")
# kube-router's ipsets: each policy's sources and destinations (v2.1.0's kubeSourceIPSetPrefix and
# kubeDestinationIPSetPrefix), IPv6 ones with ipset's family prefix; removed on down, after the chains.
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "inet6:KUBE-SRC-", "inet6:KUBE-DST-")
# Paths the kubelet, containerd and CNI use whatever their configured folders say.
FIXED_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd")
# Kernel settings the node changes: forwarding for the bridge (ours, and the bridge plugin's), and
# the tunables the kubelet sets at start-up (its protectKernelDefaults would refuse to start instead).
SYSCTLS = (
    "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
    "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
)  # fmt: skip
# Debian's packages the node needs (runc: cgo and libseccomp to build, so apt is simpler).
HOST_PACKAGES = {"runc": "runc", "iptables": "iptables", "ip": "iproute2"}


def enabled_by_env() -> bool:
    """The real node runs unless TESTENV_NODE=0 (its host changes need root)."""
    return os.environ.get("TESTENV_NODE", "1") != "0"


def log(message: str) -> None:
    print(f"[testenv node] {message}", flush=True, file=sys.stderr)


def in_pod_subnet(address: str) -> bool:
    return ipaddress.ip_address(address) in POD_SUBNET


def missing_host_tools() -> list[str]:
    """The Debian packages whose tools are not on PATH (``make host-packages`` installs them)."""
    return sorted({package for tool, package in HOST_PACKAGES.items() if shutil.which(tool) is None})


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


@dataclass
class HostRecord:
    """What a running node changed on the host, written before the first change."""

    state_dir: str
    node_dir: str
    sysctls: dict[str, str]
    fixed_paths_before: list[str]
    # the process bringing the node up, and when it started (a pid alone may be reused): until the
    # kubelet and containerd are recorded in the plane's state, it is what says the node is not stale
    starter: list[int] = field(default_factory=list)
    # the host's netfilter tables before (`nft list tables`: "ip filter", ...), None where nft is missing: on
    # a machine where iptables never ran, kube-proxy's first rule creates its tables, and down deletes them
    netfilter_tables_before: list[str] | None = None

    def save(self) -> None:
        HOST_RECORD.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls) -> HostRecord | None:
        try:
            return cls(**json.loads(HOST_RECORD.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None


# ---- configuration files ----------------------------------------------------------------


def containerd_config(node_dir: Path, cni_bin: Path, pause_image: str) -> str:
    """containerd 2.x (config version 3) with its state under the node's folder."""
    runc = shutil.which("runc") or "runc"
    return f"""version = 3
root = "{node_dir / "containerd" / "root"}"
state = "{node_dir / "containerd" / "state"}"

[grpc]
  address = "{CONTAINERD_SOCKET}"

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


# ---- commands ---------------------------------------------------------------------------------


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


PORT_NAMES = (
    "kubelet",
    "kubelet-healthz",
    "kube-proxy-metrics",
    "kube-proxy-healthz",
    "coredns-health",
    "coredns-ready",
)


def storage_dir(state_dir: Path) -> Path:
    """What the model storage server serves: a file ``f`` there is ``storage_url(..., f)``."""
    return state_dir / "storage"


def storage_command(python: str, directory: Path, address: str, port: int) -> list[str]:
    # Python's own file server (model_storage.py: one path prefix answers an error on purpose): KServe's
    # storage initializer takes a .tar.gz it serves (application/gzip) and unpacks it into /mnt/models
    server = Path(__file__).with_name("model_storage.py")
    return [python, str(server), str(port), "--bind", address, "--directory", str(directory)]


def storage_url(address: str, port: int, filename: str) -> str:
    return f"http://{address}:{port}/{filename}"


def process_environment(bin_dir: Path) -> dict[str, str]:
    """containerd finds its shim on PATH; the kubelet and kube-proxy find iptables there."""
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return dict(os.environ, PATH=path)


# ---- host changes and their undoing -------------------------------------------------------


def prepare_host(state_dir: Path, node_dir: Path) -> None:
    """Record what is about to change, then make the changes the node needs before it starts."""
    if missing := missing_host_tools():
        raise RuntimeError(
            f"the real node needs Debian's {', '.join(missing)}: run `make host-packages` "
            "(or `apt-get install -y " + " ".join(missing) + "`), or TESTENV_NODE=0 to leave the node out"
        )
    if os.geteuid() != 0:
        raise RuntimeError(
            "the real node changes the host (iptables, a bridge, mounts): run as root, or TESTENV_NODE=0"
        )
    record = HostRecord.load()
    if record is not None:
        owner = Path(record.state_dir)
        if _starting(record) or ((owner / "state.json").exists() and _owner_alive(owner)):
            raise RuntimeError(
                f"a real node already runs for the control plane in {owner} (one per machine): "
                f"stop it with `TESTENV_DIR={owner} python -m testenv down`, or start this one with TESTENV_NODE=0"
            )
        log(f"a real node of an interrupted run is left behind ({owner}): cleaning the host first")
        clean_host()
    elif _leftovers():
        log("host state of an earlier real node found without its record: cleaning it first")
        clean_host()
    HostRecord(
        state_dir=str(state_dir),
        node_dir=str(node_dir),
        sysctls=_sysctls(),
        fixed_paths_before=[path for path in FIXED_PATHS if os.path.lexists(path)],
        starter=[os.getpid(), _start_time(os.getpid())],
        netfilter_tables_before=_netfilter_tables(),
    ).save()
    # pods reach the host, each other and Services through the bridge: the host must route
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    # traffic between two pods on the bridge passes iptables, so a reply to a pod that called a
    # ClusterIP is translated back (kube-proxy's rules need it; the kernel's default is on)
    bridged = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if bridged.exists():
        bridged.write_text("1")
    # the bridge exists before CoreDNS binds its address (the CNI plugin takes it as it finds it)
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "replace", f"{GATEWAY}/{POD_SUBNET.prefixlen}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")


def owned_by(state_dir: Path) -> bool:
    """Whether the host's real node (if any) belongs to the control plane in ``state_dir``."""
    record = HostRecord.load()
    return record is not None and Path(record.state_dir).resolve() == Path(state_dir).resolve()


def _start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot), -1 if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the command name may hold spaces


def _starting(record: HostRecord) -> bool:
    """Whether the process that began this node is still running: it may be importing images before the
    kubelet starts, and a second ``up`` that took its node for stale would tear it down under it."""
    if len(record.starter) != 2:
        return False
    pid, started = record.starter
    return pid != os.getpid() and _start_time(pid) == started


def _owner_alive(state_dir: Path) -> bool:
    try:
        pids = json.loads((state_dir / "state.json").read_text()).get("pids", {})
    except (OSError, ValueError):
        return False
    pid = pids.get(KUBELET) or pids.get(CONTAINERD)
    if not pid:
        return False
    with contextlib.suppress(OSError):
        return os.path.realpath(f"/proc/{pid}/exe").endswith(("/kubelet", "/containerd"))
    return False


def _leftovers() -> bool:
    return (
        Path(f"/sys/class/net/{BRIDGE}").exists()
        or bool(_our_chains("iptables"))
        or bool(_our_ipsets())
        or bool(_node_processes())
    )


def clean_host() -> None:
    """Undo everything a real node did to the host; safe to run twice, and with nothing to undo."""
    record = HostRecord.load()
    _kill_node_processes()
    node_dir = Path(record.node_dir) if record else None
    _unmount_under([p for p in (node_dir, Path("/run/netns"), Path("/var/lib/kubelet")) if p])
    for netns in Path("/run/netns").glob("cni-*") if Path("/run/netns").is_dir() else []:
        with contextlib.suppress(OSError):
            netns.unlink()
    _remove_cgroups()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
    for tool in ("iptables", "ip6tables"):
        _remove_chains(tool)
    _remove_ipsets()
    if record is not None and record.netfilter_tables_before is not None:
        _remove_new_empty_tables(record.netfilter_tables_before)
    if record is not None:
        for name, value in record.sysctls.items():
            with contextlib.suppress(OSError):
                if (Path("/proc/sys") / name).read_text().strip() != value:
                    (Path("/proc/sys") / name).write_text(value)
        for path in FIXED_PATHS:
            if path not in record.fixed_paths_before and os.path.lexists(path):
                shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        HOST_RECORD.unlink()


def _sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            values[name] = (Path("/proc/sys") / name).read_text().strip()
    return values


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


# kube-router: `make network-policy-real`'s firewall, which rewrites iptables while it runs
NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "coredns", "kube-router")


def _node_processes() -> list[int]:
    """Processes of the node's binaries (the runc shims outlive containerd) and of its containers."""
    found = set()
    # ours: built into the test bed's cache (wherever REWARD_OPERATOR_CACHE puts it), not a host's own
    binaries = str(build.cache_root().resolve() / "testenv") + os.sep
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            exe = os.path.realpath(proc / "exe")
            if Path(exe).name in NODE_BINARIES and exe.startswith(binaries):
                found.add(int(proc.name))
    for cgroup in _kubepods_cgroups():
        for procs in cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                found.update(int(pid) for pid in procs.read_text().split())
    found.discard(os.getpid())
    return sorted(found)


def _kill_node_processes() -> None:
    def none_left() -> bool:
        pids = _node_processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # the kernel reaps killed processes asynchronously: look again until none is left
        return not pids

    wait_until("the real node's processes gone after SIGKILL", none_left, timeout=5, interval=0.1)


def _kubepods_cgroups() -> list[Path]:
    """The kubelet's cgroups (``kubepods`` per controller) and containerd's (``k8s.io``)."""
    root = Path("/sys/fs/cgroup")
    found = []
    for controller in root.iterdir() if root.is_dir() else []:
        for name in ("kubepods", "k8s.io", "kubepods.slice"):
            if (controller / name).is_dir():
                found.append(controller / name)
    return found


def _remove_cgroups() -> None:
    for cgroup in _kubepods_cgroups():
        # deepest first: a cgroup folder goes only once it has no children
        for folder in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            cgroup.rmdir()


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # the fifth field is the mount point, with spaces escaped as \040
        points.append(line.split()[4].replace("\\040", " "))
    return points


def _unmount_under(roots: list[Path]) -> None:
    prefixes = [str(root.resolve()) for root in roots if root.exists()]
    if not prefixes:
        return
    for _ in range(5):
        mine = [p for p in _mount_points() if any(p == r or p.startswith(r + "/") for r in prefixes)]
        if not mine:
            return
        # deepest first; lazily, since a killed container may still hold one for a moment
        for point in sorted(set(mine), key=lambda p: -p.count("/")):
            subprocess.run(["umount", "-l", point], capture_output=True)


def _our_chains(tool: str) -> dict[str, list[str]]:
    """{table: [chain, ...]} of the KUBE-/CNI- chains ``tool`` (iptables or ip6tables) holds."""
    if shutil.which(f"{tool}-save") is None:
        return {}
    dump = subprocess.run([f"{tool}-save"], capture_output=True, text=True).stdout
    chains: dict[str, list[str]] = {}
    table = ""
    for line in dump.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES):
            chains.setdefault(table, []).append(line[1:].split()[0])
    return chains


def _remove_chains(tool: str) -> None:
    """Delete every rule that jumps to a KUBE-/CNI- chain, then those chains themselves."""
    for table, chains in _our_chains(tool).items():
        rules = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
        for rule in rules:
            parts = shlex.split(rule)  # comments are quoted
            if parts[:1] == ["-A"] and parts[1] not in chains and any(c in parts for c in chains):
                subprocess.run([tool, "-t", table, "-D", *parts[1:]], capture_output=True)
        for chain in chains:
            subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
        for chain in chains:
            subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)


def _our_ipsets() -> list[str]:
    """kube-router's ipsets on the host (none where Debian's ``ipset`` is not installed)."""
    if shutil.which("ipset") is None:
        return []
    listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split()
    return sorted(name for name in listed if name.startswith(IPSET_PREFIXES))


def _remove_ipsets() -> None:
    """Destroy kube-router's ipsets; after the chains, since the kernel keeps a set that a rule still uses."""
    for name in _our_ipsets():
        subprocess.run(["ipset", "destroy", name], capture_output=True)


def _netfilter_tables() -> list[str] | None:
    """The host's nftables tables as "family name" (iptables-nft keeps its tables there), None without nft."""
    if shutil.which("nft") is None:
        return None
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
    if listed.returncode != 0:
        return None
    lines = listed.stdout.splitlines()
    return sorted(line.removeprefix("table ").strip() for line in lines if line.startswith("table "))


def _remove_new_empty_tables(before: list[str]) -> None:
    """Delete the tables that were not there before ``up`` and hold no rule now (our chains are gone by then):
    iptables-nft creates a table, with its built-in chains, at the first rule and never deletes it. A table
    with someone else's rules in it stays."""
    for table in set(_netfilter_tables() or []) - set(before):
        family, name = table.split(" ", 1)
        listed = subprocess.run(["nft", "-j", "list", "table", family, name], capture_output=True, text=True)
        if listed.returncode != 0:
            continue
        with contextlib.suppress(ValueError):
            if not any("rule" in item for item in json.loads(listed.stdout).get("nftables", [])):
                subprocess.run(["nft", "delete", "table", family, name], capture_output=True)


def host_state() -> dict:
    """What a real node may change on the host, for comparing before ``up`` and after ``down``."""

    def rules(tool: str) -> list[str]:
        if shutil.which(f"{tool}-save") is None:
            return []
        dump = subprocess.run([f"{tool}-save"], capture_output=True, text=True).stdout
        # counters and comment lines change on their own
        return sorted(line.split(" [", 1)[0] for line in dump.splitlines() if line and not line.startswith("#"))

    return {
        "iptables": rules("iptables"),
        "ip6tables": rules("ip6tables"),
        "ipsets": _our_ipsets(),
        "links": sorted(os.listdir("/sys/class/net")),
        "sysctls": _sysctls(),
        # buildah's store (images.py) mounts and unmounts on its own while images build
        "mounts": sorted(
            p for p in _mount_points() if not p.startswith(str(build.cache_root() / "testenv" / "images"))
        ),
        "cgroups": sorted(str(p) for p in _kubepods_cgroups()),
        "netns": sorted(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else [],
        "fixed_paths": [path for path in FIXED_PATHS if os.path.lexists(path)],
        "node_processes": _node_processes(),
        "record": HOST_RECORD.exists() or RUN_DIR.exists(),
    }


def host_differences(before: dict, after: dict) -> dict:
    """What changed between two ``host_state`` readings (a list: what is gone and what is new); {} for none."""
    return {
        key: {"gone": sorted(set(before[key]) - set(after[key])), "new": sorted(set(after[key]) - set(before[key]))}
        if isinstance(before[key], list)
        else {"before": before[key], "after": after[key]}
        for key in before
        if before[key] != after[key]
    }


class RealNode(addon.AddOn):
    """The add-on: kube-apiserver reachable from pods at the host's ``address``; started after kwok's
    nodes, and ready once the Node is Ready (``start`` waits for all of it)."""

    name = f"real node {NAME}"
    processes = (*PROCESSES, STORAGE)
    build_components = ("containerd", "cni", "coredns")

    def __init__(self, address: str):
        self.address = address

    def serving_addresses(self) -> tuple[str, ...]:
        # pods on the real node reach the API server at the host's address (the kubernetes Service's
        # endpoint), so its serving certificate names that address too
        return (self.address,)

    def api_server_flags(self, keys: pki.Pki, pki_dir: Path) -> list[str]:
        return [
            # pods reach it through the kubernetes Service, whose endpoint is the advertised
            # address; the host's own clients keep using 127.0.0.1
            "--bind-address=0.0.0.0",
            f"--advertise-address={self.address}",
            # logs, exec and port-forward dial the node's address, not its host name (which
            # does not resolve here)
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def start(self, plane: addon.Plane, deadline: float) -> None:
        """The host prepared (recorded for ``down``), containerd with the images built here imported,
        then CoreDNS, kube-proxy and the kubelet, and the models' storage server; returns once the
        Node is Ready."""
        started = time.monotonic()
        node_dir = plane.directory / "node"
        addon.log(f"starting the real node {NAME} at {self.address} (kubelet, containerd, CNI, kube-proxy, CoreDNS)")
        prepare_host(plane.directory, node_dir)
        ports = plane.state.ports
        for name in PORT_NAMES:
            ports[name] = free_port()
        commands = write_configs(node_dir, plane.bin, plane.state.kubeconfig, self.address, ports, images.PAUSE_IMAGE)
        env = process_environment(plane.bin)
        plane.spawn(CONTAINERD, commands[CONTAINERD], env=env)

        def containerd_listening() -> bool:
            plane.fail_if_exited(CONTAINERD)
            return CONTAINERD_SOCKET.is_socket()

        addon.wait_by(deadline, "containerd listening", containerd_listening, interval=0.3)
        plane.load_images(IMAGES)
        for name in (COREDNS, KUBE_PROXY, KUBELET):
            plane.spawn(name, commands[name], env=env)
        for name, url in health_urls(ports).items():
            plane.wait_healthy(url, deadline, name, tls=False)
        # the models' storage server: KServe's storage initializer downloads from it, as it would
        # from a bucket or a model server of the user's (http(s):// model URIs)
        storage = storage_dir(plane.directory)
        storage.mkdir(parents=True, exist_ok=True)
        ports[STORAGE] = free_port()
        plane.spawn(STORAGE, storage_command(sys.executable, storage, self.address, ports[STORAGE]))
        remaining = max(5, int(deadline - time.monotonic()))
        plane.kubectl("wait", "--for=condition=Ready", f"--timeout={remaining}s", f"node/{NAME}")
        addon.log(f"real node Ready {time.monotonic() - started:.1f}s after its start")

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {process: (url, False) for process, url in health_urls(ports).items()}

    @staticmethod
    def clean(directory: Path) -> None:
        if owned_by(directory):
            # the containers, shims, mounts, chains and the bridge outlive the node's processes
            clean_host()
