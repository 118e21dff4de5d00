"""Start and stop a real Kubernetes control plane as local processes.

The core (``core``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok) runs on free
loopback ports inside one state folder, and beside it the add-ons asked for (``testenv.addons``). The
control plane owns its components and wires them, as controller-runtime's ``controlplane.ControlPlane``
does: it gives the core what each add-on asks of it (addresses, flags, CRDs), builds what they run, starts
them in their order and supervises their processes; none of them imports it. ``up`` leaves them running
and records them in ``state.json`` so that ``down`` (from another process, or the pytest fixture) stops
exactly those processes and removes the folder.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from reward_testing import pki
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

from .. import addons, builds, images
from ..addons import kserve
from ..helpers import condition
from ..node import RealNode
from . import core, processes
from .addon import AddOn, kubectl_wait, log, not_pulled
from .kubectl import kubeconfig, run_kubectl
from .state import REPO_ROOT, State, default_state_dir

OUR_CRDS = REPO_ROOT / "crds"
# Start order; ``down`` stops them in reverse.
COMPONENT_ORDER = (*core.PROCESSES, *(process for kind in addons.KINDS for process in kind.processes))


def needed_components(add_ons: list[AddOn]) -> tuple[str, ...]:
    """The build components (see ``builds.COMPONENTS``) whose binaries a control plane runs."""
    return ("kubernetes", "etcd", "kwok", *(component for add_on in add_ons for component in add_on.build_components))


def provide(components: tuple[str, ...], image_names: tuple[str, ...]) -> None:
    """Build what is missing of the binaries of ``components`` and the images ``image_names``: the Go builds
    (both cores) beside the images built from Debian and Dockerfiles (mostly downloads), which need none of
    them; then the images of one binary each (seconds), which need theirs. A failure is raised once both
    sides have ended (a thread cannot be stopped half-way; each side's own lock leaves nothing half-made)."""
    from_binaries = tuple(name for name in image_names if images.BY_NAME[name].binary)
    from_debian = tuple(name for name in image_names if name not in from_binaries)
    missing = builds.missing_binaries(components)
    if missing:
        log(f"binaries missing ({', '.join(missing)}): building them, the images beside them")
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="provide") as pool:
        sides = [pool.submit(images.node_images, from_debian)]
        if missing:
            sides.append(pool.submit(builds.build, only=components))
        for side in sides:
            side.result()
    images.node_images(from_binaries)


class ControlPlane:
    """One control plane in one state folder."""

    service_range = core.SERVICE_RANGE

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory or default_state_dir()).resolve()
        self.bin = builds.bin_dir()
        self.state: State | None = None
        self.keys: pki.Pki | None = None  # made by ``up``
        self.add_ons: list[AddOn] = []  # in their start order
        self._ssl: ssl.SSLContext | None = None

    def running(self, name: str) -> AddOn | None:
        """The add-on ``name`` of this control plane, None where it does not run."""
        return next((add_on for add_on in self.add_ons if add_on.name == name), None)

    # ---- start -------------------------------------------------------------

    def up(self, timeout: float = 120, also_images: tuple[str, ...] = (), **asked: bool | None) -> State:
        """Start everything and wait until it is ready. ``asked``: add-ons by name (``kube_router`` for
        kube-router), True or False; None, or not named: as its TESTENV_<NAME> variable says, else its default
        (``testenv.addons``): ``kserve`` (KServe's manager and webhooks: on), ``node`` (the real node: kubelet,
        containerd, CNI, kube-proxy, CoreDNS, whose pods run for real: on), ``localmodel`` (KServe's LocalModel
        controller, localModel enabled; implies kserve), ``keda`` (KEDA's operator and external metrics API
        server), ``kube_router`` (NetworkPolicies enforced on the real node), ``prometheus``
        (prometheus-operator, its Prometheus on the real node), ``knative`` (Knative Serving with Kourier as pods
        on the real node: on with the node), ``kueue`` (Kueue's manager and webhooks). ``also_images``: images a
        caller will load onto the real node later (``load_images``), built now beside the rest."""
        if (self.directory / "state.json").exists():
            raise RuntimeError(
                f"a control plane is already recorded in {self.directory}; "
                "run `python -m testenv down` first (or set TESTENV_DIR)"
            )
        self.add_ons = addons.choose({name.replace("_", "-"): value for name, value in asked.items()})
        node_images = (*(name for add_on in self.add_ons for name in add_on.images), *also_images)
        # before any start-up deadline runs: a cold cache builds for many minutes, and a changed Dockerfile or
        # operator source rebuilds the operator's image
        provide(needed_components(self.add_ons), node_images if self.running("node") else ())
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        addresses = tuple(address for add_on in self.add_ons for address in add_on.serving_addresses())
        self.keys = keys = pki.create(self.directory / "pki", extra_addresses=addresses)
        ports = {name: free_port() for name in core.PORTS}
        server = f"https://127.0.0.1:{ports['apiserver']}"
        config = self.directory / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(server, keys)))
        config.chmod(0o600)
        self.state = State(str(self.directory), str(config), server, ports, add_ons=[a.name for a in self.add_ons])
        self.state.save()
        try:
            # with no add-on serving it to pods, kube-apiserver stays on loopback
            api_flags = [
                *(() if addresses else core.LOOPBACK_ONLY),
                *(flag for add_on in self.add_ons for flag in add_on.api_server_flags(keys, self.directory / "pki")),
            ]
            self._start_api_server(keys, deadline=time.monotonic() + timeout, extra_flags=api_flags)
            # CRDs before the controller-manager: its garbage collector finds new kinds
            # only on a discovery resync every 30 s, and until then leaves the children
            # of a deleted InferenceService or RewardModel in place; KEDA's before
            # KServe's manager, which watches ScaledObjects only if their CRD is there
            self._install_crds()
            kcm_flags = [flag for add_on in self.add_ons for flag in add_on.controller_manager_flags()]
            self._start_controllers(keys, deadline=time.monotonic() + timeout, extra_flags=kcm_flags)
            # these start while the fake nodes register: neither waits on the other
            early = [add_on for add_on in self.add_ons if add_on.starts_with_the_nodes]
            for add_on in early:
                add_on.start(self, deadline=time.monotonic() + timeout)
            self._add_fake_nodes(deadline=time.monotonic() + timeout)
            for add_on in self.add_ons:
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
        """The control plane already recorded in ``directory``, with its add-ons."""
        plane = cls(directory)
        plane.state = state = State.load(plane.directory)
        # a state.json of an older test bed names no add-ons: those whose processes it records
        names = state.add_ons or [kind.name for kind in addons.KINDS if set(kind.processes) & state.pids.keys()]
        plane.add_ons = [addons.BY_NAME[name]() for name in names]
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
        ports = self.state.ports
        log("starting etcd")
        self.spawn("etcd", core.etcd_command(self.bin, self.directory, ports))
        self.wait_healthy(f"{core.etcd_url(ports)}/health", deadline, "etcd", tls=False)
        log("starting kube-apiserver")
        self.spawn("kube-apiserver", core.api_server_command(self.bin, self.directory, ports, keys, extra_flags))
        self.wait_healthy(f"{self.state.api_server}/readyz", deadline, "kube-apiserver")

    def _start_controllers(self, keys: pki.Pki, deadline: float, extra_flags: list[str]) -> None:
        assert self.state is not None
        ports, kubeconfig_path = self.state.ports, self.state.kubeconfig
        log("starting kube-controller-manager, kube-scheduler and kwok")
        self.spawn(
            "kube-controller-manager",
            core.controller_manager_command(self.bin, kubeconfig_path, ports, keys, extra_flags),
        )
        self.spawn("kube-scheduler", core.scheduler_command(self.bin, kubeconfig_path, ports))
        self.spawn("kwok", core.kwok_command(self.bin, kubeconfig_path, ports))
        self.wait_healthy(f"https://127.0.0.1:{ports['kcm']}/healthz", deadline, "kube-controller-manager")
        self.wait_healthy(f"https://127.0.0.1:{ports['scheduler']}/healthz", deadline, "kube-scheduler")

    def load_images(self, names: tuple[str, ...]) -> None:
        """Import into the real node's containerd the images ``names`` of ``images.IMAGES`` (built when not
        cached): what a pod there runs, since no registry is reachable. The node's add-on does it."""
        node = self.running("node")
        if not isinstance(node, RealNode):
            raise RuntimeError(f"no real node runs in {self.directory} (TESTENV_NODE=0?)")
        # an image the node pulls from the test bed's registry is never imported: a pull proves what an import hides
        node.load_images(self, not_pulled(self.add_ons, names))

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
        if pid and not processes.alive(pid):
            raise RuntimeError(f"{name} exited during start-up; see {self.directory / 'logs' / (name + '.log')}")

    def _print_log_tails(self) -> None:
        for path in sorted((self.directory / "logs").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-15:]
            print(f"--- {path.name} ---\n" + "\n".join(tail), file=sys.stderr)

    # ---- cluster content ---------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        assert self.state is not None
        return run_kubectl(self.bin / "kubectl", self.state.kubeconfig, args, input=input, check=check)

    def _install_crds(self) -> None:
        crd_files = kserve.crd_files()
        log(f"installing {len(crd_files)} KServe {kserve.KSERVE_VERSION} CRDs (server-side apply)")
        apply = ("apply", "--server-side", "--field-manager=testenv", "--force-conflicts")
        ours = sorted(OUR_CRDS.glob("*.yaml")) if OUR_CRDS.is_dir() else []
        self.kubectl(*apply, *(arg for path in [*crd_files, *ours] for arg in ("-f", str(path))))
        for add_on in self.add_ons:
            if crds := add_on.crds():
                log(f"installing {len(crds)} {add_on.title} CRDs")
                documents = [crd for crd in crds if isinstance(crd, dict)]
                files = [crd for crd in crds if isinstance(crd, Path)]
                if documents:
                    self.kubectl(*apply, "-f", "-", input=yaml.safe_dump_all(documents))
                if files:
                    self.kubectl(*apply, *(arg for path in files for arg in ("-f", str(path))))

        def established() -> bool:
            listed = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            return all((condition(crd, "Established") or {}).get("status") == "True" for crd in listed)

        wait_until("CRDs Established", established, timeout=60, interval=0.2)

    @staticmethod
    def fake_nodes() -> list[dict]:
        """The kwok nodes every control plane registers (fake-nodes.yaml)."""
        return [doc for doc in yaml.safe_load_all(core.FAKE_NODES.read_text()) if doc]

    def _add_fake_nodes(self, deadline: float) -> None:
        log("registering fake GPU nodes (kwok)")
        self.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", str(core.FAKE_NODES))
        names = [node["metadata"]["name"] for node in self.fake_nodes()]
        ready = kubectl_wait(self, deadline, "condition=Ready", *[f"node/{n}" for n in names], check=False)
        if ready.returncode != 0:
            # kwok marks them Ready and has no health endpoint: its exit is the likeliest cause, so name it
            self.fail_if_exited("kwok")
            raise TimeoutError(f"the kwok nodes never became Ready: {ready.stderr.strip()}")
        # The ServiceAccount admission plugin rejects pods until the controller
        # manager has made the namespace's default ServiceAccount.
        made = kubectl_wait(self, deadline, "create", "serviceaccount/default", "-n", "default", check=False)
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
                    processes.stop(pid, grace)
        for kind in addons.KINDS:
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
        processes.stop(old, grace)
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
            **core.health_checks(ports, self.state.api_server),
            **{process: check for kind in addons.KINDS for process, check in kind.health_checks(ports).items()},
        }.get(name)

    def status(self) -> dict[str, str]:
        if not (self.directory / "state.json").exists():
            return {}
        state = State.load(self.directory)
        return {name: ("running" if processes.alive(pid) else "exited") for name, pid in state.pids.items()}
