"""The API client: no call waits forever, and a failed connection is a calm retry."""

from __future__ import annotations

import socket

import pytest
from kubernetes import client

from reward_operator.cluster import ClusterError
from reward_operator.cluster import client as cluster_client


@pytest.fixture
def silent_api_server():
    """A socket that takes connections and never answers: a connection that died without a word."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.timeout(30)
def test_a_call_to_a_silent_api_server_ends_as_a_retryable_error(silent_api_server, monkeypatch):
    monkeypatch.setattr(cluster_client, "REQUEST_TIMEOUT", (1, 0.2))
    configuration = client.Configuration(host=silent_api_server)
    configuration.retries = 0
    api = client.CustomObjectsApi(cluster_client._TimedApiClient(configuration))
    with pytest.raises(ClusterError) as raised, cluster_client.translated():
        api.get_namespaced_custom_object("serving.rlhf.dev", "v1alpha1", "ns", "rewardmodels", "rm")
    assert raised.value.status is None and "Timeout" in raised.value.reason
    assert not isinstance(raised.value, cluster_client.Refused), "a timeout is worth a retry"


def test_a_call_may_still_name_its_own_timeout(monkeypatch):
    seen = []
    monkeypatch.setattr(client.ApiClient, "call_api", lambda self, *a, _request_timeout=None, **k: seen.append(
        _request_timeout))  # fmt: skip
    api = cluster_client._TimedApiClient(client.Configuration(host="http://127.0.0.1:1"))
    api.call_api("GET", "/x")
    api.call_api("GET", "/x", _request_timeout=300)
    assert seen == [cluster_client.REQUEST_TIMEOUT, 300]
