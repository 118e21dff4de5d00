"""Offline validation of RewardModels and RLHFPipelines, as the API server validates them on create.

``validate(document)`` is a pure function from a manifest to its problems (field path and message):
the CRD's own OpenAPI schema (read from the generated CRDs, :func:`reward_operator.api.crd.all_crds`,
not from the schema modules) and its CEL rules, in the API server's order:

1. fields the schema does not declare (strict field validation, kubectl's default, refuses the
   request on these alone);
2. nulls pruned and defaults filled (``api/defaults.py``), status dropped (a create never stores it);
3. metadata, then the schema (types, required, enums, bounds, lengths, patterns, list types);
4. the CEL rules, unless step 3 found an error that makes them meaningless (a wrong type, a missing
   required field, a value outside an enum, too long, too many items), as the API server skips them.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from .. import GROUP
from ..defaults import apply_defaults
from .cel import rule_problems
from .metadata import metadata_problems
from .problems import Problem
from .structural import Schema, prune_nulls, schema_problems, type_name, unknown_fields

__all__ = ["RULES_SKIPPED", "Problem", "known_kinds", "validate"]

RULES_SKIPPED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)


@functools.cache
def _schemas() -> dict[tuple[str, str], Schema]:
    from ..crd import all_crds  # the generated CRDs: what `make crds` writes to crds/

    schemas = {}
    for crd in all_crds().values():
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"][
                    "openAPIV3Schema"
                ]
    return schemas


def known_kinds() -> list[tuple[str, str]]:
    """(apiVersion, kind) of every kind this validates."""
    return sorted(_schemas())


def validate(document: Any) -> list[Problem]:
    """Everything the API server would refuse in ``document`` on create (empty: it would be admitted)."""
    if not isinstance(document, dict):
        return [Problem("", f"expected an object (a mapping), got {type_name(document)}")]
    api_version, kind = document.get("apiVersion"), document.get("kind")
    schema = _schemas().get((api_version, kind))
    if schema is None:
        return [_unknown_kind(api_version, kind)]
    if unknown := unknown_fields(document, schema):
        return unknown
    obj = copy.deepcopy(document)
    prune_nulls(obj, schema)
    obj = apply_defaults(obj, schema)
    obj.pop("status", None)
    metadata = obj.pop("metadata", None)
    problems = metadata_problems(metadata) + schema_problems(obj, schema)
    if any(problem.blocks_rules for problem in problems):
        return [*problems, Problem("", RULES_SKIPPED)]
    # CEL sees only the name and generateName of an object's metadata
    visible = {key: metadata[key] for key in ("name", "generateName") if key in (metadata or {})}
    return problems + rule_problems({**obj, "metadata": visible}, schema)


def _unknown_kind(api_version: Any, kind: Any) -> Problem:
    known = ", ".join(f"{k} ({v})" for v, k in known_kinds())
    if not isinstance(api_version, str) or not api_version.startswith(f"{GROUP}/"):
        return Problem(".apiVersion", f"Unsupported value: {api_version!r}: expected {GROUP}/<version>; known: {known}")
    return Problem(".kind", f"Unsupported value: {kind!r} in {api_version}: known: {known}")
