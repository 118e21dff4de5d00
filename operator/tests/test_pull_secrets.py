"""The chart's imagePullSecrets, which the operator is given by name (REWARD_OPERATOR_IMAGE_PULL_SECRETS):
read from its environment, and rendered into the pods of every InferenceService it makes. (A RewardBatch's
Job: test_rewardbatch.py; the chart's side: e2e/tests/offline/test_chart.py.)"""

from __future__ import annotations

import pytest
import yaml

from reward_operator.render import render_reward_model, render_rlhf_pipeline
from reward_operator.settings import Settings, SettingsError
from reward_testing.paths import GOLDEN, golden_cases, golden_input

VARIABLE = "REWARD_OPERATOR_IMAGE_PULL_SECRETS"
SECRETS = ("registry", "mirror.example.com")
PULLED_WITH = [{"name": "registry"}, {"name": "mirror.example.com"}]
PIPELINES = {
    path.stem: yaml.safe_load(path.read_text()) for path in sorted((GOLDEN / "pipeline" / "inputs").glob("*.yaml"))
}


def test_the_operator_reads_the_names_as_the_chart_writes_them():
    assert Settings.from_env({}).image_pull_secrets == ()
    assert Settings.from_env({VARIABLE: ""}).image_pull_secrets == ()
    assert Settings.from_env({VARIABLE: "registry,mirror.example.com"}).image_pull_secrets == SECRETS
    assert Settings.from_env({VARIABLE: " registry , mirror.example.com,"}).image_pull_secrets == SECRETS


@pytest.mark.parametrize("value", ["Registry", "registry;mirror", "-registry"])
def test_a_name_no_secret_can_have_stops_the_operator_at_start(value):
    """Refused once, at start, rather than rendered into every pod, each of which would pull without it."""
    with pytest.raises(SettingsError, match=VARIABLE):
        Settings.from_env({VARIABLE: value})


def pulled_components(children: list[dict]) -> list[dict]:
    """Each InferenceService's predictor and transformer, each of which must carry PULLED_WITH, with the
    field taken out (so the rest can be compared with a render without it)."""
    components = [
        isvc["spec"][component]
        for isvc in children
        if isvc["kind"] == "InferenceService"
        for component in ("predictor", "transformer")
        if component in isvc["spec"]
    ]
    assert components
    for component in components:
        assert component.pop("imagePullSecrets") == PULLED_WITH
    return components


@pytest.mark.parametrize("case", golden_cases())
def test_every_pod_of_a_reward_model_pulls_with_the_secrets_and_nothing_else_moves(case):
    """Predictor and gateway, and Knative's candidate InferenceService; a Standard rollout's spec.canary[]
    entry carries none, as KServe merges it over the predictor, whose secrets it keeps (and the candidate's
    identity, digested from the entry, stays: giving the operator a secret starts no rollout over)."""
    pulled = render_reward_model(golden_input(case), pull_secrets=SECRETS)
    pulled_components(pulled)
    assert pulled == render_reward_model(golden_input(case))


@pytest.mark.parametrize("case", sorted(PIPELINES))
def test_every_pod_of_a_pipelines_roles_pulls_with_the_secrets_and_nothing_else_moves(case):
    pulled = render_rlhf_pipeline(PIPELINES[case], pull_secrets=SECRETS)
    assert len(pulled_components(pulled)) == 2 * sum(child["kind"] == "InferenceService" for child in pulled)
    assert pulled == render_rlhf_pipeline(PIPELINES[case])
