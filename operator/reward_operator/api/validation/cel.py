"""The CRD's CEL rules (``x-kubernetes-validations``), evaluated as the API server evaluates them.

Every rule runs on each value its node holds (each item of a list, each value of a map), with
``self`` bound to that value, after defaulting. Transition rules (those that read ``oldSelf``) need
the stored object and are skipped: offline there is none, as on a create.

The CEL runtime is cel-python (``celpy``, pure Python, RE2 for ``matches`` as cel-go). On top of CEL's
standard functions it gets those of Kubernetes' libraries the rules use, and ``duration()`` with
Go's range (``time.ParseDuration``, which cel-go calls, refuses more than about 292 years).
"""

from __future__ import annotations

import functools
import itertools
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import celpy
from celpy import celtypes

from .problems import Problem, child, declared_members, entry, item
from .structural import Schema, type_name

TRANSITION = re.compile(r"\boldSelf\b")

# time.ParseDuration's units in nanoseconds, and its bound (an int64 of nanoseconds)
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_MAX_NANOS = 2**63 - 1


def go_duration(text: celtypes.Value) -> celtypes.DurationType:
    """``duration(string)`` as cel-go has it: Go's syntax ("1h30m", "1.5s", "-2m") and Go's range."""
    if isinstance(text, celtypes.DurationType):
        return text
    value = str(text)
    sign, body = (-1, value[1:]) if value[:1] == "-" else (1, value[1:] if value[:1] == "+" else value)
    if body == "0":
        return celtypes.DurationType(0)
    nanos = Decimal(0)
    position = 0
    for match in _GO_DURATION.finditer(body):
        if match.start() != position or match.group(1) in ("", "."):
            raise ValueError(f"invalid duration {value!r}")
        try:
            nanos += Decimal(match.group(1)) * _UNITS[match.group(2)]
        except InvalidOperation as error:
            raise ValueError(f"invalid duration {value!r}") from error
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f"invalid duration {value!r}")
    whole = int(nanos)
    if whole > _MAX_NANOS:
        raise ValueError(f"invalid duration {value!r}")
    return celtypes.DurationType(seconds=sign * (whole // 10**9), nanos=sign * (whole % 10**9))


def is_sorted(values: celtypes.ListType) -> celtypes.BoolType:
    """Kubernetes' list library: ``list.isSorted()``."""
    items = list(values)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


FUNCTIONS = {"duration": go_duration, "isSorted": is_sorted}


@functools.cache
def _program(rule: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule), functions=FUNCTIONS)


def evaluate(rule: str, value: Any) -> Any:
    """The rule's result for ``self`` = ``value`` (plain JSON data); raises on an evaluation error."""
    return _program(rule).evaluate({"self": celpy.json_to_cel(value)})


def rule_problems(value: Any, schema: Schema, path: str = "") -> list[Problem]:
    """Every CEL rule of ``schema`` that ``value`` breaks, with the rule's message."""
    found: list[Problem] = []
    _walk(value, schema, path, found)
    return found


def _walk(value: Any, schema: Schema, path: str, found: list[Problem]) -> None:
    if value is None:
        return
    rules = [rule for rule in schema.get("x-kubernetes-validations") or [] if not TRANSITION.search(rule["rule"])]
    activation = {"self": celpy.json_to_cel(_typed(value, schema))} if rules else {}  # once for all the node's rules
    for rule in rules:
        problem = _check(rule, activation, value, path)
        if problem is not None:
            found.append(problem)
    if isinstance(value, dict):
        for key, sub, sub_schema, in_map in declared_members(value, schema):
            _walk(sub, sub_schema, entry(path, key) if in_map else child(path, key), found)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, sub in enumerate(value):
            _walk(sub, schema["items"], item(path, index), found)


def _typed(value: Any, schema: Schema) -> Any:
    """``value`` with CEL's types as the API server gives them: an integer where the schema says number is a
    double (so ``self >= 0.001`` compares two doubles, as in cel-go, instead of failing on an int)."""
    if isinstance(value, dict):
        properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        return {
            key: _typed(sub, properties.get(key) or (extra if isinstance(extra, dict) else {}))
            for key, sub in value.items()
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_typed(sub, schema["items"]) for sub in value]
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _check(rule: dict[str, Any], activation: dict[str, Any], value: Any, path: str) -> Problem | None:
    at = path + rule.get("fieldPath", "")
    shown = type_name(value)
    try:
        passed = _program(rule["rule"]).evaluate(activation)
    except (celpy.CELEvalError, ValueError, TypeError, KeyError, IndexError) as error:
        return Problem(at, f'Invalid value: "{shown}": {_reason(error)} evaluating rule: {rule["rule"]}')
    if isinstance(passed, celpy.CELEvalError):
        return Problem(at, f'Invalid value: "{shown}": {_reason(passed)} evaluating rule: {rule["rule"]}')
    if passed:
        return None
    return Problem(at, f'Invalid value: "{shown}": {_message(rule, value)}')


def _message(rule: dict[str, Any], value: Any) -> str:
    if "messageExpression" in rule:
        try:
            text = evaluate(rule["messageExpression"], value)
        except (celpy.CELEvalError, ValueError, TypeError, KeyError, IndexError):
            text = None
        if isinstance(text, str) and text.strip():
            return str(text)
    return rule.get("message") or f"failed rule: {rule['rule']}"


def _reason(error: Exception) -> str:
    if isinstance(error, celpy.CELEvalError) and error.args:
        return str(error.args[0])
    return str(error)
