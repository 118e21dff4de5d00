"""The typed views (api/types.py) name exactly the schema's fields, all the way down."""

from __future__ import annotations

import typing

import pytest

from reward_operator.api import types
from reward_operator.api.schema import REWARD_MODEL, RLHF_PIPELINE


def _typed_dict(annotation) -> type | None:
    """The TypedDict inside an annotation (NotRequired[X], list[X], X | Y), if any."""
    if typing.is_typeddict(annotation):
        return annotation
    for argument in typing.get_args(annotation):
        found = _typed_dict(argument)
        if found is not None:
            return found
    return None


def _pairs(view: type, schema: dict, path: str):
    """(path, view, schema) for this object and every nested object both describe."""
    yield path, view, schema
    hints = typing.get_type_hints(view, include_extras=True)
    for key, annotation in hints.items():
        nested_view = _typed_dict(annotation)
        nested_schema = schema.get("properties", {}).get(key, {})
        if nested_schema.get("type") == "array":
            nested_schema = nested_schema["items"]
        if nested_view is not None and "properties" in nested_schema:
            yield from _pairs(nested_view, nested_schema, f"{path}.{key}")


PAIRS = list(_pairs(types.RewardModel, REWARD_MODEL, "RewardModel")) + list(
    _pairs(types.RLHFPipeline, RLHF_PIPELINE, "RLHFPipeline")
)


@pytest.mark.parametrize(("path", "view", "schema"), PAIRS, ids=[path for path, _, _ in PAIRS])
def test_view_keys_match_the_schema(path, view, schema):
    assert set(typing.get_type_hints(view)) == set(schema["properties"]), path


@pytest.mark.parametrize(("path", "view", "schema"), PAIRS, ids=[path for path, _, _ in PAIRS])
def test_keys_always_present_are_required_or_defaulted(path, view, schema):
    """A key the view promises (not NotRequired) is required by the schema or has a default."""
    always = set()
    for name, field in schema["properties"].items():
        if name in schema.get("required", []) or "default" in field:
            always.add(name)
    assert set(view.__required_keys__) <= always | {"apiVersion", "kind", "metadata"}, path


def test_every_object_in_the_schema_has_a_view():
    covered = {path for path, _, _ in PAIRS}
    assert {"RewardModel.spec", "RewardModel.spec.model", "RewardModel.spec.gateway", "RewardModel.status"} <= covered
    assert len(PAIRS) >= 12


def test_every_pipeline_object_in_the_schema_has_a_view():
    covered = {path for path, _, _ in PAIRS}
    assert {
        "RLHFPipeline.spec.actor.model",
        "RLHFPipeline.spec.reference.model",
        "RLHFPipeline.spec.critic.serving",
        "RLHFPipeline.spec.rewards",
        "RLHFPipeline.spec.flows.bestOfN",
        "RLHFPipeline.spec.graph",
        "RLHFPipeline.status.inferenceServices",
    } <= covered
