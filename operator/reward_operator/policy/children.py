"""Whether a child as stored still holds what we would apply (so the apply can be skipped)."""

from __future__ import annotations

from typing import Any


def _holds(stored: Any, wanted: Any) -> bool:
    """Every field of ``wanted`` is in ``stored`` with the same value (lists item by item)."""
    if isinstance(wanted, dict):
        return isinstance(stored, dict) and all(key in stored and _holds(stored[key], v) for key, v in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(wanted)
            and all(_holds(s, w) for s, w in zip(stored, wanted, strict=True))
        )
    return bool(stored == wanted)


def holds(stored: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """True when ``stored`` carries every field of ``manifest``: its labels, annotations, owner
    references and spec. Fields others added (a webhook's defaults, status) do not matter; a value
    stored in another form than we render it (a quantity normalised) counts as changed, which costs
    only an apply that changes nothing."""
    metadata = {key: value for key, value in manifest["metadata"].items() if key not in ("name", "namespace")}
    wanted = {"metadata": metadata, **{key: value for key, value in manifest.items() if key not in ("metadata",)}}
    return _holds(stored, wanted)
