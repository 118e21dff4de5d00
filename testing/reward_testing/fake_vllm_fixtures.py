"""The fake vLLM as pytest fixtures, for every test folder that runs a gateway in front of it.

Loaded for every test folder by the top-level conftest.py.
"""

from __future__ import annotations

import pytest

from reward_testing.fake_vllm import FakeVllm, serve_in_thread


def _served():
    # delay_s: each call is held a multiple of it chosen by its text, so answers come back out of order.
    fake = FakeVllm(delay_s=0.002)
    with serve_in_thread(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture(scope="session")
def fake_vllm():
    yield from _served()


def _reset(fake: FakeVllm) -> FakeVllm:
    """Behave: no recorded calls, healthy, a BOS like Llama's, the plain scores."""
    fake.calls.clear()
    fake.healthy = True
    fake.misbehaviour = None
    fake.step_rows = None
    fake.abandoned = 0
    fake.bos_token = "<s>"
    fake.scale, fake.offset, fake.fixed = 1.0, 0.0, {}
    fake.verdicts = {}
    fake.choice_order = "index"
    return fake


@pytest.fixture
def backend(fake_vllm):
    """The session's fake, reset to behave."""
    return _reset(fake_vllm)


@pytest.fixture(scope="session")
def second_fake_vllm():
    yield from _served()


@pytest.fixture
def candidate_backend(second_fake_vllm):
    """A second fake, reset to behave, for a rollout's candidate model beside `backend`."""
    return _reset(second_fake_vllm)
