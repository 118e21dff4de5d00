"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Ports handed out below the kernel's ephemeral range: a port the kernel picked for bind(0) lies in the range
# it also gives every outgoing connection, so between free_port() and the server's own bind a client's
# connection could take it (a control plane makes thousands while its next component starts; CI once lost
# kwok, which has no health check, to "address already in use"). Below the range only another listener can;
# and below Kubernetes' NodePort range (30000-32767), which a kube-proxy on this host may claim.
_LOWEST, _HIGHEST, _HANDED_OUT = 20000, 29999, set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    # the wildcard address conflicts with a listener on any address, the loopback one included
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port(attempts: int = 200) -> int:
    """A TCP port no process listens on, below the ephemeral range, never handed out before in this process."""
    highest = min(_HIGHEST, _ephemeral_start() - 1)
    if highest <= _LOWEST:  # an unusual kernel setting: the kernel's own choice is all there is
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for _ in range(attempts):
        port = random.randint(_LOWEST, highest)
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port in {_LOWEST}-{highest} after {attempts} tries")


def loopback_address_with(port: int, attempts: int = 50) -> str:
    """A loopback address of 127.0.0.0/8 other than 127.0.0.1 on which ``port`` is free.

    For a process that must serve a fixed port (one a manifest names) beside others doing the
    same: each gets an address of its own. Random, so two test runs on one machine rarely meet."""
    for _ in range(attempts):
        address = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
            return address
    raise RuntimeError(f"no loopback address with port {port} free in {attempts} tries (all interfaces taken?)")
