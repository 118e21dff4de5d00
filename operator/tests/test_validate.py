"""Offline validation (api.validation): what the API server would refuse, field by field, with its words.

Its agreement with the real API server over the fuzzer's specs is e2e/suites/fuzz/test_validation_differential.py;
these are the cases a user meets first."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from reward_operator.api.validation import validate
from reward_operator.api.validation.cel import evaluate, go_duration

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
REWARD_MODEL = yaml.safe_load((SAMPLES / "rewardmodel-sequence-standard.yaml").read_text())
PIPELINE = yaml.safe_load((SAMPLES / "rlhfpipeline-ppo.yaml").read_text())


def _with(document: dict, change) -> dict:
    changed = copy.deepcopy(document)
    change(changed)
    return changed


def _paths(document: dict) -> list[str]:
    return [problem.path for problem in validate(document)]


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("r*.yaml")))
def test_every_sample_is_valid(sample):
    assert validate(yaml.safe_load((SAMPLES / sample).read_text())) == []


def test_an_unknown_field_is_refused_by_its_path_and_nothing_else_is_looked_at():
    document = _with(REWARD_MODEL, lambda d: d["spec"]["serving"].update(minReplica=2, minReplicas=-1))
    assert [str(p) for p in validate(document)] == [".spec.serving.minReplica: field not declared in schema"]


def test_unknown_fields_in_lists_maps_and_metadata_are_named():
    def change(d):
        d["spec"]["model"]["maxModelLength"] = 4096
        d["spec"]["env"] = [{"name": "A", "value": "1", "valu": "typo"}]
        d["spec"]["runtime"] = {"name": "x"}  # a map where a string belongs loses its keys, as the server prunes
        d["metadata"]["label"] = {}

    assert sorted(_paths(_with(REWARD_MODEL, change))) == [
        ".metadata.label",
        ".spec.env[0].valu",
        ".spec.model.maxModelLength",
        ".spec.runtime.name",
    ]


def test_a_value_outside_the_enum_is_refused_and_the_cel_rules_are_not_run():
    problems = validate(_with(REWARD_MODEL, lambda d: d["spec"]["model"].update(kind="nonsense")))
    assert problems[0].path == ".spec.model.kind"
    assert problems[0].message.startswith('Unsupported value: "nonsense": supported values: "sequence"')
    assert problems[1].path == "" and "some validation rules were not checked" in problems[1].message


def test_a_pipeline_reward_named_by_another_key_is_refused():
    document = _with(PIPELINE, lambda d: d["spec"]["rewards"].__setitem__(0, {"model": "skywork-rm", "weight": 1}))
    assert _paths(document) == [".spec.rewards[0].model"]
    document["spec"]["rewards"][0] = {"weight": 1}
    assert ".spec.rewards[0].name" in _paths(document)


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (lambda d: d["spec"]["serving"].update(maxReplicas=0), ".spec.serving.maxReplicas", "greater than or equal"),
        (lambda d: d["spec"]["serving"].update(maxReplicas="2"), ".spec.serving.maxReplicas", "must be of type"),
        (lambda d: d["spec"]["resources"].update(cpu="lots"), ".spec.resources.cpu", "should match"),
        (lambda d: d["spec"]["resources"].update(cpu=1.5), ".spec.resources.cpu", "integer,string"),
        (lambda d: d["spec"]["model"].pop("uri"), ".spec.model.uri", "Required value"),
        (lambda d: d["spec"]["model"].update(uri="ftp://x"), ".spec.model.uri", "storage URI"),
        (lambda d: d["spec"].update(env=[{"name": "A"}, {"name": "A"}]), ".spec.env[1]", "Duplicate value"),
        (
            lambda d: d["spec"]["serving"].update(scaleDownDelay="1" * 40 + "s"),
            ".spec.serving.scaleDownDelay",
            "Too long",
        ),
        (lambda d: d["metadata"].update(name="Upper"), ".metadata.name", "RFC 1123"),
    ],
)
def test_the_schema_refuses_with_the_field_and_the_reason(change, path, words):
    problems = [p for p in validate(_with(REWARD_MODEL, change)) if p.path == path]
    assert problems and words in problems[0].message, validate(_with(REWARD_MODEL, change))


def test_a_cel_rule_refuses_with_its_message_at_its_node():
    document = _with(REWARD_MODEL, lambda d: d["spec"]["model"].update(kind="process"))
    [problem] = validate(document)
    assert problem.path == ".spec.model"
    assert "model.stepTagId is required for kind: process" in problem.message


def test_rules_see_the_defaults_and_nulls_are_pruned_first():
    # serving: null is pruned, then defaulted (Standard, 1..1): the rules on serving pass
    assert validate(_with(REWARD_MODEL, lambda d: d["spec"].update(serving=None))) == []
    # maxReplicas defaults to 1, below minReplicas 2: a rule on the defaulted object refuses it
    document = _with(REWARD_MODEL, lambda d: d["spec"].update(serving={"minReplicas": 2}))
    assert [p.path for p in validate(document)] == [".spec.serving"]


def test_an_integer_meets_a_fractional_bound_as_the_api_server_checks_it():
    """kube-openapi compares an integer with the bound cut to an integer, and CEL sees a number as a double."""
    document = _with(REWARD_MODEL, lambda d: d["spec"].update(gateway={"scheduling": {"defaultClientWeight": 0}}))
    [problem] = validate(document)
    assert problem.path == ".spec.gateway.scheduling.defaultClientWeight"
    assert "must be at least 0.001" in problem.message, "the rule, not the minimum, refuses it"
    assert evaluate("self >= 0.001", 1.0) and not evaluate("self >= 0.001", 0.0)


def test_transition_rules_are_skipped_offline():
    # serving.mode == oldSelf.mode needs a stored object: on create the API server skips it too
    assert validate(_with(REWARD_MODEL, lambda d: d["spec"]["serving"].update(mode="Knative"))) == []


def test_kubernetes_list_functions_and_gos_durations():
    assert evaluate("self.isSorted()", [10, 25, 25, 50]) and not evaluate("self.isSorted()", [50, 10])
    assert evaluate("duration(self).getMilliseconds()", "1m30.5s") == 90500
    with pytest.raises(ValueError):
        go_duration("3000000h")  # over Go's 2562047h: cel-go's duration() fails, so must this
    with pytest.raises(ValueError):
        go_duration("5")  # a number without a unit


def test_what_is_not_a_custom_resource_of_ours_is_named():
    assert [str(p) for p in validate(["a", "list"])] == ["<object>: expected an object (a mapping), got array"]
    assert _paths({"apiVersion": "serving.rlhf.dev/v1alpha1", "kind": "Rewardmodel"}) == [".kind"]
    assert _paths({"apiVersion": "v1", "kind": "ConfigMap"}) == [".apiVersion"]


def test_a_reward_token_is_a_token_models_and_the_candidate_inherits_the_stable_ones():
    """model.rewardTokenId only on kind: token; never on canary.model (one gateway scores both models)."""
    on_sequence = _with(REWARD_MODEL, lambda d: d["spec"]["model"].update(rewardTokenId=92527))
    [problem] = validate(on_sequence)
    assert (problem.path, "model.rewardTokenId applies only to kind: token" in problem.message) == (".spec.model", True)
    on_token = _with(REWARD_MODEL, lambda d: d["spec"]["model"].update(kind="token", rewardTokenId=92527))
    assert validate(on_token) == []
    assert _paths(_with(on_token, lambda d: d["spec"]["model"].update(rewardTokenId=-1))) == [
        ".spec.model.rewardTokenId"
    ]
    candidate = {"model": {"uri": "hf://org/candidate", "rewardTokenId": 7}, "mode": "shadow"}
    problems = validate(_with(on_token, lambda d: d["spec"].update(canary=candidate)))
    assert any("canary.model.rewardTokenId may not be set" in problem.message for problem in problems), problems
