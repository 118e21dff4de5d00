"""The real-node rewards suite against the operator as a pod, installed by its chart.

test_real_node_rewards.py, unchanged (each kind Ready and scored through its URL at transformers' scores, the
cache, a claim, a predictor short of memory), with one difference: no operator runs on the host. The operator is
the chart's pod on the real node (the operator-pod suite's install), under its ServiceAccount's RBAC, so every
call these tests make it do is one the chart grants.

`make operator-pod` runs it (not `make test`, which runs the same tests with a host operator): vLLM's cold starts
again, one per kind.
"""

from __future__ import annotations

import pytest
import test_real_node_operator_pod as operator_pod
import test_real_node_rewards as rewards

# pytest takes fixtures from the module's names: the chart's install, and the rewards suite's own
release = operator_pod.release
chart_values = operator_pod.chart_values
served_namespace = rewards.served_namespace
real_node_group = rewards.real_node_group
models_claim = rewards.models_claim


@pytest.fixture(scope="module")
def operator(release) -> operator_pod.Release:
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
