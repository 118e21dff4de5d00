"""Fixtures shared by every e2e folder (e2e/tests/*, e2e/suites/*): the operator run for real, the pinned helm,
prometheus-operator's kinds, the real node's control plane with the tiny models on its storage server, and
transformers' answers for them; a namespace where Knative serves. The clusters and namespaces themselves:
testenv.pytest_plugin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reward_testing.paths import REPO
from reward_testing.scoring_cases import REFERENCE_ITEMS
from reward_testing.tiny_models import reference_scores, reference_scores_of, tar_model
from testenv import node, served, wake
from testenv.addons import knative, prometheus
from testenv.chart import helm_binary
from testenv.operator_process import OperatorProcess
from testenv.plane import controlplane


@pytest.fixture(scope="session")
def monitoring_crds(cluster):
    """prometheus-operator's own CRDs of the kinds the chart and manifests ship (their schemas check ours), at
    the release `make prometheus-real` runs."""
    prometheus.install_crds(cluster, ("servicemonitors", "podmonitors", "prometheusrules"))


@pytest.fixture(scope="session")
def helm() -> Path:
    """The pinned helm, built into the test bed's cache when missing."""
    return helm_binary()


@pytest.fixture(scope="session")
def kserve_runs(cluster):
    """For tests that need KServe's controller and webhooks: skipped where the cluster has none."""
    webhook = "mutatingwebhookconfiguration/inferenceservice.serving.kserve.io"
    if cluster.kubectl("get", webhook, check=False).returncode != 0:
        pytest.skip("needs KServe's controller and webhooks on the cluster (TESTENV_KSERVE=0 leaves them out)")


@pytest.fixture(scope="session")
def runtimes(cluster):
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))


@pytest.fixture(scope="session")
def operator(cluster, runtimes, tmp_path_factory) -> Iterator[OperatorProcess]:
    """reward-operator as a separate process, exactly as `reward-operator run` runs it."""
    with running_operator(cluster, tmp_path_factory.mktemp("operator") / "operator.log") as running:
        yield running


@pytest.fixture(scope="session")
def start_operator():
    """:func:`running_operator` itself, for tests that stop the operator and start it again."""
    return running_operator


# A long drift timer: anything restored during the tests was restored by the watch.
# A rollout looked at every 2 s (test_rewardmodel_canary.py), not every 30 s.
E2E_TIMERS = {"REWARD_OPERATOR_DRIFT_INTERVAL": "3600", "REWARD_OPERATOR_CANARY_INTERVAL": "2"}


def running_operator(cluster, log_path: Path) -> OperatorProcess:
    """`reward-operator run` against ``cluster`` with the e2e timers (a context manager), its log in ``log_path``."""
    return OperatorProcess(cluster.kubeconfig, log_path, bin_dir=cluster.bin_dir, env=E2E_TIMERS)


@pytest.fixture(scope="module")
def keda_operator(keda_cluster, tmp_path_factory) -> Iterator[OperatorProcess]:
    """The operator, as ``operator`` runs it, against ``keda_cluster`` (with the reward runtimes)."""
    keda_cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", str(REPO / "runtimes"))
    with running_operator(keda_cluster, tmp_path_factory.mktemp("keda-operator") / "operator.log") as running:
        yield running


@pytest.fixture(scope="module")
def plane(cluster) -> controlplane.ControlPlane:
    """The local control plane whose real node serves, with vLLM's CPU image imported; skipped on other
    clusters."""
    if not cluster.local or cluster.kubectl("get", f"node/{node.NAME}", check=False).returncode != 0:
        pytest.skip("needs the test bed's real node (TESTENV_NODE=0 leaves it out)")
    plane = controlplane.ControlPlane.attach(cluster.directory)
    plane.load_images(("vllm-cpu",))
    return plane


@pytest.fixture(scope="module")
def model_uris(plane, tiny_models) -> dict[str, str]:
    """Each kind's tiny model as an archive on the real node's storage server, by the URI a RewardModel names."""
    storage = node.storage_dir(plane.directory)
    port = plane.state.ports[node.STORAGE]
    uris = {}
    for kind, model in tiny_models.items():
        tar_model(model, storage / f"{kind}.tar.gz")
        uris[kind] = node.storage_url(node.host_address(), port, f"{kind}.tar.gz")
    return uris


@pytest.fixture(scope="module")
def references(tiny_models) -> dict[str, dict[str, dict]]:
    """transformers' answers for the tiny models, per kind and item name (reward_testing.scoring_cases)."""
    jobs = {kind: (tiny_models[kind], list(items.values())) for kind, items in REFERENCE_ITEMS.items()}
    answers = reference_scores_of(jobs)
    return {kind: dict(zip(REFERENCE_ITEMS[kind], answers[kind], strict=True)) for kind in REFERENCE_ITEMS}


@pytest.fixture(scope="module")
def knative_namespace(cluster, operator, runtimes, plane) -> Iterator[str]:
    """A namespace on the real node with the client pod, on the session's control plane where Knative runs
    (``testenv.addons.knative``; skipped where it does not)."""
    probe, missing = knative.Knative.probe
    if cluster.kubectl("get", probe, check=False).returncode != 0:
        pytest.skip(f"{missing} on the real node (TESTENV_KNATIVE=0 leaves it out)")
    with served.client_namespace(cluster) as name:
        yield name


@pytest.fixture(scope="module")
def sequence_wake_scores(tiny_models) -> dict[str, float]:
    """transformers' reward of every text of ``testenv.wake.burst_calls``, for the tiny sequence model."""
    texts = [text for _, _, scored in wake.burst_calls() for text in scored]
    answers = reference_scores(tiny_models["sequence"], [{"text": text} for text in texts])
    return dict(zip(texts, (answer["reward"] for answer in answers), strict=True))
