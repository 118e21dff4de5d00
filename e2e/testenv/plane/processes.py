"""The control plane's processes as the host sees them: alive or not, and stopped by process group."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from reward_testing.waiting import wait_until


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this very process counts as gone
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        pass
    # and so does anyone else's zombie: the machine's init may reap orphans only every few seconds
    # (here about 2 s), which made each stop of a `down` from another process wait that long
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop(pid: int, grace: float) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``grace``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_until(f"process {pid} to exit", lambda: not alive(pid), timeout=grace, interval=0.1)
        return
    except AssertionError:
        pass  # still there after the grace: killed
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(f"process {pid} to exit after SIGKILL", lambda: not alive(pid), timeout=60, interval=0.05)
