"""Controller policy with the API calls replaced (unit level; the real thing
runs in e2e/tests/test_rewardmodel_operator.py)."""

from __future__ import annotations

import logging

import pytest

from reward_operator import kube, status
from reward_operator.api.defaults import apply_defaults
from reward_operator.controllers import rewardmodel

LOG = logging.getLogger("test")


def reward_model(**spec) -> dict:
    return apply_defaults(
        {
            "apiVersion": "serving.rlhf.dev/v1alpha1",
            "kind": "RewardModel",
            "metadata": {"name": "rm", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"model": {"uri": "hf://org/rm"}, **spec},
        }
    )


@pytest.fixture
def fake_cluster(monkeypatch):
    """A fake cluster: which runtimes, secrets and service accounts exist."""
    state = {"runtimes": {"vllm-reward"}, "secrets": {"hf": {"HF_TOKEN"}}, "accounts": {"puller"}}
    monkeypatch.setattr(
        kube,
        "get_cluster",
        lambda api_version, kind, name: {"metadata": {"name": name}} if name in state["runtimes"] else None,
    )
    monkeypatch.setattr(kube, "get_namespaced", lambda *args: None)
    monkeypatch.setattr(kube, "secret_keys", lambda namespace, name: state["secrets"].get(name))
    monkeypatch.setattr(kube, "service_account_exists", lambda namespace, name: name in state["accounts"])
    return state


def test_all_dependencies_present(fake_cluster):
    rm = reward_model(
        credentials={"huggingFaceToken": {"name": "hf", "key": "HF_TOKEN"}, "serviceAccountName": "puller"}
    )
    assert rewardmodel._missing_dependencies(rm) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"runtime": "nope"}, "no ClusterServingRuntime"),
        ({"credentials": {"huggingFaceToken": {"name": "absent", "key": "HF_TOKEN"}}}, "Secret 'absent' not found"),
        ({"credentials": {"huggingFaceToken": {"name": "hf", "key": "OTHER"}}}, "has no key 'OTHER'"),
        (
            {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]},
            "spec.env[X]: Secret 'absent'",
        ),
        ({"credentials": {"serviceAccountName": "ghost"}}, "ServiceAccount 'ghost' not found"),
    ],
)
def test_missing_dependencies_are_named(fake_cluster, spec, expected):
    assert expected in rewardmodel._missing_dependencies(reward_model(**spec))


def test_status_written_once_and_event_only_on_transition(monkeypatch):
    writes, events = [], []
    monkeypatch.setattr(kube, "patch_status", lambda *args: writes.append(args[-1]))
    monkeypatch.setattr(kube, "post_event", lambda owner, kind, reason, message: events.append((kind, reason)))
    rm = reward_model()
    ready = status.Condition("Ready", "False", status.INVALID_SPEC, "runtime missing")

    rewardmodel._write_status(rm, ready, None, None, LOG)
    assert len(writes) == 1 and events == [("Warning", "InvalidSpec")]

    rm["status"] = writes[0]
    rewardmodel._write_status(rm, ready, None, None, LOG)
    assert len(writes) == 1, "an unchanged status is not written again"
    assert len(events) == 1, "no second event without a transition"


def test_stale_status_fields_are_cleared(monkeypatch):
    writes = []
    monkeypatch.setattr(kube, "patch_status", lambda *args: writes.append(args[-1]))
    monkeypatch.setattr(kube, "post_event", lambda *args: None)
    rm = reward_model()
    rm["status"] = {"url": "http://old", "observedGeneration": 1, "conditions": []}
    rewardmodel._write_status(rm, status.Condition("Ready", "False", status.INVALID_SPEC, "x"), None, None, LOG)
    assert writes[0]["url"] is None
