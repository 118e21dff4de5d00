"""A pod of the real node seen from the host: a container's process, the host's end of the pod's link, and
the order in which a deletion takes them away; and vLLM's engine stopped, to keep a request in a pod.

A request in flight learns that its peer's pod vanished only from what the peer's kernel sends: a reset or a
FIN when the process dies while the pod's network is still there, nothing at all when the network goes first
(or the link is cut, or the node is gone), and then only TCP keep-alive ends the wait. The kill tests print
which of the two a deletion was (``Teardown``) and cut a pod's link on purpose (``cut_link``), so that they
bound the wait either way. Root on the host, as the node itself.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")

# Run in vLLM's container: send a signal (STOP, CONT) to every process but the API server (PID 1) and this one.
# Stopped, the engine holds a request the API server took: a signal, not a sleep, keeps a request at vLLM.
SIGNAL_ENGINE = (
    "import os, signal, sys\n"
    "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    if pid not in (1, os.getpid()):\n"
    "        try: os.kill(pid, getattr(signal, 'SIG' + sys.argv[1]))\n"
    "        except ProcessLookupError: pass\n"
)


def signal_engine(cluster, namespace: str, pod: str, signal: str) -> None:
    """STOP or CONT vLLM's engine in ``pod`` (its API server goes on answering what needs no engine); CONT
    where the pod may be gone already is no error."""
    cluster.kubectl("exec", "-n", namespace, pod, "-c", "kserve-container", "--", "python3", "-c", SIGNAL_ENGINE,
                    signal, check=signal == "STOP")  # fmt: skip


def container_pid(pod: dict, container: str) -> int:
    """The host pid of ``container``'s first process in a running ``pod`` (from its cgroup: cgroupfs, v1)."""
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    container_id = status["containerID"].split("://", 1)[1]
    for procs in sorted(CGROUPS.glob(f"*/kubepods*/**/{container_id}/cgroup.procs")):
        pids = [int(pid) for pid in procs.read_text().split()]
        if pids:
            return min(pids)  # the container's init, started first
    raise RuntimeError(f"no process of container {container} ({container_id}) of pod {pod['metadata']['name']}")


def host_link(pid: int) -> str:
    """The host's end of the veth pair of the network namespace ``pid`` is in (the pod's ``eth0``)."""
    shown = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "eth0"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    peer_index = shown.split("@if", 1)[1].split(":", 1)[0]
    for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines():
        index, name = line.split(":")[:2]
        if index == peer_index:
            return name.strip().split("@", 1)[0]
    raise RuntimeError(f"no host link with index {peer_index} (the pod of pid {pid}): {shown}")


@contextmanager
def cut_link(link: str) -> Iterator[None]:
    """The pod's link down at the host's end: the pod and its processes live on, nothing reaches them and
    nothing of theirs gets out, as when their node drops off the network. Up again on leaving (where the
    pod is still there)."""
    subprocess.run(["ip", "link", "set", link, "down"], check=True)
    try:
        yield
    finally:
        if Path("/sys/class/net", link).exists():
            subprocess.run(["ip", "link", "set", link, "up"], check=False)


class Teardown:
    """When a pod's process and its link went, in seconds from ``start()``: which went first says whether
    its peers got a reset or a FIN (the process first) or nothing (the link first)."""

    def __init__(self, pid: int, link: str):
        self.pid, self.link = pid, link
        self.process_gone: float | None = None
        self.link_gone: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set() and (self.process_gone is None or self.link_gone is None):
            now = time.monotonic() - self._started
            if self.process_gone is None and not os.path.exists(f"/proc/{self.pid}"):
                self.process_gone = now
            if self.link_gone is None and not os.path.exists(f"/sys/class/net/{self.link}"):
                self.link_gone = now
            self._stop.wait(0.01)

    def __str__(self) -> str:
        def at(seconds: float | None) -> str:
            return "still there" if seconds is None else f"gone {seconds:.2f} s after"

        first = "the process first" if self.first_went_process() else "the link first or alone"
        return f"process {at(self.process_gone)}, link {at(self.link_gone)} ({first})"

    __repr__ = __str__  # in a failed assertion's message

    def first_went_process(self) -> bool:
        if self.process_gone is None:
            return False
        return self.link_gone is None or self.process_gone <= self.link_gone
