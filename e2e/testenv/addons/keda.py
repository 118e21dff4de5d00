"""KEDA's operator and external metrics API server on the local control plane.

Off by default (``TESTENV_KEDA=1``, ``python -m testenv up --keda`` or
``ControlPlane.up(keda=True)`` bring it): the build adds KEDA's module, and most
tests never create a ScaledObject. Both binaries come from the pinned KEDA module
(``go/keda``), and so do the CRDs, taken from ``config/crd`` with the patches of
KEDA's own kustomization applied, so the schemas are the ones KEDA ships.

What runs, and why:

- ``keda-operator``: the ScaledObject controller. It creates the HPA for 1..N and
  itself moves the target between 0 and 1 (``minReplicaCount: 0``) through the
  scale subresource when the triggers' activity changes; scale to zero and back
  needs nothing else.
- ``keda-adapter``: KEDA's external metrics API server, registered as the
  APIService ``v1beta1.external.metrics.k8s.io``. The HPA controller in
  kube-controller-manager reads the ScaledObject's metrics through it (the
  adapter asks the operator over mutual-TLS gRPC), so without it the HPA shows
  ``<unknown>`` and never goes past one replica. The APIService points at an
  ExternalName Service whose name is ``localhost``: the aggregator resolves an
  ExternalName to that host and the APIService's port, and verifies the
  adapter's certificate for ``<service>.<namespace>.svc``. kube-apiserver then
  needs its front-proxy flags (``front_proxy_flags``) so that the adapter knows
  who asks.
- KEDA's admission webhooks are left out: they only refuse ScaledObjects that
  clash (two on one target, a hand-made HPA on the same target), which
  scaling does not depend on.

In-cluster names: the operator renders each ScaledObject's ``scalerAddress`` as the
gateway's headless Service, ``<name>-gateway-scaler.<namespace>.svc.cluster.local:9090``,
and there is no cluster DNS out of cluster. So KEDA's operator runs in a mount
namespace of its own (``unshare``; with a user namespace where not root)
whose ``/etc/hosts`` is the control plane's ``keda/hosts``: a test that runs a
gateway on the host adds that Service's names there (``HostsFile.names``), pointing
at a loopback address of the gateway's own, where it serves the rendered port. Go's
resolver (KEDA is built without cgo) reads the file again when its mtime or size
changed, checked at most every 5 s; the file is rewritten in place, since the bind
mount holds the inode, not the path.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from reward_testing import pki, versions
from reward_testing.ports import free_port

from .. import builds
from ..helpers import condition
from ..plane.addon import AddOn, Plane, log, wait_by

KEDA_MODULE = "github.com/kedacore/keda/v2"
KEDA_VERSION = "v" + versions.KEDA  # the binaries' and the CRDs' (builds/go/keda/go.mod requires it)

NAMESPACE = "keda"  # KEDA_CLUSTER_OBJECT_NAMESPACE and POD_NAMESPACE
OPERATOR = "keda-operator"  # process names in the State, and binary names
ADAPTER = "keda-adapter"
PORTS = ("keda-metrics", "keda-health", "keda-grpc", "keda-adapter", "keda-adapter-metrics")

# The APIService and the Service it names, as KEDA's own manifests call them.
API_SERVICE = "v1beta1.external.metrics.k8s.io"
ADAPTER_SERVICE = "keda-metrics-apiserver"
FRONT_PROXY_CLIENT = "front-proxy-client"  # the CN kube-apiserver presents to aggregated API servers


HOSTS_FILE = "hosts"  # in the control plane's ``keda`` folder


def module_dir() -> Path:
    """The pinned KEDA module, downloaded (or found) in the Go module cache."""
    return builds.module_source(KEDA_MODULE, KEDA_VERSION)


def _json_patch(document: dict, operations: list[dict]) -> None:
    """The two operations KEDA's CRD patches use (RFC 6902 ``add`` and ``remove``), in place."""
    for operation in operations:
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]]
        target = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        if operation["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif operation["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), operation["value"])
            else:
                target[last] = operation["value"]
        else:
            raise ValueError(f"unsupported JSON patch operation {operation['op']!r} in KEDA's CRD patches")


def crds() -> list[dict]:
    """KEDA's CRDs as its ``config/crd`` kustomization renders them: the bases plus its JSON patches."""
    folder = module_dir() / "config" / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    documents = [yaml.safe_load((folder / path).read_text()) for path in kustomization["resources"]]
    by_name = {doc["metadata"]["name"]: doc for doc in documents}
    for patch in kustomization.get("patches") or []:
        target = by_name[patch["target"]["name"]]
        _json_patch(target, yaml.safe_load((folder / patch["path"]).read_text()))
    for doc in documents:
        doc["metadata"].pop("creationTimestamp", None)
    return documents


def front_proxy_flags(keys: pki.Pki, directory: Path) -> list[str]:
    """kube-apiserver flags for aggregated API servers: the client certificate it presents to
    them and the headers that carry the caller's identity. The control plane's CA signs it
    (a cluster would have a front-proxy CA of its own; here the allowed name is what limits
    who may assert an identity)."""
    pki.issue(
        directory,
        FRONT_PROXY_CLIENT,
        f"/CN={FRONT_PROXY_CLIENT}",
        [
            "basicConstraints=critical,CA:FALSE",
            "subjectKeyIdentifier=hash",
            "authorityKeyIdentifier=keyid",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=clientAuth",
        ],
        (keys.ca_cert, keys.ca_key),
    )
    return [
        f"--requestheader-client-ca-file={keys.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={directory / (FRONT_PROXY_CLIENT + '.crt')}",
        f"--proxy-client-key-file={directory / (FRONT_PROXY_CLIENT + '.key')}",
    ]


def certificates(keys: pki.Pki, cert_dir: Path) -> None:
    """``ca.crt``, ``tls.crt`` and ``tls.key`` in one folder that both processes read, as KEDA's
    own certificate rotation lays them out: the operator serves its metrics gRPC with them and
    requires a client certificate from the same CA, the adapter presents the same pair as
    that client and serves the external metrics API with it."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "ca.crt").write_bytes(keys.ca_cert.read_bytes())
    names = [
        f"{OPERATOR}.{NAMESPACE}.svc",
        f"{OPERATOR}.{NAMESPACE}.svc.cluster.local",
        f"{ADAPTER_SERVICE}.{NAMESPACE}.svc",
        "localhost",
    ]
    pki.issue(
        cert_dir,
        "tls",
        "/CN=keda",
        [
            "basicConstraints=critical,CA:FALSE",
            "subjectKeyIdentifier=hash",
            "authorityKeyIdentifier=keyid",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth,clientAuth",
            "subjectAltName=IP:127.0.0.1," + ",".join(f"DNS:{name}" for name in names),
        ],
        (keys.ca_cert, keys.ca_key),
    )


def environment(kubeconfig: str) -> dict[str, str]:
    """What KEDA reads from a pod's environment: its namespace (for Secrets of
    ClusterTriggerAuthentications and leader election), the namespaces it watches (set
    and empty: all of them) and, here, the kubeconfig."""
    return dict(
        os.environ,
        KEDA_CLUSTER_OBJECT_NAMESPACE=NAMESPACE,
        POD_NAMESPACE=NAMESPACE,
        WATCH_NAMESPACE="",
        KUBECONFIG=kubeconfig,
    )


def operator_command(binary: Path, kubeconfig: str, cert_dir: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--cert-dir={cert_dir}",
        f"--metrics-bind-address=127.0.0.1:{ports['keda-metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['keda-health']}",
        f"--metrics-service-bind-address=127.0.0.1:{ports['keda-grpc']}",
        # the certificates come from the control plane's CA; nothing for KEDA to rotate or patch
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
        "--leader-elect=false",
        "--zap-encoder=console",
    ]


def adapter_command(binary: Path, kubeconfig: str, cert_dir: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(binary),
        # its own client reads KUBECONFIG (see ``environment``)
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['keda-adapter']}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={cert_dir / 'tls.crt'}",
        f"--tls-private-key-file={cert_dir / 'tls.key'}",
        f"--metrics-service-address=127.0.0.1:{ports['keda-grpc']}",
        # KEDA's adapter binds its own /metrics on all interfaces: a free port of ours at least
        f"--port={ports['keda-adapter-metrics']}",
        "--zap-encoder=console",
    ]


def api_service_objects(port: int, ca_bundle: bytes) -> list[dict]:
    """The ExternalName Service (host ``localhost``) and the APIService that routes
    ``external.metrics.k8s.io`` through it to the adapter's port."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE, "port": port},
            "caBundle": base64.b64encode(ca_bundle).decode(),
        },
    }
    return [service, api_service]


def hosts_file(directory: Path) -> Path:
    """The file KEDA's operator sees as /etc/hosts, in the control plane's state folder."""
    return directory / "keda" / HOSTS_FILE


def with_private_hosts(command: list[str], hosts: Path) -> list[str]:
    """``command`` run in a mount namespace of its own where ``hosts`` is /etc/hosts. The
    process keeps its pid (unshare and sh exec), so the control plane stops it as any other.
    Root needs no user namespace for it (and may be on a kernel that allows none); anyone
    else gets one, mapped to root inside, which may mount there."""
    script = 'mount --bind "$1" /etc/hosts && shift && exec "$@"'
    namespaces = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    return ["unshare", *namespaces, "sh", "-c", script, "sh", str(hosts), *command]


class HostsFile:
    """The in-cluster names a private /etc/hosts (``with_private_hosts``) resolves."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path) -> HostsFile:
        """The host's own /etc/hosts (localhost and the machine's names) and nothing more yet."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Path("/etc/hosts").read_text().rstrip("\n") + "\n# in-cluster names (testenv)\n")
        return cls(path)

    def _rewrite(self, change) -> None:
        with self._lock:
            lines = self.path.read_text().splitlines()
            # write_text truncates and writes the same inode, which the bind mount shows
            self.path.write_text("\n".join(change(lines)) + "\n")

    @contextmanager
    def names(self, address: str, names: list[str]) -> Iterator[None]:
        """``names`` resolve to ``address`` until the block ends."""
        line = f"{address} {' '.join(names)}"
        self._rewrite(lambda lines: [*lines, line])
        try:
            yield
        finally:
            self._rewrite(lambda lines: [kept for kept in lines if kept != line])


class Keda(AddOn):
    """The add-on: kube-apiserver's front-proxy identity and KEDA's CRDs from the start, a quicker HPA
    sync; started while the fake nodes register, ready once kube-apiserver serves its metrics API."""

    name = "keda"  # off unless asked for (TESTENV_KEDA=1): its build and two more processes are for autoscaling
    title = f"KEDA {KEDA_VERSION}"
    probe = (f"apiservice/{API_SERVICE}", "KEDA's external metrics API is not registered")
    processes = (OPERATOR, ADAPTER)
    build_components = ("keda",)
    starts_with_the_nodes = True

    def __init__(self) -> None:
        self.started = 0.0

    def api_server_flags(self, keys: pki.Pki, pki_dir: Path) -> list[str]:
        # aggregated API servers (KEDA's metrics API) need kube-apiserver's front-proxy identity
        return front_proxy_flags(keys, pki_dir)

    def controller_manager_flags(self) -> list[str]:
        # HPAs (KEDA's 1..N) act within seconds instead of the default 15 s
        return ["--horizontal-pod-autoscaler-sync-period=2s"]

    def crds(self) -> list[dict | Path]:
        return [*crds()]

    def start(self, plane: Plane, deadline: float) -> None:
        """Namespace and certificates, then KEDA's operator and metrics API server (its CRDs are installed)."""
        log(f"starting KEDA {KEDA_VERSION} operator and metrics API server")
        for name in PORTS:
            plane.state.ports[name] = free_port()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        plane.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump(namespace))
        cert_dir = plane.directory / "keda" / "certs"
        certificates(plane.keys, cert_dir)
        env = environment(plane.state.kubeconfig)
        ports, kubeconfig = plane.state.ports, plane.state.kubeconfig
        # the operator dials the scalers the ScaledObjects name, in-cluster names among them: it
        # resolves them through a hosts file of this control plane's
        hosts = HostsFile.create(hosts_file(plane.directory))
        plane.spawn(OPERATOR, with_private_hosts(operator_command(plane.bin / OPERATOR, kubeconfig, cert_dir, ports),
                                                 hosts.path), env=env)  # fmt: skip
        plane.spawn(ADAPTER, adapter_command(plane.bin / ADAPTER, kubeconfig, cert_dir, ports), env=env)
        self.started = time.monotonic()

    def wait(self, plane: Plane, deadline: float) -> None:
        """The operator's health probe, the adapter's, then the external metrics API served
        through kube-apiserver (the path the HPA controller takes)."""
        ports = plane.state.ports
        plane.wait_healthy(f"http://127.0.0.1:{ports['keda-health']}/readyz", deadline, OPERATOR, tls=False)
        log(f"KEDA operator healthy {time.monotonic() - self.started:.1f}s after its start")
        plane.wait_healthy(f"https://127.0.0.1:{ports['keda-adapter']}/readyz", deadline, ADAPTER)
        log(f"KEDA metrics API server healthy {time.monotonic() - self.started:.1f}s after its start; registering it")
        objects = api_service_objects(ports["keda-adapter"], plane.keys.ca_cert.read_bytes())
        plane.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-", input=yaml.safe_dump_all(objects))

        def available() -> bool:
            plane.fail_if_exited(ADAPTER)
            api_service = json.loads(plane.kubectl("get", "apiservice", API_SERVICE, "-o", "json").stdout)
            return (condition(api_service, "Available") or {}).get("status") == "True"

        wait_by(deadline, f"APIService {API_SERVICE} Available (kube-apiserver reaches KEDA's metrics API server)",
                available)  # fmt: skip
        log(f"KEDA's external metrics API available {time.monotonic() - self.started:.1f}s after the start")

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {
            OPERATOR: (f"http://127.0.0.1:{ports.get('keda-health')}/readyz", False),
            ADAPTER: (f"https://127.0.0.1:{ports.get('keda-adapter')}/readyz", True),
        }
