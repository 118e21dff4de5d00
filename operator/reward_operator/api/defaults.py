"""Structural defaulting, as the API server does it, for offline rendering.

`reward-operator render` works on files that never went through an API server,
so it applies the schema's defaults itself; the cluster path gets the same
result from the API server, which reads the same schema.
"""

from __future__ import annotations

import copy
from typing import Any

from .schema import REWARD_MODEL, Schema


def apply_defaults(value: Any, schema: Schema = REWARD_MODEL) -> Any:
    """Return a copy of ``value`` with every schema default filled in."""
    value = copy.deepcopy(value)
    _fill(value, schema)
    return value


def _fill(value: Any, schema: Schema) -> None:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _fill(value[name], sub)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _fill(item, schema["items"])
