"""What a RewardModel references, and the first gap named in words (a table, no cluster)."""

from __future__ import annotations

import pytest

from reward_operator.api.defaults import apply_defaults
from reward_operator.policy.dependencies import Observed, references
from reward_operator.policy.dependencies import missing as missing_dependency


def reward_model(**spec) -> dict:
    return apply_defaults(
        {
            "apiVersion": "serving.rlhf.dev/v1alpha1",
            "kind": "RewardModel",
            "metadata": {"name": "rm", "namespace": "ns"},
            "spec": {"model": {"uri": "hf://org/rm"}, **spec},
        }
    )


FULL = {
    "credentials": {"huggingFaceToken": {"name": "hf", "key": "HF_TOKEN"}, "serviceAccountName": "puller"},
    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "OTHER"}}}],
    "gateway": {"authSecretRef": {"name": "auth", "key": "token"}},
}


def test_references_name_every_secret_once_and_the_account():
    wanted = references(reward_model(**FULL), "vllm-reward")
    assert wanted.runtime == "vllm-reward"
    assert [(r.field, r.secret, r.key) for r in wanted.secrets] == [
        ("spec.credentials.huggingFaceToken", "hf", "HF_TOKEN"),
        ("spec.env[X]", "hf", "OTHER"),
        ("spec.gateway.authSecretRef", "auth", "token"),
    ]
    assert wanted.secret_names == {"hf", "auth"}
    assert wanted.service_account == "puller"


EVERYTHING = Observed(True, {"hf": {"HF_TOKEN", "OTHER"}, "auth": {"token"}}, True)


def test_nothing_missing_when_everything_is_there():
    assert missing_dependency("ns", references(reward_model(**FULL), "vllm-reward"), EVERYTHING) is None


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (Observed(False), "spec.runtime: no ClusterServingRuntime (or ServingRuntime in ns) named 'vllm-reward'"),
        (
            Observed(True, {"hf": None, "auth": {"token"}}),
            "spec.credentials.huggingFaceToken: Secret 'hf' not found in namespace ns",
        ),
        (Observed(True, {"hf": {"HF_TOKEN"}, "auth": {"token"}}), "spec.env[X]: Secret 'hf' has no key 'OTHER'"),
        (
            Observed(True, {"hf": {"HF_TOKEN", "OTHER"}, "auth": set()}),
            "spec.gateway.authSecretRef: Secret 'auth' has no key 'token'",
        ),
        (
            Observed(True, {"hf": {"HF_TOKEN", "OTHER"}, "auth": {"token"}}, service_account_found=False),
            "spec.credentials.serviceAccountName: ServiceAccount 'puller' not found in namespace ns",
        ),
    ],
)
def test_the_first_gap_is_named(observed, expected):
    assert expected in missing_dependency("ns", references(reward_model(**FULL), "vllm-reward"), observed)


def test_a_spec_without_references_needs_only_the_runtime():
    wanted = references(reward_model(), "vllm-reward")
    assert wanted.secrets == () and wanted.service_account is None
    assert missing_dependency("ns", wanted, Observed(True)) is None
