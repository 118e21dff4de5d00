"""A problem found in a document: the field it is about and what is wrong, in the API server's words."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One refusal reason. ``path`` is kubectl's field path (``.spec.env[0].name``, ``.spec.nodeSelector[k]``;
    ``""`` for the object itself, where the API server writes ``<nil>``)."""

    path: str
    message: str
    # The API server runs no CEL rule on an object with an error of these kinds (a wrong type, a required
    # field missing, a value outside an enum, too long, too many items): they make rules meaningless.
    blocks_rules: bool = False

    def __str__(self) -> str:
        return f"{self.path or '<object>'}: {self.message}"


def child(path: str, name: str) -> str:
    """The path of an object's property."""
    return f"{path}.{name}"


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def entry(path: str, key: str) -> str:
    """A map value's path as the API server writes it for a CEL rule (``spec.nodeSelector[kubernetes.io/os]``)."""
    return f"{path}[{key}]"


def declared_members(value: dict, schema: dict) -> Iterator[tuple[str, Any, dict, bool]]:
    """Each (key, value, its schema, whether it is a map's value) of an object that the schema declares: its
    properties, or the values of a map (``additionalProperties``). Undeclared keys are reported elsewhere."""
    properties = schema.get("properties") or {}
    values = schema.get("additionalProperties")
    for key, sub in value.items():
        if key in properties:
            yield key, sub, properties[key], False
        elif isinstance(values, dict):
            yield key, sub, values, True
