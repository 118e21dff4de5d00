"""Small helpers for tests that talk to a cluster."""

from __future__ import annotations

import json

import yaml


def get_json(cluster, *args: str) -> dict | None:
    """`kubectl get ... -o json`, or None when it is not there."""
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(obj: dict | None, type_: str = "Ready") -> dict | None:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item
    return None


def server_dry_run(cluster, docs: list[dict], namespace: str | None = None) -> str:
    """CRDs and Namespaces for real (nothing else could be checked against them), the rest dry-run.

    --force-conflicts: earlier tests of the session may have installed the same CRDs
    with helm, as a user switching install methods would have.
    """
    first = [doc for doc in docs if doc["kind"] in ("CustomResourceDefinition", "Namespace")]
    if first:
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", "-",
            input=yaml.safe_dump_all(first),
        )  # fmt: skip
    scope = ["-n", namespace] if namespace else []
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "--field-manager=e2e", *scope, "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout
    return result.stdout
