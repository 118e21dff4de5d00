"""What an add-on of the test bed's control plane is, and what of the control plane it may use.

An add-on (KServe's manager, its LocalModel controller, KEDA, the real node) is one more set of
processes beside etcd, kube-apiserver, the controllers and kwok. Each one lives in its own module
(``kserve_manager``, ``localmodel``, ``keda``, ``node``) and says there what it adds to the core
(certificate addresses, API server and controller-manager flags, CRDs), how it starts, and how the
control plane knows it is ready. ``ControlPlane`` only picks them, orders them and supervises them:
it records their processes, stops them, and restarts one for a chaos test.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from reward_testing import pki
from reward_testing.waiting import wait_until

if TYPE_CHECKING:
    from .controlplane import State


def log(message: str) -> None:
    print(f"[testenv] {message}", file=sys.stderr, flush=True)


def wait_by(deadline: float, what: str, predicate: Callable[[], Any], interval: float = 0.2) -> Any:
    """``wait_until`` with what is left before ``deadline`` (5 s at least: a late step still gets a try)."""
    return wait_until(what, predicate, timeout=max(5.0, deadline - time.monotonic()), interval=interval)


class Plane(Protocol):
    """The control plane as an add-on sees it while it starts."""

    directory: Path  # the state folder: an add-on keeps its files under it
    bin: Path  # the cached binaries
    state: State  # ports and pids: an add-on records its own ports here
    keys: pki.Pki  # the control plane's CA, serving and admin certificates

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> int: ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess: ...

    def wait_healthy(self, url: str, deadline: float, name: str, tls: bool = True) -> None: ...

    def fail_if_exited(self, name: str) -> None: ...

    def fake_nodes(self) -> list[dict]: ...

    def load_images(self, names: tuple[str, ...]) -> None: ...


class AddOn:
    """One add-on. What it adds to the core is empty unless it says otherwise.

    ``up`` calls, in this order: ``serving_addresses``, ``api_server_flags``, ``crds``,
    ``controller_manager_flags``; then ``start`` of each add-on that ``starts_with_the_nodes``
    (before kwok's nodes register); then, add-on by add-on in the control plane's order, ``start``
    (the others) and ``wait``. ``deadline`` is a time.monotonic() the add-on must be ready by.
    """

    name: ClassVar[str]  # for progress lines
    processes: ClassVar[tuple[str, ...]] = ()  # fixed process names, in start order; down stops them in reverse
    build_components: ClassVar[tuple[str, ...]] = ()  # of build.COMPONENTS, whose binaries it runs
    starts_with_the_nodes: ClassVar[bool] = False  # started while kwok's nodes register, waited for later

    def serving_addresses(self) -> tuple[str, ...]:
        """Addresses besides loopback at which its processes reach kube-apiserver (its certificate names them)."""
        return ()

    def api_server_flags(self, keys: pki.Pki, pki_dir: Path) -> list[str]:
        return []

    def controller_manager_flags(self) -> list[str]:
        return []

    def crds(self) -> list[dict]:
        """CRDs installed with KServe's and ours, before any controller starts."""
        return []

    def start(self, plane: Plane, deadline: float) -> None:
        raise NotImplementedError

    def wait(self, plane: Plane, deadline: float) -> None:
        """Return once it is ready; ``start`` may have made sure of that already."""

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        """process name -> (URL of its health endpoint, over TLS), for a restart to wait on."""
        return {}

    @staticmethod
    def clean(directory: Path) -> None:
        """Undo what outlives its processes, for ``down`` (from any process: no instance is at hand)."""
