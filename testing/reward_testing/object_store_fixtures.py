"""A real S3-compatible server per test (``reward_testing.object_store``: versitygw), as a pytest fixture.

Loaded for every test folder by the top-level conftest.py. The binary comes from the ``versitygw`` fixture of
the test bed's plugin (``testenv.pytest_plugin``), built there on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reward_testing.object_store import ObjectStore
from reward_testing.object_store import object_store as run_object_store

__all__ = ["ObjectStore", "object_store"]


@pytest.fixture
def object_store(versitygw: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """versitygw on loopback with root keys of its own, stopped after the test; ``.env()`` is what a client
    reads (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION)."""
    with run_object_store(versitygw, tmp_path_factory.mktemp("object-store")) as store:
        yield store
