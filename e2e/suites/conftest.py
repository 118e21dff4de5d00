"""Fixtures the suites share: the operator installed by its chart as a pod on the real node (testenv.operator_pod),
which the operator-pod and prometheus suites run against."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testenv import node, operator_pod


@pytest.fixture(scope="module")
def chart_values() -> dict:
    """Values the chart is installed with beyond the test bed's (a suite that reuses ``release`` sets its own)."""
    return {}


@pytest.fixture(scope="module")
def release(cluster, plane, tmp_path_factory, chart_values) -> Iterator[operator_pod.Release]:
    """`helm install` of the chart into a namespace enforcing `restricted`, with no host operator running."""
    with operator_pod.installed(cluster, tmp_path_factory.mktemp("operator-pod"), chart_values) as installed:
        yield installed


@pytest.fixture(scope="module")
def storage_initializer_restricted(cluster, plane) -> Iterator[dict]:
    """KServe's storage initializer with the `restricted` securityContext for the storage server's URIs."""
    with operator_pod.storage_initializer_restricted(cluster, plane.state.ports[node.STORAGE]) as security:
        yield security


@pytest.fixture(scope="module")
def models_namespace(cluster, release, storage_initializer_restricted) -> Iterator[str]:
    """The RewardModels' namespace on the real node, enforcing `restricted`, with the trainer's client pod."""
    with operator_pod.models_namespace(cluster) as name:
        yield name
