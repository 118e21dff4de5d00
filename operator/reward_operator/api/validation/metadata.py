"""A custom resource's metadata as the API server checks it on create: a name (a DNS subdomain),
labels and annotations of the right shape."""

from __future__ import annotations

import json
from typing import Any

import re2

from .problems import Problem, child, entry

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_QUALIFIED_NAME = r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


def metadata_problems(metadata: Any) -> list[Problem]:
    if not isinstance(metadata, dict):
        return [Problem(".metadata.name", "Required value: name or generateName is required", blocks_rules=True)]
    found: list[Problem] = []
    name = metadata.get("name")
    if not name and not metadata.get("generateName"):
        found.append(Problem(".metadata.name", "Required value: name or generateName is required", True))
    elif isinstance(name, str) and name and (len(name) > 253 or not re2.search(DNS_SUBDOMAIN, name)):
        found.append(
            Problem(
                ".metadata.name",
                f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    labels = metadata.get("labels") or {}
    if isinstance(labels, dict):
        for key, value in labels.items():
            if not _qualified(key):
                found.append(Problem(entry(".metadata.labels", key), "Invalid value: not a qualified name"))
            if not isinstance(value, str) or len(value) > 63 or not re2.search(_LABEL_VALUE, value):
                found.append(Problem(entry(".metadata.labels", key), "Invalid value: not a valid label value"))
    annotations = metadata.get("annotations") or {}
    if isinstance(annotations, dict):
        for key in annotations:
            if not _qualified(key):
                found.append(
                    Problem(child(".metadata", "annotations"), f"Invalid value: {key!r}: not a qualified name")
                )
    return found


def _qualified(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not re2.search(DNS_SUBDOMAIN, prefix)):
        return False
    return 0 < len(name) <= 63 and bool(re2.search(_QUALIFIED_NAME, name))
