"""The API client, and API errors in the operator's own terms."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

# (connect, read) seconds for every API call. Without a read timeout a request sent on a kept-alive
# connection that silently died waits forever, holding its object's lock (make chaos: the stalled
# watch). 30 s leaves room for an admission webhook (KServe's time out after 10 s) on a busy server.
REQUEST_TIMEOUT = (5, 30)


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
    """Raise API errors as ClusterError, or Refused for a 4xx that retrying cannot fix; a connection
    that failed or timed out (the API server restarting) is a ClusterError with no status."""
    try:
        yield
    except ApiException as error:
        transient = error.status is None or error.status >= 500 or error.status in (409, 429)
        kind = ClusterError if transient else Refused
        raise kind(error.status, str(error.reason), _message(error)) from error
    except urllib3.exceptions.HTTPError as error:
        # urllib3 wraps the failure of the last try (a read timeout, a refused connection) in MaxRetryError
        cause = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason else error
        raise ClusterError(None, type(cause).__name__, str(cause)) from error


def is_not_found(error: ApiException) -> bool:
    return error.status == 404


class _TimedApiClient(client.ApiClient):
    """An ApiClient whose every call has REQUEST_TIMEOUT unless the call names its own."""

    def call_api(self, *args, _request_timeout=None, **kwargs):  # type: ignore[no-untyped-def]
        return super().call_api(*args, _request_timeout=_request_timeout or REQUEST_TIMEOUT, **kwargs)


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return _TimedApiClient()


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api_client())
