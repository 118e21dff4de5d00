"""Start and stop a real Kubernetes control plane as local processes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run on free
loopback ports inside one state folder, and beside them the add-ons asked for (see
``addon``): KServe's manager (``kserve_manager``), its LocalModel controller
(``localmodel``), KEDA (``keda``) and the real node (``node``). ``up`` leaves them
running and records them in ``state.json`` so that ``down`` (from another process, or
the pytest fixture) stops exactly those processes and removes the folder.
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
from .addon import AddOn, log
from .helpers import condition

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
KWOK_STAGES = HERE / "kwok-stages.yaml"
FAKE_NODES = HERE / "fake-nodes.yaml"
OUR_CRDS = REPO_ROOT / "crds"

# Every kind of add-on, in the order ``up`` starts and waits for them (those that start with the
# nodes aside); their processes follow the core's in COMPONENT_ORDER.
ADD_ON_KINDS: tuple[type[AddOn], ...] = (
    node_setup.RealNode, kserve_manager.KServeManager, localmodel_setup.LocalModel, keda_setup.Keda,
)  # fmt: skip
CORE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Start order; ``down`` stops them in reverse.
COMPONENT_ORDER = (*CORE, *(process for kind in ADD_ON_KINDS for process in kind.processes))


def needed_components(add_ons: list[AddOn]) -> tuple[str, ...]:
    """The build components (see ``build.COMPONENTS``) whose binaries a control plane runs."""
    return ("kubernetes", "etcd", "kwok", *(component for add_on in add_ons for component in add_on.build_components))


def add_ons(kserve: bool, keda: bool, localmodel: bool, node: bool) -> list[AddOn]:
    """The add-ons asked for, in the order of ADD_ON_KINDS (``localmodel`` implies ``kserve``)."""
    asked: list[AddOn] = []
    if node:
        asked.append(node_setup.RealNode(node_setup.host_address()))
    if kserve or localmodel:
        asked.append(kserve_manager.KServeManager(localmodel_setup.enable_in_config if localmodel else None))
    if localmodel:
        asked.append(localmodel_setup.LocalModel())
    if keda:
        asked.append(keda_setup.Keda())
    return asked


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


# kube-apiserver's address flags while no add-on serves it to pods: no kubelet runs, so nothing
# else may claim the kubernetes Service endpoints
LOOPBACK_ONLY = ("--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none")


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
        self.keys: pki.Pki | None = None  # made by ``up``
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
        asked = add_ons(with_kserve, with_keda, with_localmodel, with_node)
        components = needed_components(asked)
        missing = build.missing_binaries(components)
        if missing:
            log(f"binaries missing ({', '.join(missing)}): building them first")
            build.build(only=components)
        if with_node:
            # like the binaries, before any start-up deadline runs: a changed Dockerfile or operator
            # source rebuilds the operator image, minutes on a loaded machine
            images.node_images(node_setup.IMAGES)
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        addresses = tuple(address for add_on in asked for address in add_on.serving_addresses())
        self.keys = keys = pki.create(self.directory / "pki", extra_addresses=addresses)
        ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        kubeconfig = self.directory / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, keys)))
        kubeconfig.chmod(0o600)
        self.state = State(str(self.directory), str(kubeconfig), server, ports)
        self.state.save()
        try:
            # with no add-on serving it to pods, kube-apiserver stays on loopback
            api_flags = [
                *(() if addresses else LOOPBACK_ONLY),
                *(flag for add_on in asked for flag in add_on.api_server_flags(keys, self.directory / "pki")),
            ]
            self._start_api_server(keys, deadline=time.monotonic() + timeout, extra_flags=api_flags)
            # CRDs before the controller-manager: its garbage collector finds new kinds
            # only on a discovery resync every 30 s, and until then leaves the children
            # of a deleted InferenceService or RewardModel in place; KEDA's before
            # KServe's manager, which watches ScaledObjects only if their CRD is there
            self._install_crds(asked)
            kcm_flags = [flag for add_on in asked for flag in add_on.controller_manager_flags()]
            self._start_controllers(keys, deadline=time.monotonic() + timeout, extra_flags=kcm_flags)
            # these start while the fake nodes register: neither waits on the other
            early = [add_on for add_on in asked if add_on.starts_with_the_nodes]
            for add_on in early:
                add_on.start(self, deadline=time.monotonic() + timeout)
            self._add_fake_nodes(deadline=time.monotonic() + timeout)
            for add_on in asked:
                if add_on not in early:
                    add_on.start(self, deadline=time.monotonic() + timeout)
                add_on.wait(self, deadline=time.monotonic() + timeout)
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
        """Start a process recorded as ``name`` (a component, an add-on's, or a further one such as
        the operator) that ``down`` will stop too; its log is logs/<name>.log. Returns its pid."""
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
        return process.pid

    def _start_api_server(self, keys: pki.Pki, deadline: float, extra_flags: list[str]) -> None:
        assert self.state is not None
        ports, b, d = self.state.ports, self.bin, self.directory
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        log("starting etcd")
        self.spawn(
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
        self.wait_healthy(f"{etcd_url}/health", deadline, "etcd", tls=False)

        log("starting kube-apiserver")
        self.spawn(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--secure-port={ports['apiserver']}",
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
                *extra_flags,
            ],
        )
        self.wait_healthy(f"{self.state.api_server}/readyz", deadline, "kube-apiserver")

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

    def _start_controllers(self, keys: pki.Pki, deadline: float, extra_flags: list[str]) -> None:
        assert self.state is not None
        ports, b, kubeconfig = self.state.ports, self.bin, self.state.kubeconfig
        log("starting kube-controller-manager, kube-scheduler and kwok")
        self.spawn(
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
                *extra_flags,
            ],
        )
        self.spawn(
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
        self.spawn(
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
        self.wait_healthy(f"https://127.0.0.1:{ports['kcm']}/healthz", deadline, "kube-controller-manager")
        self.wait_healthy(f"https://127.0.0.1:{ports['scheduler']}/healthz", deadline, "kube-scheduler")

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

    def wait_healthy(self, url: str, deadline: float, name: str, tls: bool = True) -> None:
        errors: list[str] = []

        def healthy() -> bool:
            self.fail_if_exited(name)
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

    def fail_if_exited(self, name: str) -> None:
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

    def _install_crds(self, add_ons: list[AddOn]) -> None:
        crd_files = kserve.crd_files()
        log(f"installing {len(crd_files)} KServe {kserve.KSERVE_VERSION} CRDs (server-side apply)")
        args = ["apply", "--server-side", "--field-manager=testenv", "--force-conflicts"]
        for path in crd_files:
            args += ["-f", str(path)]
        ours = sorted(OUR_CRDS.glob("*.yaml")) if OUR_CRDS.is_dir() else []
        for path in ours:
            args += ["-f", str(path)]
        self.kubectl(*args)
        for add_on in add_ons:
            if crds := add_on.crds():
                log(f"installing {len(crds)} {add_on.name} CRDs")
                self.kubectl(
                    "apply", "--server-side", "--field-manager=testenv", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump_all(crds),
                )  # fmt: skip

        def established() -> bool:
            listed = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            return all((condition(crd, "Established") or {}).get("status") == "True" for crd in listed)

        wait_until("CRDs Established", established, timeout=60, interval=0.2)

    @staticmethod
    def fake_nodes() -> list[dict]:
        """The kwok nodes every control plane registers (fake-nodes.yaml)."""
        return [doc for doc in yaml.safe_load_all(FAKE_NODES.read_text()) if doc]

    def _add_fake_nodes(self, deadline: float) -> None:
        log("registering fake GPU nodes (kwok)")
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", str(FAKE_NODES))
        names = [node["metadata"]["name"] for node in self.fake_nodes()]
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
        for kind in ADD_ON_KINDS:
            kind.clean(self.directory)
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
            self.wait_healthy(url, time.monotonic() + timeout, name, tls=tls)
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
            **{process: check for kind in ADD_ON_KINDS for process, check in kind.health_checks(ports).items()},
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
