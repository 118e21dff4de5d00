"""The real node's model storage server (testenv.node.storage) as the node starts it: files as Python's file
server serves them, a missing one 404, and a /status/<code>/ path answered with that code on purpose."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until
from testenv import node
from testenv.node import failing_url


@pytest.fixture
def storage(tmp_path):
    (tmp_path / "tiny.tar.gz").write_bytes(b"weights")
    port = free_port()
    server = subprocess.Popen(node.storage_command(sys.executable, tmp_path, "127.0.0.1", port))
    url = node.storage_url("127.0.0.1", port, "tiny.tar.gz")

    def serving() -> bool:
        try:
            return httpx.head(url, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until("the storage server answering", serving, timeout=30, interval=0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_it_serves_files_and_answers_a_status_path_with_that_error(storage):
    assert httpx.get(storage).content == b"weights"
    assert httpx.get(storage.replace("tiny.tar.gz", "missing.tar.gz")).status_code == 404
    broken = failing_url(storage, 500)
    assert broken.endswith("/status/500/tiny.tar.gz"), broken
    answer = httpx.get(broken)
    assert answer.status_code == 500 and "on purpose" in answer.text, answer.text
    assert httpx.head(failing_url(storage, 503)).status_code == 503
