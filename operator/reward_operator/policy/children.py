"""Whether a child as stored still holds what we would apply (so the apply can be skipped), and whether
a change of it is one a reconcile can act on."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .readiness import model_failure


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


# Status fields that only say when something else changed: a reconcile decides nothing from them.
_TIMESTAMPS = frozenset({"lastTransitionTime", "lastUpdateTime", "lastProbeTime"})


def _without_timestamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_timestamps(v) for key, v in value.items() if key not in _TIMESTAMPS}
    if isinstance(value, list):
        return [_without_timestamps(v) for v in value]
    return value


def read_digest(child: dict[str, Any]) -> str:
    """A digest of every part of a stored child that a reconcile can read: its labels, annotations,
    owner references, deletion, spec and status (less timestamps, and of KServe's modelStatus only a
    failure). Two copies with the same digest lead any reconcile to the same decisions, so the second
    needs none. What it leaves out are fields only others read: resourceVersion, managedFields,
    finalizers (KServe adds its own to every InferenceService, an event of its own at each one's
    creation), and modelStatus's states and copies (KServe's last write to each InferenceService, at
    a thousand of them minutes after all were Ready: make bench-operator)."""
    metadata = child.get("metadata") or {}
    read = {
        "labels": metadata.get("labels"),
        "annotations": metadata.get("annotations"),
        "ownerReferences": metadata.get("ownerReferences"),
        "deletionTimestamp": metadata.get("deletionTimestamp"),
        "spec": child.get("spec"),
        "status": _without_timestamps({k: v for k, v in (child.get("status") or {}).items() if k != "modelStatus"}),
        "modelFailure": model_failure(child),
    }
    encoded = json.dumps(read, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()
