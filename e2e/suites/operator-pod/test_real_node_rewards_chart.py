"""The real-node rewards suite against the operator as a pod, installed by its chart.

e2e/tests/node/test_real_node_rewards.py, loaded by its path and unchanged (each kind Ready and scored through
its URL at transformers' scores, the cache, a claim, a predictor short of memory), with one difference: no
operator runs on the host. The operator is the chart's pod on the real node (the operator-pod suite's install),
under its ServiceAccount's RBAC, so every call these tests make it do is one the chart grants.

`make operator-pod` runs it (not `make test`, which runs the same tests with a host operator): vLLM's cold starts
again, one per kind.
"""

from __future__ import annotations

import importlib.util

import pytest

from reward_testing.paths import REPO
from testenv.operator_pod import Release

# The node level's rewards suite, run here a second time against the chart's pod: its tests and its fixtures
_spec = importlib.util.spec_from_file_location(
    "node_rewards", REPO / "e2e" / "tests" / "node" / "test_real_node_rewards.py"
)
rewards = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rewards)

# pytest takes fixtures from the module's names: the rewards suite's (the chart's: e2e/suites/conftest.py)
served_namespace = rewards.served_namespace
real_node_group = rewards.real_node_group
models_claim = rewards.models_claim


@pytest.fixture(scope="module")
def operator(release) -> Release:
    """Where the rewards suite asks for the operator: the chart's pod, in place of a host process."""
    return release


test_a_sequence_model_scores_through_its_url_with_the_spec_template_and_a_bearer_token = (
    rewards.test_a_sequence_model_scores_through_its_url_with_the_spec_template_and_a_bearer_token
)
test_a_token_model_cached_on_the_node_by_kserves_download_job_scores_through_its_url = (
    rewards.test_a_token_model_cached_on_the_node_by_kserves_download_job_scores_through_its_url
)
test_a_process_model_on_a_claim_scores_each_step_through_its_url = (
    rewards.test_a_process_model_on_a_claim_scores_each_step_through_its_url
)
test_a_predictor_short_of_memory_reaches_the_status_with_kubernetes_reason_and_one_warning = (
    rewards.test_a_predictor_short_of_memory_reaches_the_status_with_kubernetes_reason_and_one_warning
)
