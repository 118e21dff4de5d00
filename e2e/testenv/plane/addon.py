"""What an add-on of the test bed's control plane is, and what of the control plane it may use.

An add-on (KServe's manager, its LocalModel controller, KEDA, the real node, kube-router, Prometheus's
operator) is one more set of processes beside etcd, kube-apiserver, the controllers and kwok. Each one lives
in a module of its own (``testenv.addons``, ``testenv.node``) and says there what it adds to the core
(certificate addresses, API server and controller-manager flags, CRDs, a change to KServe's ConfigMap,
images for the real node), what it needs (``requires``, ``after``), how it starts, how the control plane
knows it is ready, and what it leaves on the host once its processes are gone (``leftovers``).

The control plane (``plane.controlplane``) owns the add-ons and wires them: it picks them, orders them,
supervises their processes, restarts one for a chaos test, and stops them; an add-on sees it only through
``Plane`` below and never imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol

from reward_testing import pki
from reward_testing.waiting import wait_until

from .state import State


def log(message: str) -> None:
    print(f"[testenv] {message}", file=sys.stderr, flush=True)


def left_before(deadline: float) -> float:
    """What is left before ``deadline``, 5 s at least: a late step still gets a try."""
    return max(5.0, deadline - time.monotonic())


def wait_by(deadline: float, what: str, predicate: Callable[[], Any], interval: float = 0.2) -> Any:
    """``wait_until`` with what is left before ``deadline``."""
    return wait_until(what, predicate, timeout=left_before(deadline), interval=interval)


def kubectl_wait(plane: Plane, deadline: float, condition: str, *objects: str, check: bool = True):
    """``kubectl wait --for=<condition>`` on ``objects`` (names and flags) with what is left before ``deadline``."""
    timeout = f"--timeout={int(left_before(deadline))}s"
    return plane.kubectl("wait", f"--for={condition}", timeout, *objects, check=check)


@dataclass(frozen=True)
class Leftovers:
    """What an add-on's processes leave on the host after they are gone, for the real node's cleanup to remove
    (``down``, and ``up`` after an interrupted run). The node's own are among them; the cleanup reads the union
    of every add-on's and never names another component."""

    chain_prefixes: tuple[str, ...] = ()  # iptables chains (IPv4 and IPv6), deleted with the rules that jump there
    ipset_prefixes: tuple[str, ...] = ()  # ipsets, destroyed after the chains (a set in use cannot go)
    paths: tuple[str, ...] = ()  # fixed host paths, removed unless they were there before the node started
    binaries: tuple[str, ...] = ()  # our executables (in the test bed's cache) whose processes may outlive a run

    def __or__(self, other: Leftovers) -> Leftovers:
        return Leftovers(
            **{f.name: tuple(dict.fromkeys(getattr(self, f.name) + getattr(other, f.name))) for f in fields(self)}
        )


class Plane(Protocol):
    """The control plane as an add-on sees it while it starts."""

    directory: Path  # the state folder: an add-on keeps its files under it
    bin: Path  # the cached binaries
    state: State  # ports and pids: an add-on records its own ports here
    keys: pki.Pki  # the control plane's CA, serving and admin certificates
    add_ons: list[AddOn]  # the add-ons of this control plane, in their start order
    service_range: str  # the Services' ClusterIP range

    def running(self, name: str) -> AddOn | None: ...

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> int: ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess: ...

    def wait_healthy(self, url: str, deadline: float, name: str, tls: bool = True) -> None: ...

    def fail_if_exited(self, name: str) -> None: ...

    def fake_nodes(self) -> list[dict]: ...

    def load_images(self, names: tuple[str, ...]) -> None: ...


class AddOn:
    """One add-on. What it adds to the core is empty unless it says otherwise.

    Whether it runs: asked by name at ``up`` (``ControlPlane.up(keda=True)``, ``python -m testenv up --keda``),
    else its environment variable (``TESTENV_<NAME>``, 1 or 0), else ``default``, or on wherever one of
    ``comes_with`` runs. What it ``requires`` runs too, and starts before it; ``after`` only orders it after
    those that run.

    ``up`` calls, in this order: ``serving_addresses``, ``api_server_flags``, ``crds``,
    ``controller_manager_flags``; then ``start`` of each add-on that ``starts_with_the_nodes`` (before
    kwok's nodes register); then, add-on by add-on in the control plane's order, ``start`` (the others) and
    ``wait``. ``deadline`` is a time.monotonic() the add-on must be ready by. KServe's manager reads its
    ConfigMap through every add-on's ``kserve_config`` first; the real node imports every add-on's
    ``images`` before its kubelet starts.
    """

    name: ClassVar[str]  # its name at `up` and in TESTENV_<NAME>: "keda", "kube-router"
    title: ClassVar[str]  # for progress lines
    default: ClassVar[bool] = False  # runs unless asked not to
    comes_with: ClassVar[tuple[str, ...]] = ()  # runs by default wherever one of these runs
    requires: ClassVar[tuple[str, ...]] = ()  # add-ons that must run too, started before it
    after: ClassVar[tuple[str, ...]] = ()  # add-ons started before it when they run
    # an object it makes and what its absence means: how a test finds it on a cluster it did not start
    probe: ClassVar[tuple[str, str]] = ("", "")
    processes: ClassVar[tuple[str, ...]] = ()  # fixed process names, in start order; down stops them in reverse
    build_components: ClassVar[tuple[str, ...]] = ()  # of builds.COMPONENTS, whose binaries it runs
    images: ClassVar[tuple[str, ...]] = ()  # of images.IMAGES, which its pods run on the real node
    # of images.IMAGES, which the real node pulls from this add-on instead of importing them (a registry)
    pulls_images: ClassVar[tuple[str, ...]] = ()
    starts_with_the_nodes: ClassVar[bool] = False  # started while kwok's nodes register, waited for later
    leftovers: ClassVar[Leftovers] = Leftovers()

    @classmethod
    def env(cls) -> str:
        return "TESTENV_" + cls.name.upper().replace("-", "_")

    @classmethod
    def asked_by_env(cls) -> bool | None:
        """TESTENV_<NAME>=1 or =0; None where it is unset."""
        value = os.environ.get(cls.env())
        return None if value is None else value != "0"

    def serving_addresses(self) -> tuple[str, ...]:
        """Addresses besides loopback at which its processes reach kube-apiserver (its certificate names them)."""
        return ()

    def api_server_flags(self, keys: pki.Pki, pki_dir: Path) -> list[str]:
        return []

    def controller_manager_flags(self) -> list[str]:
        return []

    def crds(self) -> list[dict | Path]:
        """CRDs installed with KServe's and ours, before any controller starts: documents, or files to apply."""
        return []

    def kserve_config(self, config: dict) -> dict:
        """KServe's ``inferenceservice-config`` ConfigMap as this add-on needs it, before KServe's manager reads it."""
        return config

    def start(self, plane: Plane, deadline: float) -> None:
        raise NotImplementedError

    def wait(self, plane: Plane, deadline: float) -> None:
        """Return once it is ready: by default once each of its health checks answers (``start`` may have made
        sure of that already, an add-on may wait for more)."""
        for process, (url, tls) in self.health_checks(plane.state.ports).items():
            plane.wait_healthy(url, deadline, process, tls=tls)

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        """process name -> (URL of its health endpoint, over TLS), for a restart to wait on."""
        return {}

    @staticmethod
    def clean(directory: Path) -> None:
        """Undo what outlives its processes, for ``down`` (from any process: no instance is at hand)."""


def not_pulled(add_ons: list[AddOn], names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` less the images some add-on of ``add_ons`` serves the real node to pull (``pulls_images``)."""
    pulled = {name for add_on in add_ons for name in add_on.pulls_images}
    return tuple(name for name in dict.fromkeys(names) if name not in pulled)
