"""The host's processes of one program, told apart by the real node's container that runs them.

The real node is this host: a pod's processes are host processes too, in the kubelet's cgroups. A test
that runs the operator as a pod must know that no operator runs outside a container (the host process
the other suites start), and kill the one inside the pod's container as a crash would.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from reward_testing.waiting import wait_until

PROC = Path("/proc")
# A container's cgroup under the kubelet's: .../kubepods/<qos>/pod<uid>/<64 hex digits> (cgroupfs), or
# .../kubepods-<qos>-pod<uid>.slice/cri-containerd-<64 hex digits>.scope (systemd)
CONTAINER_CGROUP = re.compile(r"kubepods.*[/-]([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class HostProcess:
    pid: int
    argv: tuple[str, ...]
    container: str | None  # the real node's container that runs it, None for a host process of its own


def container_of(cgroup_text: str) -> str | None:
    """The container id in a ``/proc/<pid>/cgroup``, when a kubelet's container runs the process."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        if match := CONTAINER_CGROUP.search(path):
            return match.group(1)
    return None


def running(*words: str, proc: Path = PROC) -> list[HostProcess]:
    """The processes whose command line holds each of ``words`` as an argument or an argument's last path
    part (``reward-operator`` matches ``/opt/reward-operator/bin/reward-operator``), by pid."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # a process that ended while we looked
            argv = tuple(part for part in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0") if part)
            names = {*argv, *(Path(part).name for part in argv)}
            if argv and all(word in names for word in words):
                container = container_of((entry / "cgroup").read_text())
                found.append(HostProcess(int(entry.name), argv, container))
    return sorted(found, key=lambda process: process.pid)


def environment(pid: int, proc: Path = PROC) -> dict[str, str]:
    """A process's environment as it started (empty when it has ended or is not ours to read)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(entry.partition("=")[::2] for entry in raw.split("\0") if "=" in entry)


def container_id(status_id: str) -> str:
    """A pod status's ``containerID`` (``containerd://<id>``) without its runtime."""
    return status_id.partition("://")[2] or status_id


def freeze(pid: int) -> None:
    """SIGSTOP ``pid``: it stays, holds what it holds and does nothing, as a hung process or a lost node's."""
    os.kill(pid, signal.SIGSTOP)


def kill(pid: int, timeout: float = 10) -> None:
    """SIGKILL ``pid`` and wait until it has gone (the kernel reaps asynchronously)."""
    os.kill(pid, signal.SIGKILL)

    def gone() -> bool:
        try:
            state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")  # a zombie is dead: its parent, the shim, reaps it

    wait_until(f"process {pid} gone after SIGKILL", gone, timeout=timeout, interval=0.05)
