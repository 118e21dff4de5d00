"""The clusters and namespaces the tests run on: the session's ``cluster``, and ``cluster_with`` for the rest.

With ``E2E_KUBECONFIG`` set, tests run against that cluster (a kind cluster or a real one with KServe's CRDs
installed); otherwise one local control plane is started for the whole session and stopped at its end, with
the add-ons the environment asks for (``testenv.addons``: KServe's manager and the real node unless
TESTENV_KSERVE=0 or TESTENV_NODE=0, and with the node KServe's LocalModel, whose node group the real-node
suite caches a model in). A test that needs an add-on the session's plane may lack asks for a fixture made by
``cluster_with``: the session's cluster where it runs them, else a control plane with them for its module
alone. Module-scoped control planes leave the real node out (one per machine) unless they are for it.

A test's level is its folder (the Makefile's ``make unit`` and ``make integration`` select by path);
``--level`` holds a run to its level: ``offline`` refuses a test that asks for a cluster, ``cluster`` one that
does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import addons, builds
from .addons.keda import HostsFile, hosts_file
from .node import namespace_for_real_node
from .plane.controlplane import ControlPlane
from .plane.kubectl import run_kubectl


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: Path
    local: bool
    # Where KEDA's operator resolves in-cluster names (keda.HostsFile): a local control plane
    # with KEDA; None elsewhere (a real cluster has its DNS).
    hosts: HostsFile | None = None
    # The local control plane's folder (node disks of KServe's LocalModel agents); None elsewhere.
    directory: Path | None = None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run the pinned kubectl against this cluster."""
        kubectl = self.bin_dir / "kubectl" if (self.bin_dir / "kubectl").exists() else Path("kubectl")
        try:
            return run_kubectl(kubectl, self.kubeconfig, args, input=input, check=check)
        except RuntimeError as error:
            raise AssertionError(str(error)) from None

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (operator, helm) that talk to this cluster."""
        return dict(os.environ, KUBECONFIG=self.kubeconfig, PATH=f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}")


def session_asks() -> dict[str, bool]:
    """What the session's control plane asks beyond the environment: KServe's LocalModel wherever the real node
    runs (the real-node suite caches a model on it)."""
    with_node = any(add_on.name == "node" for add_on in addons.choose())
    return {"localmodel": True} if with_node else {}


@contextmanager
def _local_cluster(**asked: bool | None) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="reward-operator-testenv-") as scratch:
        plane = ControlPlane(Path(scratch) / "plane")
        state = plane.up(**asked)
        hosts = hosts_file(plane.directory)
        try:
            yield Cluster(
                kubeconfig=state.kubeconfig,
                bin_dir=plane.bin,
                local=True,
                hosts=HostsFile(hosts) if hosts.exists() else None,
                directory=plane.directory,
            )
        finally:
            plane.down()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        yield Cluster(kubeconfig=external, bin_dir=builds.bin_dir(), local=False)
        return
    with _local_cluster(**session_asks()) as local:
        yield local


# The fixtures that bring a cluster: a test that asks for one is no offline test.
CLUSTER_FIXTURES = {"cluster"}


def cluster_with(*names: str, doc: str, shared: bool = True) -> Callable[..., Iterator[Cluster]]:
    """A module-scoped fixture, ``<names>_cluster``: a cluster on which the add-ons ``names`` run (``doc`` says
    what for).

    The session's ``cluster`` where its control plane runs them (an E2E_KUBECONFIG cluster too; skipped where
    an add-on's probe object is absent); otherwise a control plane with them for the module alone, stopped
    after it, without the real node unless it is asked for. ``shared=False``: always one of the module's own
    (on a local control plane)."""
    kinds = [addons.BY_NAME[name] for name in names]
    fixture_name = f"{'_'.join(name.replace('-', '_') for name in names)}_cluster"

    def fixture(request: pytest.FixtureRequest) -> Iterator[Cluster]:
        in_session = {add_on.name for add_on in addons.choose(session_asks())}
        if os.environ.get("E2E_KUBECONFIG") or (shared and in_session >= set(names)):
            shared_cluster: Cluster = request.getfixturevalue("cluster")
            for kind in kinds:
                probe, missing = kind.probe
                if probe and shared_cluster.kubectl("get", probe, check=False).returncode != 0:
                    pytest.skip(f"{missing} on {shared_cluster.kubeconfig}")
            yield shared_cluster
            return
        with _local_cluster(**{"node": False, **dict.fromkeys(names, True)}) as local:
            yield local

    fixture.__doc__ = doc
    CLUSTER_FIXTURES.add(fixture_name)
    return pytest.fixture(scope="module", name=fixture_name)(fixture)


kserve_cluster = cluster_with("kserve", doc="A cluster on which KServe's own manager (controller and webhooks) runs.")
keda_cluster = cluster_with("keda", doc="A cluster on which KEDA's operator and external metrics API server run.")
# always a control plane of the module's own, even where the session's has it: the cache tests stop and start
# an operator of their own, which must not run beside the session's
localmodel_cluster = cluster_with(
    "localmodel",
    doc="A cluster on which KServe's LocalModel controller runs, localModel enabled, with a node group gpu.",
    shared=False,
)
node_cluster = cluster_with("node", doc="A cluster with the real node (E2E_KUBECONFIG: a Node real-node, our images).")


@contextmanager
def _fresh_namespace(cluster: Cluster, on_real_node: bool = False) -> Iterator[str]:
    name = f"{'n' if on_real_node else 't'}-{uuid.uuid4().hex[:8]}"
    if on_real_node:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace_for_real_node(name)))
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


@pytest.fixture(scope="session")
def versitygw() -> Path:
    """versitygw's binary, an S3-compatible server (``builds`` component ``versitygw``; a no-op where cached, else
    built now, about a minute): what ``reward_testing.object_store`` runs for the ``object_store`` fixture."""
    return builds.build(only=["versitygw"]) / "versitygw"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--level",
        choices=("offline", "cluster"),
        help="hold the run to one level: offline refuses a test that asks for a cluster, cluster one that does not",
    )


def needs_a_cluster(item: pytest.Item) -> bool:
    """Whether the test asks for one of the clusters above (a folder's own fixture of the same name, such as the
    operator's tests' fake ``cluster``, is no cluster)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs if info is not None else {}
    return any(
        name in definitions and definitions[name][-1].func.__module__ == __name__
        for name in CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    level = config.getoption("--level")
    if level is None:
        return
    wrong = [item.nodeid for item in items if needs_a_cluster(item) != (level == "cluster")]
    if wrong:
        where = "e2e/tests/cluster or e2e/tests/node" if level == "offline" else "e2e/tests/offline"
        listed = "\n  ".join(wrong[:20])
        raise pytest.UsageError(
            f"{len(wrong)} test(s) of a --level={level} run {'ask' if level == 'offline' else 'do not ask'} for a "
            f"cluster ({', '.join(sorted(CLUSTER_FIXTURES))}): they belong in {where}\n  {listed}"
        )
