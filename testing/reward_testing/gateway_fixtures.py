"""The real reward gateway process (``python -m reward_gateway``) as a pytest fixture, for
every test folder that runs it: the gateway's own tests, and e2e tests where a real
component (KEDA's operator) talks to it.

Loaded for every test folder by the top-level conftest.py. The process itself is
``reward_testing.gateway_process`` (also used where there is no pytest).
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from reward_testing.gateway_process import gateway_process, rendered_gateway

__all__ = ["gateway_process", "rendered_gateway", "run_gateway"]


@pytest.fixture
def run_gateway(tmp_path):
    """Start `python -m reward_gateway` with these args and environment (nothing else of REWARD_GATEWAY_*);
    returns its URL and log file once /v1/models/<ready_name> answers (the last process: `run.process`).
    Further keywords go to :func:`gateway_process` (``host``, ``wrap``, ...)."""
    with ExitStack() as stack:

        def run(args: list[str], env: dict[str, str], port: int, ready_name: str, **options):
            log = tmp_path / f"gateway-{port}.log"
            run.process = stack.enter_context(gateway_process(args, env, port, ready_name, log, **options))
            return f"http://{options.get('host', '127.0.0.1')}:{port}", log

        yield run
