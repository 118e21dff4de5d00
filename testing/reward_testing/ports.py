"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
