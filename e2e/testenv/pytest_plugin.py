"""The session-scoped ``cluster`` fixture for integration and e2e tests.

With ``E2E_KUBECONFIG`` set, tests run against that cluster (a kind cluster or a
real one with KServe's CRDs installed); otherwise one local control plane is
started for the whole session and stopped at its end, with KServe's own manager
(controller and webhooks) on it unless ``TESTENV_KSERVE=0``; tests that need
KServe use ``kserve_cluster``, which brings its own control plane in that case.
Tests that need KEDA use ``keda_cluster`` likewise (KEDA is off unless TESTENV_KEDA=1), and the
kwok cache tests ``localmodel_cluster`` (KServe's LocalModel controller on a plane of their own).
The session's control plane has the real node (``testenv.node``) unless TESTENV_NODE=0, and with it
KServe's LocalModel (a node group of the real node's own); tests whose pods must really run use
``node_cluster`` and ``node_namespace`` (a namespace pinned to that node).
Module-scoped control planes leave the node out: there is one real node per machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import build, controlplane, keda, kserve_manager, localmodel
from . import keda as keda_setup  # `keda` is also a parameter name below
from . import node as node_setup


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: Path
    local: bool
    # Where KEDA's operator resolves in-cluster names (keda.HostsFile): a local control plane
    # with KEDA; None elsewhere (a real cluster has its DNS).
    hosts: keda_setup.HostsFile | None = None
    # The local control plane's folder (node disks of KServe's LocalModel agents); None elsewhere.
    directory: Path | None = None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run the pinned kubectl against this cluster."""
        kubectl = self.bin_dir / "kubectl" if (self.bin_dir / "kubectl").exists() else Path("kubectl")
        try:
            return controlplane.run_kubectl(kubectl, self.kubeconfig, args, input=input, check=check)
        except RuntimeError as error:
            raise AssertionError(str(error)) from None

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (operator, helm) that talk to this cluster."""
        return dict(os.environ, KUBECONFIG=self.kubeconfig, PATH=f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}")


@contextmanager
def _local_cluster(
    kserve: bool | None = None, keda: bool | None = None, localmodel: bool | None = None, node: bool | None = False
) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="reward-operator-testenv-") as scratch:
        plane = controlplane.ControlPlane(Path(scratch) / "plane")
        state = plane.up(kserve=kserve, keda=keda, localmodel=localmodel, node=node)
        hosts = keda_setup.hosts_file(plane.directory)
        try:
            yield Cluster(
                kubeconfig=state.kubeconfig,
                bin_dir=plane.bin,
                local=True,
                hosts=keda_setup.HostsFile(hosts) if hosts.exists() else None,
                directory=plane.directory,
            )
        finally:
            plane.down()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        yield Cluster(kubeconfig=external, bin_dir=build.bin_dir(), local=False)
        return
    # KServe's LocalModel comes with the real node: the real-node suite caches a model on it
    with_node = node_setup.enabled_by_env()
    with _local_cluster(node=with_node, localmodel=with_node or localmodel.enabled_by_env()) as local:
        yield local


@pytest.fixture(scope="module")
def node_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster with the real node: the session's (the default), or, with TESTENV_NODE=0, a control
    plane with the node for this module alone. An E2E_KUBECONFIG cluster needs a Node named
    ``real-node`` with the images built here."""
    yield from _shared_or_own(
        request,
        node_setup.enabled_by_env(),
        f"node/{node_setup.NAME}",
        f"no real node ({node_setup.NAME})",
        node=True,
    )


@pytest.fixture(scope="module")
def kserve_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster on which KServe's own manager (controller and webhooks) runs.

    The session's ``cluster`` when it has KServe (the default, or an
    E2E_KUBECONFIG cluster with KServe installed); with TESTENV_KSERVE=0, a
    control plane with KServe for this module alone, stopped after it.
    """
    if os.environ.get("E2E_KUBECONFIG") or kserve_manager.enabled_by_env():
        shared: Cluster = request.getfixturevalue("cluster")
        webhook = "mutatingwebhookconfiguration/inferenceservice.serving.kserve.io"
        if shared.kubectl("get", webhook, check=False).returncode != 0:
            pytest.skip(f"KServe's webhooks are not installed on {shared.kubeconfig}")
        yield shared
        return
    with _local_cluster(kserve=True) as local:
        yield local


@pytest.fixture(scope="module")
def keda_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster on which KEDA's operator and external metrics API server run.

    The session's ``cluster`` when it has KEDA (TESTENV_KEDA=1, or an E2E_KUBECONFIG
    cluster with KEDA installed); otherwise a control plane with KEDA (and KServe's
    manager unless TESTENV_KSERVE=0) for this module alone, stopped after it.
    """
    yield from _shared_or_own(
        request,
        keda.enabled_by_env(),
        f"apiservice/{keda.API_SERVICE}",
        "KEDA's external metrics API is not registered",
        keda=True,
    )


@pytest.fixture(scope="module")
def localmodel_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster on which KServe's LocalModel controller runs, with localModel enabled and a
    LocalModelNodeGroup ``gpu`` (see ``testenv.localmodel``).

    An E2E_KUBECONFIG cluster with KServe's LocalModel install; otherwise a control plane with them
    (and KServe's manager) for this module alone, stopped after it, even where the session's has them:
    the cache tests stop and start an operator of their own, which must not run beside the session's."""
    yield from _shared_or_own(
        request,
        False,
        f"localmodelnodegroup/{localmodel.NODE_GROUP}",
        f"no LocalModelNodeGroup {localmodel.NODE_GROUP} (KServe's LocalModel)",
        kserve=True,
        localmodel=True,
    )


def _shared_or_own(
    request: pytest.FixtureRequest, in_session: bool, probe: str, missing: str, **components: bool
) -> Iterator[Cluster]:
    """The session's ``cluster`` when it runs the components (``in_session``, or any E2E_KUBECONFIG
    cluster; skipped when ``probe``, an object they make, is absent); otherwise a control plane
    with them for the module alone, stopped after it."""
    if os.environ.get("E2E_KUBECONFIG") or in_session:
        shared: Cluster = request.getfixturevalue("cluster")
        if shared.kubectl("get", probe, check=False).returncode != 0:
            pytest.skip(f"{missing} on {shared.kubeconfig}")
        yield shared
        return
    with _local_cluster(**components) as local:
        yield local


@contextmanager
def _fresh_namespace(cluster: Cluster, on_real_node: bool = False) -> Iterator[str]:
    name = f"{'n' if on_real_node else 't'}-{uuid.uuid4().hex[:8]}"
    if on_real_node:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(node_setup.namespace_for_real_node(name)))
    else:
        cluster.kubectl("create", "namespace", name)
    # pods are refused until the namespace's default ServiceAccount exists
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    with _fresh_namespace(cluster) as name:
        yield name


@pytest.fixture(scope="module")
def kserve_namespace(kserve_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace on ``kserve_cluster``, shared by the module's tests."""
    with _fresh_namespace(kserve_cluster) as name:
        yield name


@pytest.fixture
def keda_namespace(keda_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test on ``keda_cluster``."""
    with _fresh_namespace(keda_cluster) as name:
        yield name


@pytest.fixture
def node_namespace(node_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test whose pods all run on the real node, deleted afterwards."""
    with _fresh_namespace(node_cluster, on_real_node=True) as name:
        yield name


CLUSTER_FIXTURES = {"cluster", "kserve_cluster", "keda_cluster", "localmodel_cluster", "node_cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Anything that needs a cluster is an integration test, so `-m "not integration"`
    # gives the fast unit run without marking each test by hand.
    for item in items:
        if {"cluster", "kserve_cluster", "keda_cluster", "localmodel_cluster", "node_cluster"} & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.integration)
