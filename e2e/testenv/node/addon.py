"""The real node as an add-on of the control plane: the host prepared, containerd with the images built here,
then CoreDNS, kube-proxy and the kubelet, and the models' storage server."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

from reward_testing import pki
from reward_testing.ports import free_port

from .. import images
from ..plane.addon import AddOn, Leftovers, Plane, kubectl_wait, log, not_pulled, wait_by
from .configs import (
    CONTAINERD,
    COREDNS,
    KUBE_PROXY,
    KUBELET,
    PORT_NAMES,
    PROCESSES,
    health_urls,
    process_environment,
    write_configs,
)
from .facts import CONTAINERD_SOCKET, NAME, host_address
from .host import NODE_LEFTOVERS, clean_host, owned_by, prepare_host
from .storage import PROCESS as STORAGE
from .storage import storage_command, storage_dir


class RealNode(AddOn):
    """The add-on: kube-apiserver reachable from pods at the host's ``address``; started after kwok's
    nodes, and ready once the Node is Ready (``start`` waits for all of it)."""

    name = "node"
    title = f"real node {NAME}"
    default = True  # TESTENV_NODE=0 leaves it out (its host changes need root)
    probe = (f"node/{NAME}", f"no real node ({NAME})")
    processes = (*PROCESSES, STORAGE)
    build_components = ("containerd", "cni", "coredns")
    # the sandbox, and the operator's image (its gateway, and the tests' client pods); the others' images
    # come with the add-ons whose pods run them, vLLM's (several GB) with the tests and the demo that serve
    images = ("pause", "operator")
    leftovers = NODE_LEFTOVERS

    def __init__(self, address: str | None = None):
        self._address = address

    @functools.cached_property
    def address(self) -> str:
        return self._address or host_address()

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

    def start(self, plane: Plane, deadline: float) -> None:
        """The host prepared (recorded for ``down``), containerd with the add-ons' images imported, then
        CoreDNS, kube-proxy and the kubelet, and the models' storage server; returns once the Node is Ready."""
        started = time.monotonic()
        node_dir = plane.directory / "node"
        log(f"starting the real node {NAME} at {self.address} (kubelet, containerd, CNI, kube-proxy, CoreDNS)")
        leftovers = Leftovers()
        for add_on in plane.add_ons:
            leftovers |= add_on.leftovers
        prepare_host(plane.directory, node_dir, leftovers)
        ports = plane.state.ports
        for name in PORT_NAMES:
            ports[name] = free_port()
        commands = write_configs(node_dir, plane.bin, plane.state.kubeconfig, self.address, ports, images.PAUSE_IMAGE)
        env = process_environment(plane.bin)
        plane.spawn(CONTAINERD, commands[CONTAINERD], env=env)

        def containerd_listening() -> bool:
            plane.fail_if_exited(CONTAINERD)
            return CONTAINERD_SOCKET.is_socket()

        wait_by(deadline, "containerd listening", containerd_listening, interval=0.3)
        wanted = tuple(name for add_on in plane.add_ons for name in add_on.images)
        self.load_images(plane, not_pulled(plane.add_ons, wanted))
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
        kubectl_wait(plane, deadline, "condition=Ready", f"node/{NAME}")
        log(f"real node Ready {time.monotonic() - started:.1f}s after its start")

    @staticmethod
    def load_images(plane: Plane, names: tuple[str, ...]) -> None:
        """Build (when not cached) and import into this node's containerd the images ``names`` of
        ``images.IMAGES``: what a pod here runs, since no registry is reachable."""
        if not (owned_by(plane.directory) and CONTAINERD_SOCKET.is_socket()):
            raise RuntimeError(f"no real node runs in {plane.directory} (TESTENV_NODE=0?)")
        started = time.monotonic()
        tars = images.node_images(names)
        images.import_images(plane.bin / "ctr", str(CONTAINERD_SOCKET), tars.values())
        log(f"images {', '.join(names)} on the real node in {time.monotonic() - started:.1f}s")

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {process: (url, False) for process, url in health_urls(ports).items()}

    @staticmethod
    def clean(directory: Path) -> None:
        if owned_by(directory):
            # the containers, shims, mounts, chains and the bridge outlive the node's processes; so do what
            # the add-ons beside it left, which its record names
            clean_host()
