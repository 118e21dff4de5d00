"""The API client, and API errors in the operator's own terms."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


class ClusterError(Exception):
    """An API call failed in a way worth retrying (5xx, throttling, conflicts, a refused object)."""

    def __init__(self, status: int | None, reason: str, message: str):
        super().__init__(f"API error {status}: {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class Refused(ClusterError):
    """The API server (or an admission webhook) refused the object: the spec must change, not the timing."""


def _message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message") or str(error.reason)
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise API errors as ClusterError, or Refused for a 4xx that retrying cannot fix."""
    try:
        yield
    except ApiException as error:
        transient = error.status is None or error.status >= 500 or error.status in (409, 429)
        kind = ClusterError if transient else Refused
        raise kind(error.status, str(error.reason), _message(error)) from error


def is_not_found(error: ApiException) -> bool:
    return error.status == 404


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api_client())
