"""A custom resource against its CRD's structural schema, as the API server checks it on create.

The API server's order, kept here: unknown fields first (with strict field validation a request that
has one fails before anything else is looked at), then nulls pruned and defaults filled, then the
schema: types, required, enums, bounds, lengths, patterns, formats, list types. Patterns are RE2, as
Go's regexp is (Python's ``re`` differs: its ``\\s`` matches more than ASCII whitespace).
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import re2

from .problems import Problem, child, declared_members, item

Schema = dict[str, Any]

# ObjectMeta's fields: a custom resource's metadata is ObjectMeta whatever its schema says.
OBJECT_META_FIELDS = frozenset(
    [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ]
)
ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata"})
UNDECLARED = "field not declared in schema"

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def type_name(value: Any) -> str:
    """The JSON type of ``value``, as the API server names it in its messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: Any, wanted: str) -> bool:
    if isinstance(value, bool):
        return wanted == "boolean"
    if wanted == "integer" and isinstance(value, float):
        return value.is_integer()  # JSON has one number type: 2.0 is an integer to the API server
    return isinstance(value, _TYPES.get(wanted, (object,)))


# ---- unknown fields ---------------------------------------------------------------------------------


def unknown_fields(document: dict[str, Any], schema: Schema) -> list[Problem]:
    """Every field the schema does not declare (what strict field validation refuses, and what the
    API server would otherwise drop without a word)."""
    found: list[Problem] = []
    properties = schema.get("properties") or {}
    for name, value in document.items():
        if name == "metadata":
            if isinstance(value, dict):
                found += [
                    Problem(child(".metadata", key), UNDECLARED) for key in value if key not in OBJECT_META_FIELDS
                ]
        elif name in properties:
            _unknown(value, properties[name], child("", name), found)
        elif name not in ROOT_FIELDS:
            found.append(Problem(child("", name), UNDECLARED))
    return found


def _unknown(value: Any, schema: Schema | None, path: str, found: list[Problem]) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = (schema or {}).get("properties") or {}
        values = (schema or {}).get("additionalProperties")
        for key, sub in value.items():
            if key in properties:
                _unknown(sub, properties[key], child(path, key), found)
            elif isinstance(values, dict):
                _unknown(sub, values, child(path, key), found)
            elif values is not True:
                # a map where the schema has a string loses every key too: the API server prunes by schema
                found.append(Problem(child(path, key), UNDECLARED))
    elif isinstance(value, list):
        items = (schema or {}).get("items")
        for index, sub in enumerate(value):
            _unknown(sub, items if isinstance(items, dict) else None, item(path, index), found)


# ---- nulls and defaults ------------------------------------------------------------------------------


def prune_nulls(value: Any, schema: Schema) -> None:
    """Drop ``null`` properties that are not nullable and have no default, in place (the API server
    does this before defaulting; a null with a default gets the default)."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key in [k for k, v in value.items() if v is None and k in properties]:
            if not properties[key].get("nullable") and "default" not in properties[key]:
                del value[key]
            elif not properties[key].get("nullable"):
                value[key] = copy.deepcopy(properties[key]["default"])
        values = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in properties:
                prune_nulls(sub, properties[key])
            elif isinstance(values, dict):
                prune_nulls(sub, values)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for sub in value:
            prune_nulls(sub, schema["items"])


# ---- the schema itself -------------------------------------------------------------------------------


def schema_problems(value: Any, schema: Schema, path: str = "") -> list[Problem]:
    """What the OpenAPI schema refuses in ``value`` (already pruned and defaulted)."""
    found: list[Problem] = []
    _check(value, schema, path, found)
    return found


def _invalid(path: str, value: Any, why: str) -> Problem:
    shown = (
        _json(value) if isinstance(value, str | int | float | bool) and value is not None else f'"{type_name(value)}"'
    )
    return Problem(path, f"Invalid value: {shown}: {why}")


def _check(value: Any, schema: Schema, path: str, found: list[Problem]) -> None:
    if value is None:
        if not schema.get("nullable") and (schema.get("type") or schema.get("x-kubernetes-int-or-string")):
            wanted = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema["type"]
            found.append(Problem(path, f'Invalid value: "null": must be of type {wanted}', blocks_rules=True))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (_has_type(value, "integer") or isinstance(value, str)):
            found.append(_type_problem(path, value, "integer,string"))
            return
    elif "type" in schema and not _has_type(value, schema["type"]):
        found.append(_type_problem(path, value, schema["type"]))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_json(v) for v in schema["enum"])
        found.append(Problem(path, f"Unsupported value: {_json(value)}: supported values: {supported}", True))
    if isinstance(value, str):
        _check_string(value, schema, path, found)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, found)
    elif isinstance(value, list):
        _check_array(value, schema, path, found)
    elif isinstance(value, dict):
        _check_object(value, schema, path, found)


def _type_problem(path: str, value: Any, wanted: str) -> Problem:
    return Problem(path, f'Invalid value: "{type_name(value)}": must be of type {wanted}', blocks_rules=True)


def _check_string(value: str, schema: Schema, path: str, found: list[Problem]) -> None:
    # lengths in characters (Go's validator counts runes)
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(Problem(path, f"Too long: may not be more than {schema['maxLength']} bytes", blocks_rules=True))
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(_invalid(path, value, f"should be at least {schema['minLength']} chars long"))
    if "pattern" in schema and not re2.search(schema["pattern"], value):
        found.append(_invalid(path, value, f"should match '{schema['pattern']}'"))
    if schema.get("format") == "date-time" and not _is_date_time(value):
        found.append(_invalid(path, value, "must be of type date-time"))


def _is_date_time(value: str) -> bool:
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value or "t" in value


def _check_number(value: float, schema: Schema, path: str, found: list[Problem]) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        # kube-openapi checks an integer against the bounds cut to integers (Go's int64(), towards zero): 0 passes
        # minimum 0.001 on the API server, so a rule that must refuse it is a CEL rule (as the clients' weights have)
        schema = {**schema, **{key: int(schema[key]) for key in ("minimum", "maximum") if key in schema}}
    if "minimum" in schema:
        if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
            found.append(_invalid(path, value, f"should be greater than {schema['minimum']}"))
        elif value < schema["minimum"]:
            found.append(_invalid(path, value, f"should be greater than or equal to {schema['minimum']}"))
    if "maximum" in schema:
        if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
            found.append(_invalid(path, value, f"should be less than {schema['maximum']}"))
        elif value > schema["maximum"]:
            found.append(_invalid(path, value, f"should be less than or equal to {schema['maximum']}"))
    if "multipleOf" in schema and value % schema["multipleOf"]:
        found.append(_invalid(path, value, f"should be a multiple of {schema['multipleOf']}"))


def _check_array(value: list, schema: Schema, path: str, found: list[Problem]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(Problem(path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items", True))
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(_invalid(path, len(value), f"should have at least {schema['minItems']} items"))
    items = schema.get("items")
    if isinstance(items, dict):
        for index, sub in enumerate(value):
            _check(sub, items, item(path, index), found)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        _check_map_list(value, schema.get("x-kubernetes-list-map-keys") or [], path, found)
    elif list_type == "set" or schema.get("uniqueItems"):
        _report_duplicates(value, value, path, found)


def _check_map_list(value: list, keys: list[str], path: str, found: list[Problem]) -> None:
    """A list-type map: items are objects, unique by their keys (the API server checks this apart
    from the schema, once the items have the right type)."""
    identities = [
        {name: sub.get(name) for name in keys if name in sub} if isinstance(sub, dict) else None for sub in value
    ]
    _report_duplicates(identities, identities, path, found)


def _report_duplicates(identities: list[Any], shown: list[Any], path: str, found: list[Problem]) -> None:
    """Each repeated identity once, at its first repeat (as the API server reports them)."""
    seen: list[Any] = []
    reported: list[Any] = []
    for index, identity in enumerate(identities):
        if identity is None:
            continue
        if identity in seen and identity not in reported:
            found.append(Problem(item(path, index), f"Duplicate value: {_json(shown[index])}"))
            reported.append(identity)
        seen.append(identity)


def _check_object(value: dict, schema: Schema, path: str, found: list[Problem]) -> None:
    for name in schema.get("required") or []:
        if name not in value:
            found.append(Problem(child(path, name), "Required value", blocks_rules=True))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.append(Problem(path, f"Too many: {len(value)}: must have at most {schema['maxProperties']} items", True))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        found.append(_invalid(path, len(value), f"should have at least {schema['minProperties']} properties"))
    # the schema's validator names a map's value with a dot (spec.nodeSelector.k); CEL with brackets
    for key, sub, sub_schema, _ in declared_members(value, schema):
        _check(sub, sub_schema, child(path, key), found)
