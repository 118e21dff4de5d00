"""Start and stop a real Kubernetes control plane as local processes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (and, when
asked for, KServe's manager: see ``kserve_manager``; KEDA's operator and metrics
API server: see ``keda``) run on free loopback ports
inside one state folder. ``up`` leaves them running and records them in
``state.json`` so that ``down`` (from another process, or the pytest fixture)
stops exactly those processes and removes the folder.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from reward_testing import pki
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

from . import build, images, kserve, kserve_manager
from . import keda as keda_setup
from . import localmodel as localmodel_setup  # `localmodel` is also a parameter name below
from . import node as node_setup  # `node` is also a parameter name below
from .helpers import condition

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
KWOK_STAGES = HERE / "kwok-stages.yaml"
FAKE_NODES = HERE / "fake-nodes.yaml"
OUR_CRDS = REPO_ROOT / "crds"

# Start order; ``down`` stops them in reverse.
COMPONENT_ORDER = (
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
    *node_setup.PROCESSES, node_setup.STORAGE,
    kserve_manager.NAME, localmodel_setup.NAME, keda_setup.OPERATOR, keda_setup.ADAPTER,
)  # fmt: skip


def needed_components(with_kserve: bool, with_keda: bool = False, with_node: bool = False) -> tuple[str, ...]:
    """The build components (see ``build.COMPONENTS``) whose binaries a control plane runs."""
    return (
        "kubernetes", "etcd", "kwok",
        *(("kserve",) if with_kserve else ()),
        *(("keda",) if with_keda else ()),
        *(("containerd", "cni", "coredns") if with_node else ()),
    )  # fmt: skip


def log(message: str) -> None:
    print(f"[testenv] {message}", file=sys.stderr, flush=True)


@dataclass
class State:
    """What ``up`` started, persisted so any process can inspect or stop it."""

    directory: str
    kubeconfig: str
    api_server: str
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> State:
        return cls(**json.loads((directory / "state.json").read_text()))

    def save(self) -> None:
        path = Path(self.directory) / "state.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def default_state_dir() -> Path:
    return Path(os.environ.get("TESTENV_DIR") or REPO_ROOT / ".testenv")


def fake_nodes() -> list[dict]:
    """The kwok nodes every control plane registers (fake-nodes.yaml)."""
    return [doc for doc in yaml.safe_load_all(FAKE_NODES.read_text()) if doc]


def _kubeconfig(server: str, keys: pki.Pki) -> dict:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {"server": server, "certificate-authority-data": b64(keys.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "testenv-admin",
                "user": {
                    "client-certificate-data": b64(keys.admin_cert),
                    "client-key-data": b64(keys.admin_key),
                },
            }
        ],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": "testenv-admin"}}],
        "current-context": "testenv",
    }


def run_kubectl(
    kubectl: Path, kubeconfig: str, args: tuple[str, ...], input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """kubectl against one kubeconfig; with ``check``, a failure raises with kubectl's own message."""
    result = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", *args], input=input, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _pid_alive(pid: int) -> bool:
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


class ControlPlane:
    """One control plane in one state folder."""

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory or default_state_dir()).resolve()
        self.bin = build.bin_dir()
        self.state: State | None = None
        self._ssl: ssl.SSLContext | None = None

    # ---- start -------------------------------------------------------------

    def up(
        self,
        timeout: float = 120,
        kserve: bool | None = None,
        keda: bool | None = None,
        localmodel: bool | None = None,
        node: bool | None = None,
    ) -> State:
        """Start everything and wait until it is ready; ``kserve`` (default: the
        TESTENV_KSERVE=1 environment variable) adds KServe's manager and webhooks,
        ``keda`` (default: TESTENV_KEDA=1) KEDA's operator and metrics API server,
        ``localmodel`` (default: TESTENV_LOCALMODEL=1; implies ``kserve``) KServe's LocalModel
        controller with localModel enabled, ``node`` (default: on unless TESTENV_NODE=0) the real node
        (kubelet, containerd, CNI, kube-proxy, CoreDNS: see ``node``), whose pods run for real."""
        with_localmodel = localmodel_setup.enabled_by_env() if localmodel is None else localmodel
        with_kserve = with_localmodel or (kserve_manager.enabled_by_env() if kserve is None else kserve)
        with_keda = keda_setup.enabled_by_env() if keda is None else keda
        with_node = node_setup.enabled_by_env() if node is None else node
        if (self.directory / "state.json").exists():
            raise RuntimeError(
                f"a control plane is already recorded in {self.directory}; "
                "run `python -m testenv down` first (or set TESTENV_DIR)"
            )
        components = needed_components(with_kserve, with_keda, with_node)
        missing = build.missing_binaries(components)
        if missing:
            log(f"binaries missing ({', '.join(missing)}): building them first")
            build.build(only=components)
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        # pods on the real node reach the API server at the host's address (the kubernetes Service's
        # endpoint), so its serving certificate names that address too
        node_address = node_setup.host_address() if with_node else None
        keys = pki.create(self.directory / "pki", extra_addresses=(node_address,) if node_address else ())
        ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        kubeconfig = self.directory / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, keys)))
        kubeconfig.chmod(0o600)
        self.state = State(str(self.directory), str(kubeconfig), server, ports)
        self.state.save()
        try:
            # aggregated API servers (KEDA's metrics API) need kube-apiserver's front-proxy identity
            front_proxy = keda_setup.front_proxy_flags(keys, self.directory / "pki") if with_keda else []
            self._start_api_server(keys, deadline=time.monotonic() + timeout, extra_flags=front_proxy,
                                   node_address=node_address)  # fmt: skip
            # CRDs before the controller-manager: its garbage collector finds new kinds
            # only on a discovery resync every 30 s, and until then leaves the children
            # of a deleted InferenceService or RewardModel in place; KEDA's before
            # KServe's manager, which watches ScaledObjects only if their CRD is there
            self._install_crds(with_keda)
            self._start_controllers(keys, deadline=time.monotonic() + timeout, with_keda=with_keda)
            if with_kserve:
                # the manager starts while the fake nodes register: neither waits on the other
                kserve_started = self._start_kserve(keys, with_localmodel)
            if with_keda:
                keda_started = self._start_keda(keys)
            self._add_fake_nodes(deadline=time.monotonic() + timeout)
            if node_address:
                self._start_node(node_address, deadline=time.monotonic() + timeout)
            if with_kserve:
                self._wait_kserve(keys, kserve_started, deadline=time.monotonic() + timeout)
            if with_localmodel:
                self._start_localmodel(keys, deadline=time.monotonic() + timeout)
            if with_keda:
                self._wait_keda(keda_started, deadline=time.monotonic() + timeout)
        except BaseException:
            log(f"start-up failed; logs are in {self.directory / 'logs'}")
            self._print_log_tails()
            self.down()
            raise
        log(f"control plane up in {time.monotonic() - started:.1f}s: {server}")
        return self.state

    @classmethod
    def attach(cls, directory: Path | None = None) -> ControlPlane:
        """The control plane already recorded in ``directory``."""
        plane = cls(directory)
        plane.state = State.load(plane.directory)
        return plane

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> int:
        """Start a further process (e.g. the operator) that ``down`` will stop too."""
        self._spawn(name, args, env)
        assert self.state is not None
        return self.state.pids[name]

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        assert self.state is not None
        logs = self.directory / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / f"{name}.log", "wb") as out:
            process = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                env=env,
                # own session: survives the CLI that started it, and a Ctrl-C in the
                # user's terminal does not tear the control plane down half-way
                start_new_session=True,
            )
        self.state.pids[name] = process.pid
        self.state.save()

    def _start_api_server(
        self, keys: pki.Pki, deadline: float, extra_flags: list[str] | None = None, node_address: str | None = None
    ) -> None:
        assert self.state is not None
        ports, b, d = self.state.ports, self.bin, self.directory
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        log("starting etcd")
        self._spawn(
            "etcd",
            [
                str(b / "etcd"),
                "--name=testenv",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=testenv={peer_url}",
                # a throwaway store: durability only costs start-up and test time
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait(f"{etcd_url}/health", deadline, "etcd", tls=False)

        log("starting kube-apiserver")
        self._spawn(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--secure-port={ports['apiserver']}",
                *self._api_server_address_flags(node_address),
                # a namespace can pin its pods to the real node and let them tolerate its taint
                # (node.namespace_for_real_node)
                "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
                f"--tls-cert-file={keys.serving_cert}",
                f"--tls-private-key-file={keys.serving_key}",
                f"--client-ca-file={keys.ca_cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={keys.service_account_pub}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/16",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                f"--cert-dir={d / 'pki'}",
                *(extra_flags or []),
            ],
        )
        self._wait(f"{self.state.api_server}/readyz", deadline, "kube-apiserver")

    @staticmethod
    def _api_server_address_flags(node_address: str | None) -> list[str]:
        if node_address is None:
            # no kubelet runs, so nothing else may claim the kubernetes Service endpoints
            return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
        return [
            # pods reach it through the kubernetes Service, whose endpoint is the advertised
            # address; the host's own clients keep using 127.0.0.1
            "--bind-address=0.0.0.0",
            f"--advertise-address={node_address}",
            # logs, exec and port-forward dial the node's address, not its host name (which
            # does not resolve here)
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def _start_node(self, address: str, deadline: float) -> None:
        """The real node: the host prepared (recorded for ``down``), containerd with the images built
        here imported, then CoreDNS, kube-proxy and the kubelet; returns once the Node is Ready."""
        assert self.state is not None
        started = time.monotonic()
        node_dir = self.directory / "node"
        log(f"starting the real node {node_setup.NAME} at {address} (kubelet, containerd, CNI, kube-proxy, CoreDNS)")
        node_setup.prepare_host(self.directory, node_dir)
        for name in node_setup.PORT_NAMES:
            self.state.ports[name] = free_port()
        commands = node_setup.write_configs(
            node_dir, self.bin, self.state.kubeconfig, address, self.state.ports, images.PAUSE_IMAGE
        )
        env = node_setup.process_environment(self.bin)
        self._spawn(node_setup.CONTAINERD, commands[node_setup.CONTAINERD], env=env)
        socket_path = node_setup.CONTAINERD_SOCKET

        def containerd_listening() -> bool:
            self._fail_if_exited(node_setup.CONTAINERD)
            return socket_path.is_socket()

        wait_until("containerd listening", containerd_listening, timeout=max(5.0, deadline - time.monotonic()))
        self.load_images(node_setup.IMAGES)
        for name in (node_setup.COREDNS, node_setup.KUBE_PROXY, node_setup.KUBELET):
            self._spawn(name, commands[name], env=env)
        for name, url in node_setup.health_urls(self.state.ports).items():
            self._wait(url, deadline, name, tls=False)
        # the models' storage server: KServe's storage initializer downloads from it, as it would
        # from a bucket or a model server of the user's (http(s):// model URIs)
        storage = node_setup.storage_dir(self.directory)
        storage.mkdir(parents=True, exist_ok=True)
        self.state.ports[node_setup.STORAGE] = free_port()
        self._spawn(node_setup.STORAGE, node_setup.storage_command(sys.executable, storage, address,
                                                                   self.state.ports[node_setup.STORAGE]))  # fmt: skip
        remaining = max(5, int(deadline - time.monotonic()))
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={remaining}s", f"node/{node_setup.NAME}")
        log(f"real node Ready {time.monotonic() - started:.1f}s after its start")

    def load_images(self, names: tuple[str, ...]) -> None:
        """Build (when not cached) and import into the real node's containerd the images ``names`` of
        ``images.IMAGES``: what a pod there runs, since no registry is reachable."""
        assert self.state is not None
        socket_path = node_setup.CONTAINERD_SOCKET
        if not (node_setup.owned_by(self.directory) and socket_path.is_socket()):
            raise RuntimeError(f"no real node runs in {self.directory} (TESTENV_NODE=0?)")
        started = time.monotonic()
        tars = images.node_images(names)
        images.import_images(self.bin / "ctr", str(socket_path), tars.values())
        log(f"images {', '.join(names)} on the real node in {time.monotonic() - started:.1f}s")

    def _start_controllers(self, keys: pki.Pki, deadline: float, with_keda: bool = False) -> None:
        assert self.state is not None
        ports, b, kubeconfig = self.state.ports, self.bin, self.state.kubeconfig
        log("starting kube-controller-manager, kube-scheduler and kwok")
        self._spawn(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kcm']}",
                f"--service-account-private-key-file={keys.service_account_key}",
                f"--root-ca-file={keys.ca_cert}",
                "--use-service-account-credentials=false",
                "--service-cluster-ip-range=10.0.0.0/16",
                # quicker reaction to fake nodes and deletions than a production cluster wants
                "--node-monitor-grace-period=60s",
                "--concurrent-gc-syncs=5",
                # HPAs (KEDA's 1..N) act within seconds instead of the default 15 s
                *(["--horizontal-pod-autoscaler-sync-period=2s"] if with_keda else []),
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(b / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
            ],
        )
        self._spawn(
            "kwok",
            [
                str(b / "kwok"),
                f"--config={KWOK_STAGES}",
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                "--cidr=10.244.0.1/16",
                "--node-ip=10.1.0.1",
            ],
        )
        self._wait(f"https://127.0.0.1:{ports['kcm']}/healthz", deadline, "kube-controller-manager")
        self._wait(f"https://127.0.0.1:{ports['scheduler']}/healthz", deadline, "kube-scheduler")

    def _start_kserve(self, keys: pki.Pki, with_localmodel: bool = False) -> float:
        """Namespace, ConfigMap and serving certificate, then KServe's manager (its CRDs are installed).

        Returns when the manager was started (time.monotonic()), for the progress lines."""
        assert self.state is not None
        log(f"starting KServe {kserve.KSERVE_VERSION} manager (controller and webhooks)")
        for name in kserve_manager.PORTS:
            self.state.ports[name] = free_port()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kserve_manager.NAMESPACE}}
        config = kserve_manager.inference_service_config()
        if with_localmodel:
            config = localmodel_setup.enable_in_config(config)
        self.kubectl(
            "apply", "--server-side", "--field-manager=testenv", "-f", "-",
            input=yaml.safe_dump_all([namespace, config]),
        )  # fmt: skip
        scratch = self.directory / "kserve-manager"
        kserve_manager.serving_certificate(keys, kserve_manager.cert_dir(scratch))
        self._spawn(
            kserve_manager.NAME,
            kserve_manager.manager_command(self.bin / kserve_manager.NAME, self.state.kubeconfig, self.state.ports),
            env=kserve_manager.manager_env(scratch),
        )
        return time.monotonic()

    def _wait_kserve(self, keys: pki.Pki, started: float, deadline: float) -> None:
        """Health probe, then KServe's webhooks registered and answering through the API server."""
        assert self.state is not None
        # healthz is the webhook server's own started-check: a TLS dial of its port
        health = f"http://127.0.0.1:{self.state.ports['kserve-health']}/healthz"
        self._wait(health, deadline, kserve_manager.NAME, tls=False)
        log(f"KServe manager healthy {time.monotonic() - started:.1f}s after its start; registering its webhooks")
        hooks = kserve_manager.webhook_configurations(self.state.ports["kserve-webhook"], keys.ca_cert.read_bytes())
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump_all(hooks))
        probe = json.dumps(kserve_manager.probe_inference_service())

        def defaulted() -> bool:
            self._fail_if_exited(kserve_manager.NAME)
            result = self.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=probe, check=False)
            return result.returncode == 0 and kserve_manager.defaulted_protocol(json.loads(result.stdout)) == "v2"

        wait_until(
            "KServe's defaulting webhook (a dry-run InferenceService given protocolVersion v2)",
            defaulted,
            timeout=max(5.0, deadline - time.monotonic()),
            interval=0.2,
        )
        log(f"KServe webhooks answering {time.monotonic() - started:.1f}s after the manager's start")

    def _start_localmodel(self, keys: pki.Pki, deadline: float) -> None:
        """KServe's LocalModel controller and its webhook, the job namespace and a node group (see
        ``localmodel``); after the manager, whose ConfigMap it reads at start."""
        assert self.state is not None
        started = time.monotonic()
        log(f"starting KServe {kserve.KSERVE_VERSION} LocalModel controller")
        for name in localmodel_setup.PORTS:
            self.state.ports[name] = free_port()
        scratch = self.directory / localmodel_setup.NAME
        kserve_manager.serving_certificate(keys, kserve_manager.cert_dir(scratch))
        self._spawn(
            localmodel_setup.NAME,
            localmodel_setup.controller_command(
                self.bin / localmodel_setup.NAME, self.state.kubeconfig, self.state.ports
            ),
            env=kserve_manager.manager_env(scratch),
        )
        self._wait(f"http://127.0.0.1:{self.state.ports['localmodel-health']}/healthz", deadline, localmodel_setup.NAME,
                   tls=False)  # fmt: skip
        hooks = localmodel_setup.webhook_configurations(
            self.state.ports["localmodel-webhook"], keys.ca_cert.read_bytes()
        )
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-",
                     input=yaml.safe_dump_all([*hooks, *localmodel_setup.objects()]))  # fmt: skip
        probe = json.dumps(localmodel_setup.probe_cache())

        def validated() -> bool:
            self._fail_if_exited(localmodel_setup.NAME)
            return self.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode == 0

        wait_until("KServe's LocalModelCache webhook (a dry-run cache admitted)", validated,
                   timeout=max(5.0, deadline - time.monotonic()), interval=0.2)  # fmt: skip
        log(f"LocalModel controller and webhook ready {time.monotonic() - started:.1f}s after its start")
        self._start_node_agents(deadline)

    def _start_node_agents(self, deadline: float) -> None:
        """KServe's LocalModel node agent on each GPU node, each with a disk of its own, and the
        stand-in for their download pods' container (see ``localmodel`` and ``node_downloads``)."""
        assert self.state is not None
        nodes = localmodel_setup.gpu_nodes(fake_nodes())
        disks = localmodel_setup.node_disks(self.directory, nodes)
        log(f"starting KServe's LocalModel node agents on {', '.join(nodes)} (a private /mnt each)")
        python_path = [str(HERE.parent), str(REPO_ROOT / "testing"), os.environ.get("PYTHONPATH", "")]
        self._spawn(
            localmodel_setup.DOWNLOADS,
            localmodel_setup.downloads_command(sys.executable, self.state.kubeconfig, self.directory / "nodes"),
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, python_path))),
        )
        for node, disk in disks.items():
            port = self.state.ports[f"{localmodel_setup.AGENT}-{node}"] = free_port()
            self._spawn(
                f"{localmodel_setup.AGENT}-{node}",
                localmodel_setup.agent_command(self.bin / localmodel_setup.AGENT, self.state.kubeconfig, disk, port),
                env=dict(os.environ, NODE_NAME=node),
            )
        for node in nodes:
            name = f"{localmodel_setup.AGENT}-{node}"
            self._wait(f"http://127.0.0.1:{self.state.ports[name]}/readyz", deadline, name, tls=False)

        def downloader_listening() -> bool:
            self._fail_if_exited(localmodel_setup.DOWNLOADS)
            return localmodel_setup.downloads_ready(self.directory / "nodes").exists()

        wait_until("the download stand-in watching the job namespace", downloader_listening,
                   timeout=max(5.0, deadline - time.monotonic()), interval=0.1)  # fmt: skip

    def _start_keda(self, keys: pki.Pki) -> float:
        """Namespace and certificates, then KEDA's operator and metrics API server (its CRDs are
        installed). Returns when they were started (time.monotonic()), for the progress lines."""
        assert self.state is not None
        log(f"starting KEDA {keda_setup.KEDA_VERSION} operator and metrics API server")
        for name in keda_setup.PORTS:
            self.state.ports[name] = free_port()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": keda_setup.NAMESPACE}}
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump(namespace))
        cert_dir = self.directory / "keda" / "certs"
        keda_setup.certificates(keys, cert_dir)
        env = keda_setup.environment(self.state.kubeconfig)
        ports, kubeconfig = self.state.ports, self.state.kubeconfig
        # the operator dials the scalers the ScaledObjects name, in-cluster names among them: it
        # resolves them through a hosts file of this control plane's (see keda.py)
        hosts = keda_setup.HostsFile.create(keda_setup.hosts_file(self.directory))
        self._spawn(
            keda_setup.OPERATOR,
            keda_setup.with_private_hosts(
                keda_setup.operator_command(self.bin / keda_setup.OPERATOR, kubeconfig, cert_dir, ports), hosts.path
            ),
            env=env,
        )
        self._spawn(
            keda_setup.ADAPTER,
            keda_setup.adapter_command(self.bin / keda_setup.ADAPTER, kubeconfig, cert_dir, ports),
            env=env,
        )
        return time.monotonic()

    def _wait_keda(self, started: float, deadline: float) -> None:
        """The operator's health probe, the adapter's, then the external metrics API served
        through kube-apiserver (the path the HPA controller takes)."""
        assert self.state is not None
        ports = self.state.ports
        self._wait(f"http://127.0.0.1:{ports['keda-health']}/readyz", deadline, keda_setup.OPERATOR, tls=False)
        log(f"KEDA operator healthy {time.monotonic() - started:.1f}s after its start")
        self._wait(f"https://127.0.0.1:{ports['keda-adapter']}/readyz", deadline, keda_setup.ADAPTER)
        log(f"KEDA metrics API server healthy {time.monotonic() - started:.1f}s after its start; registering it")
        ca_bundle = (self.directory / "pki" / "ca.crt").read_bytes()
        objects = keda_setup.api_service_objects(ports["keda-adapter"], ca_bundle)
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump_all(objects))

        def available() -> bool:
            self._fail_if_exited(keda_setup.ADAPTER)
            api_service = json.loads(self.kubectl("get", "apiservice", keda_setup.API_SERVICE, "-o", "json").stdout)
            return (condition(api_service, "Available") or {}).get("status") == "True"

        wait_until(
            f"APIService {keda_setup.API_SERVICE} Available (kube-apiserver reaches KEDA's metrics API server)",
            available,
            timeout=max(5.0, deadline - time.monotonic()),
            interval=0.2,
        )
        log(f"KEDA's external metrics API available {time.monotonic() - started:.1f}s after the start")

    # ---- readiness -----------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            context = ssl.create_default_context(cafile=str(self.directory / "pki" / "ca.crt"))
            context.load_cert_chain(self.directory / "pki" / "admin.crt", self.directory / "pki" / "admin.key")
            # kcm and scheduler serve self-signed certificates of their own
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            self._ssl = context
        return self._ssl

    def _wait(self, url: str, deadline: float, name: str, tls: bool = True) -> None:
        errors: list[str] = []

        def healthy() -> bool:
            self._fail_if_exited(name)
            try:
                with urllib.request.urlopen(url, timeout=2, context=self._ssl_context() if tls else None) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError) as error:
                errors.append(str(error))
                return False

        try:
            wait_until(f"{name} healthy", healthy, timeout=max(0.2, deadline - time.monotonic()), interval=0.2)
        except AssertionError:
            raise TimeoutError(f"{name} not healthy at {url}: {errors[-1] if errors else ''}") from None

    def _fail_if_exited(self, name: str) -> None:
        assert self.state is not None
        pid = self.state.pids.get(name)
        if pid and not _pid_alive(pid):
            raise RuntimeError(f"{name} exited during start-up; see {self.directory / 'logs' / (name + '.log')}")

    def _print_log_tails(self) -> None:
        for path in sorted((self.directory / "logs").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-15:]
            print(f"--- {path.name} ---\n" + "\n".join(tail), file=sys.stderr)

    # ---- cluster content ---------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        assert self.state is not None
        return run_kubectl(self.bin / "kubectl", self.state.kubeconfig, args, input=input, check=check)

    def _install_crds(self, with_keda: bool = False) -> None:
        crd_files = kserve.crd_files()
        log(f"installing {len(crd_files)} KServe {kserve.KSERVE_VERSION} CRDs (server-side apply)")
        args = ["apply", "--server-side", "--field-manager=testenv", "--force-conflicts"]
        for path in crd_files:
            args += ["-f", str(path)]
        ours = sorted(OUR_CRDS.glob("*.yaml")) if OUR_CRDS.is_dir() else []
        for path in ours:
            args += ["-f", str(path)]
        self.kubectl(*args)
        if with_keda:
            keda_crds = keda_setup.crds()
            log(f"installing {len(keda_crds)} KEDA {keda_setup.KEDA_VERSION} CRDs")
            self.kubectl(
                "apply", "--server-side", "--field-manager=testenv", "--force-conflicts", "-f", "-",
                input=yaml.safe_dump_all(keda_crds),
            )  # fmt: skip

        def established() -> bool:
            listed = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            return all((condition(crd, "Established") or {}).get("status") == "True" for crd in listed)

        wait_until("CRDs Established", established, timeout=60, interval=0.2)

    def _add_fake_nodes(self, deadline: float) -> None:
        log("registering fake GPU nodes (kwok)")
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", str(FAKE_NODES))
        names = [node["metadata"]["name"] for node in fake_nodes()]
        remaining = max(5, int(deadline - time.monotonic()))
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={remaining}s", *[f"node/{n}" for n in names])
        # The ServiceAccount admission plugin rejects pods until the controller
        # manager has made the namespace's default ServiceAccount.
        remaining = max(5, int(deadline - time.monotonic()))
        account = ["serviceaccount/default", "-n", "default"]
        made = self.kubectl("wait", "--for=create", f"--timeout={remaining}s", *account, check=False)
        if made.returncode != 0:
            raise TimeoutError("the default ServiceAccount never appeared: is kube-controller-manager running?")

    # ---- stop --------------------------------------------------------------

    def down(self, grace: float = 10) -> None:
        state_file = self.directory / "state.json"
        if self.state is None and state_file.exists():
            self.state = State.load(self.directory)
        if self.state is not None:
            # extras (an operator the demo started) first, then the control plane in reverse start order
            extras = [name for name in self.state.pids if name not in COMPONENT_ORDER]
            for name in [*extras, *reversed(COMPONENT_ORDER)]:
                pid = self.state.pids.get(name)
                if pid:
                    _stop(pid, grace)
        if node_setup.owned_by(self.directory):
            # the containers, shims, mounts, chains and the bridge outlive the node's processes
            node_setup.clean_host()
        if self.directory.exists():
            shutil.rmtree(self.directory, ignore_errors=True)
        self.state = None

    # ---- chaos -------------------------------------------------------------

    def restart(self, name: str, grace: float = 10, timeout: float = 60) -> int:
        """Stop component ``name`` and start it again with the same command line and environment;
        returns the new pid once the component answers its health check again.

        For chaos tests (an API server or etcd restarted under a running operator). The
        command line and environment are read back from /proc (Linux), so nothing about
        how ``up`` started the component has to be kept; its log goes on in the same file
        (KEDA's operator would come back without its private hosts file: ``keda.with_private_hosts``,
        and a LocalModel node agent without its mount namespace: ``localmodel.agent_command``).
        ``grace``: seconds between SIGTERM and SIGKILL (0 for an abrupt kill)."""
        assert self.state is not None
        old = self.state.pids[name]
        proc = Path("/proc") / str(old)
        args = [arg.decode() for arg in (proc / "cmdline").read_bytes().split(b"\0") if arg]
        env = {}
        for item in (proc / "environ").read_bytes().split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[key.decode()] = value.decode()
        log(f"restarting {name} (pid {old})")
        _stop(old, grace)
        with open(self.directory / "logs" / f"{name}.log", "ab") as out:
            process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.directory, env=env, start_new_session=True,
            )  # fmt: skip
        self.state.pids[name] = process.pid
        self.state.save()
        health = self._health_check(name)
        if health is not None:
            url, tls = health
            self._wait(url, time.monotonic() + timeout, name, tls=tls)
        return process.pid

    def _health_check(self, name: str) -> tuple[str, bool] | None:
        """(URL, over TLS) of a component's health endpoint; None for one without (kwok)."""
        assert self.state is not None
        ports = self.state.ports
        return {
            "etcd": (f"http://127.0.0.1:{ports['etcd']}/health", False),
            "kube-apiserver": (f"{self.state.api_server}/readyz", True),
            "kube-controller-manager": (f"https://127.0.0.1:{ports['kcm']}/healthz", True),
            "kube-scheduler": (f"https://127.0.0.1:{ports['scheduler']}/healthz", True),
            kserve_manager.NAME: (f"http://127.0.0.1:{ports.get('kserve-health')}/healthz", False),
            localmodel_setup.NAME: (f"http://127.0.0.1:{ports.get('localmodel-health')}/healthz", False),
            keda_setup.OPERATOR: (f"http://127.0.0.1:{ports.get('keda-health')}/readyz", False),
            keda_setup.ADAPTER: (f"https://127.0.0.1:{ports.get('keda-adapter')}/readyz", True),
            **{process: (url, False) for process, url in node_setup.health_urls(ports).items()},
        }.get(name)

    def status(self) -> dict[str, str]:
        if not (self.directory / "state.json").exists():
            return {}
        state = State.load(self.directory)
        return {name: ("running" if _pid_alive(pid) else "exited") for name, pid in state.pids.items()}


def _stop(pid: int, grace: float) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``grace``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_until(f"process {pid} to exit", lambda: not _pid_alive(pid), timeout=grace, interval=0.1)
        return
    except AssertionError:
        pass  # still there after the grace: killed
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(f"process {pid} to exit after SIGKILL", lambda: not _pid_alive(pid), timeout=60, interval=0.05)
