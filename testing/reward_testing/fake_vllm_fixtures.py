"""The fake vLLM as pytest fixtures, for every test folder that runs a gateway in front of it.

Loaded for every test folder by the top-level conftest.py.
"""

from __future__ import annotations

import pytest

from reward_testing.fake_vllm import FakeVllm, serve_in_thread


@pytest.fixture(scope="session")
def fake_vllm():
    # delay_s: each call is held a multiple of it chosen by its text, so answers come back out of order.
    fake = FakeVllm(delay_s=0.002)
    with serve_in_thread(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def backend(fake_vllm):
    """The session's fake, reset to behave: no recorded calls, healthy, a BOS like Llama's."""
    fake_vllm.calls.clear()
    fake_vllm.healthy = True
    fake_vllm.misbehaviour = None
    fake_vllm.bos_token = "<s>"
    return fake_vllm
