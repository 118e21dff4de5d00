"""The API server's verdict on a manifest, without storing it: a dry-run create (``dryRun=All``) with
strict field validation, kubectl's default; an object that exists already is dry-run applied instead.

The answer is in the offline validator's terms (``api.validation.Problem``: field path and message),
so ``reward-operator render --validate=server`` prints both alike and the differential test
(``e2e/suites/fuzz/test_validation_differential.py``) compares them field by field.
"""

from __future__ import annotations

import json
import re
from typing import Any

import urllib3
from kubernetes import client, config

from ..api.names import FIELD_MANAGER
from ..api.validation import Problem
from .objects import APPLY_PATCH, object_path, serialized

REQUEST_TIMEOUT = (5, 30)
# A strict decoding error names each unknown field in one message: unknown field "spec.serving.minReplica"
UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


class ClusterUnavailable(Exception):
    """No cluster to ask: no kubeconfig (nor in-cluster config), or the API server did not answer."""


def connect(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client for ``kubeconfig`` (else $KUBECONFIG or ~/.kube/config, else the in-cluster config)."""
    try:
        return config.new_client_from_config(config_file=kubeconfig)
    except (config.ConfigException, OSError) as error:
        if kubeconfig is None:
            try:
                config.load_incluster_config()
                return client.ApiClient()
            except config.ConfigException:
                pass
        raise ClusterUnavailable(f"no cluster to validate against: {error}") from error


def server_problems(api: client.ApiClient, document: dict[str, Any], namespace: str) -> list[Problem]:
    """What the API server refuses in ``document`` (empty: it would be admitted), created in ``namespace``
    unless the document names its own."""
    metadata = document.get("metadata") or {}
    namespace = metadata.get("namespace") or namespace
    group_version = document.get("apiVersion") or ""
    collection = object_path(group_version, document.get("kind") or "", "", namespace).rstrip("/")
    status, body = _call(api, "POST", collection, [("dryRun", "All"), ("fieldValidation", "Strict")], document)
    if status == 409 and metadata.get("name"):
        path = object_path(group_version, document["kind"], metadata["name"], namespace)
        query = [("dryRun", "All"), ("fieldValidation", "Strict"), ("fieldManager", FIELD_MANAGER), ("force", "true")]
        status, body = _call(api, "PATCH", path, query, document, APPLY_PATCH)
    if 200 <= status <= 299:
        return []
    return problems_of(status, body)


def problems_of(status: int, body: dict[str, Any]) -> list[Problem]:
    """A refusal's causes as problems: one per cause (422), per unknown field (a strict decoding 400),
    else the message as a problem of the object itself."""
    message = body.get("message") or f"the API server answered {status}"
    if status == 400 and (unknown := UNKNOWN_FIELD.findall(message)):
        return [Problem(f".{name}", "field not declared in schema") for name in unknown]
    causes = (body.get("details") or {}).get("causes") or []
    if status == 422 and causes:
        return [
            Problem(_path(cause.get("field")), cause.get("message") or cause.get("reason") or "") for cause in causes
        ]
    return [Problem("", message)]


def _path(field: str | None) -> str:
    return "" if not field or field == "<nil>" else f".{field}"


def _call(
    api: client.ApiClient,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: dict[str, Any],
    content_type: str = "application/json",
) -> tuple[int, dict[str, Any]]:
    try:
        response = api.call_api(
            *serialized(api, method, path, query, body, content_type), _request_timeout=REQUEST_TIMEOUT
        )
        response.read()
    except urllib3.exceptions.HTTPError as error:
        raise ClusterUnavailable(f"the API server did not answer: {error}") from error
    try:
        answer = json.loads(response.data or b"{}")
    except ValueError:
        answer = {"message": response.data.decode(errors="replace")}
    return response.status, answer if isinstance(answer, dict) else {}
