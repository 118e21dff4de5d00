"""The session-scoped ``cluster`` fixture for integration and e2e tests.

With ``E2E_KUBECONFIG`` set, tests run against that cluster (a kind cluster or a
real one with KServe's CRDs installed); otherwise one local control plane is
started for the whole session and stopped at its end.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import build, controlplane


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: Path
    local: bool

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


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        yield Cluster(kubeconfig=external, bin_dir=build.bin_dir(), local=False)
        return
    with tempfile.TemporaryDirectory(prefix="reward-operator-testenv-") as scratch:
        plane = controlplane.ControlPlane(Path(scratch) / "plane")
        state = plane.up()
        try:
            yield Cluster(kubeconfig=state.kubeconfig, bin_dir=plane.bin, local=True)
        finally:
            plane.down()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    # pods are refused until the namespace's default ServiceAccount exists
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=60s")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Anything that needs a cluster is an integration test, so `-m "not integration"`
    # gives the fast unit run without marking each test by hand.
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
