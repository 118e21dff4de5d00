"""The real node's changes to the host, recorded before they are made, and their undoing.

The node changes the host (it cannot live in a network namespace of its own while the API server listens on
loopback): iptables chains, a bridge, ``net.ipv4.ip_forward``, mounts, cgroups and a few fixed paths. So there
is one real node per machine, recorded in ``HOST_RECORD``; ``down`` undoes every change (``clean_host``), and
``up`` does the same first when a node of an interrupted run is left behind. What else outlives the processes
(another add-on's chains and ipsets, its binaries' processes) each add-on declares (``Leftovers``); the
cleanup takes their union and names no component. ``host_state`` is what a test compares before ``up`` and
after ``down``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from reward_testing.waiting import wait_until

from ..artifacts import cache_root
from ..plane.addon import Leftovers
from .configs import CONTAINERD, KUBELET
from .facts import BRIDGE, GATEWAY, POD_SUBNET, RUN_DIR

# One real node per machine: what the running one changed, so any process can undo it.
HOST_RECORD = Path("/run/reward-operator-testenv-node.json")
# Paths the kubelet, containerd and CNI use whatever their configured folders say.
FIXED_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd")
# What outlives the node's own processes: the chains the kubelet, kube-proxy and the bridge plugin create,
# those fixed paths, and the processes of its binaries (the runc shims outlive containerd).
NODE_LEFTOVERS = Leftovers(
    chain_prefixes=("KUBE-", "CNI-"),
    paths=FIXED_PATHS,
    binaries=("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "coredns"),
)
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


def log(message: str) -> None:
    print(f"[testenv node] {message}", flush=True, file=sys.stderr)


def missing_host_tools() -> list[str]:
    """The Debian packages whose tools are not on PATH (``make host-packages`` installs them)."""
    return sorted({package for tool, package in HOST_PACKAGES.items() if shutil.which(tool) is None})


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
    # what every add-on of the control plane leaves behind (Leftovers), for a cleanup from any process
    leftovers: dict = field(default_factory=dict)

    def all_leftovers(self) -> Leftovers:
        if not self.leftovers:  # a record of an older test bed
            return NODE_LEFTOVERS
        return Leftovers(**{key: tuple(value) for key, value in self.leftovers.items()})

    def save(self) -> None:
        HOST_RECORD.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls) -> HostRecord | None:
        try:
            return cls(**json.loads(HOST_RECORD.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None


def clear_interrupted_run(leftovers: Leftovers) -> None:
    """Undo what a real node of an interrupted run left on the host (its record, or its state without one);
    refuse while a live control plane still owns the machine's one node."""
    record = HostRecord.load()
    if record is not None:
        owner = Path(record.state_dir)
        if _starting(record) or ((owner / "state.json").exists() and _owner_alive(owner)):
            raise RuntimeError(
                f"a real node already runs for the control plane in {owner} (one per machine): "
                f"stop it with `TESTENV_DIR={owner} python -m testenv down`, or start this one with TESTENV_NODE=0"
            )
        log(f"a real node of an interrupted run is left behind ({owner}): cleaning the host first")
        clean_host(leftovers)
    elif _left_behind(leftovers):
        log("host state of an earlier real node found without its record: cleaning it first")
        clean_host(leftovers)


def prepare_host(state_dir: Path, node_dir: Path, leftovers: Leftovers) -> None:
    """Record what is about to change, then make the changes the node needs before it starts; ``leftovers``: what
    every add-on leaves behind, which a cleanup removes."""
    if missing := missing_host_tools():
        raise RuntimeError(
            f"the real node needs Debian's {', '.join(missing)}: run `make host-packages` "
            "(or `apt-get install -y " + " ".join(missing) + "`), or TESTENV_NODE=0 to leave the node out"
        )
    if os.geteuid() != 0:
        raise RuntimeError(
            "the real node changes the host (iptables, a bridge, mounts): run as root, or TESTENV_NODE=0"
        )
    clear_interrupted_run(leftovers)
    HostRecord(
        state_dir=str(state_dir),
        node_dir=str(node_dir),
        sysctls=_sysctls(),
        fixed_paths_before=[path for path in leftovers.paths if os.path.lexists(path)],
        starter=[os.getpid(), _start_time(os.getpid())],
        netfilter_tables_before=_netfilter_tables(),
        leftovers={key: list(value) for key, value in asdict(leftovers).items()},
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


def _left_behind(leftovers: Leftovers) -> bool:
    return (
        Path(f"/sys/class/net/{BRIDGE}").exists()
        or bool(_our_chains("iptables", leftovers.chain_prefixes))
        or bool(_our_ipsets(leftovers.ipset_prefixes))
        or bool(_node_processes(leftovers.binaries))
    )


def clean_host(leftovers: Leftovers = NODE_LEFTOVERS) -> None:
    """Undo everything a real node did to the host, and remove what the add-ons beside it left (``leftovers``,
    and those its record names); safe to run twice, and with nothing to undo."""
    record = HostRecord.load()
    if record is not None:
        leftovers = leftovers | record.all_leftovers()
    _kill_node_processes(leftovers.binaries)
    node_dir = Path(record.node_dir) if record else None
    _unmount_under([p for p in (node_dir, Path("/run/netns"), Path("/var/lib/kubelet")) if p])
    for netns in Path("/run/netns").glob("cni-*") if Path("/run/netns").is_dir() else []:
        with contextlib.suppress(OSError):
            netns.unlink()
    _remove_cgroups()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
    for tool in ("iptables", "ip6tables"):
        _remove_chains(tool, leftovers.chain_prefixes)
    _remove_ipsets(leftovers.ipset_prefixes)
    if record is not None and record.netfilter_tables_before is not None:
        _remove_new_empty_tables(record.netfilter_tables_before)
    if record is not None:
        for name, value in record.sysctls.items():
            with contextlib.suppress(OSError):
                if (Path("/proc/sys") / name).read_text().strip() != value:
                    (Path("/proc/sys") / name).write_text(value)
        for path in leftovers.paths:
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


def _node_processes(names: tuple[str, ...]) -> list[int]:
    """Processes of our binaries called ``names`` and of the node's containers."""
    found = set()
    # ours: built into the test bed's cache (wherever REWARD_OPERATOR_CACHE puts it), not a host's own
    binaries = str(cache_root().resolve() / "testenv") + os.sep
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            exe = os.path.realpath(proc / "exe")
            if Path(exe).name in names and exe.startswith(binaries):
                found.add(int(proc.name))
    for cgroup in _kubepods_cgroups():
        for procs in cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                found.update(int(pid) for pid in procs.read_text().split())
    found.discard(os.getpid())
    return sorted(found)


def _kill_node_processes(names: tuple[str, ...]) -> None:
    def none_left() -> bool:
        pids = _node_processes(names)
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


def _our_chains(tool: str, prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    """{table: [chain, ...]} of the chains named with ``prefixes`` that ``tool`` (iptables or ip6tables) holds."""
    if shutil.which(f"{tool}-save") is None:
        return {}
    dump = subprocess.run([f"{tool}-save"], capture_output=True, text=True).stdout
    chains: dict[str, list[str]] = {}
    table = ""
    for line in dump.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and prefixes and line[1:].startswith(prefixes):
            chains.setdefault(table, []).append(line[1:].split()[0])
    return chains


def _remove_chains(tool: str, prefixes: tuple[str, ...]) -> None:
    """Delete every rule that jumps to one of our chains, then those chains themselves."""
    for table, chains in _our_chains(tool, prefixes).items():
        rules = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
        for rule in rules:
            parts = shlex.split(rule)  # comments are quoted
            if parts[:1] == ["-A"] and parts[1] not in chains and any(c in parts for c in chains):
                subprocess.run([tool, "-t", table, "-D", *parts[1:]], capture_output=True)
        for chain in chains:
            subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
        for chain in chains:
            subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)


def _our_ipsets(prefixes: tuple[str, ...] = ("",)) -> list[str]:
    """The host's ipsets named with ``prefixes`` (all of them by default; none where Debian's ``ipset`` is not
    installed)."""
    if shutil.which("ipset") is None or not prefixes:
        return []
    listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split()
    return sorted(name for name in listed if name.startswith(prefixes))


def _remove_ipsets(prefixes: tuple[str, ...]) -> None:
    """Destroy our ipsets; after the chains, since the kernel keeps a set that a rule still uses."""
    for name in _our_ipsets(prefixes):
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


def host_state(leftovers: Leftovers) -> dict:
    """What a real node and the add-ons beside it (``leftovers``) may change on the host, for comparing before
    ``up`` and after ``down``: every ipset and every iptables rule, not only ours."""

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
        # buildah's store (testenv.images) mounts and unmounts on its own while images build
        "mounts": sorted(p for p in _mount_points() if not p.startswith(str(cache_root() / "testenv" / "images"))),
        "cgroups": sorted(str(p) for p in _kubepods_cgroups()),
        "netns": sorted(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else [],
        "fixed_paths": [path for path in leftovers.paths if os.path.lexists(path)],
        "node_processes": _node_processes(leftovers.binaries),
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
