"""The HTTP client's answer rule, against the real gateway process and the fake vLLM."""

from __future__ import annotations

import asyncio
import socket

import pytest
from reward_gateway_client.http import (
    DEAD_GATEWAY_S,
    AsyncRewardClient,
    GatewayError,
    GatewaySettings,
    RewardClient,
    async_http_client,
    http_client,
)

from reward_testing.fake_vllm import conversation_text, logit
from reward_testing.ports import free_port

ITEM = {"prompt": "p", "response": "r"}
PAIR = conversation_text([{"role": "user", "content": "p"}, {"role": "assistant", "content": "r"}])


def test_a_502_is_retried_since_scoring_has_no_side_effects(gateway, backend):
    """vLLM cut its answer short: the gateway answers 502 and does not send the call again; the
    client sends the whole request again after its back-off."""
    running = gateway()
    backend.misbehaviour = "cut"
    waits: list[float] = []

    def vllm_recovers(wait: float) -> None:
        waits.append(wait)
        backend.misbehaviour = None

    client = RewardClient(GatewaySettings(url=running.url), sleep=vllm_recovers)
    assert client.score([ITEM]) == pytest.approx([logit(PAIR)])
    assert (running.requests("rewards", 502), running.requests("rewards", 200)) == (1, 1)
    assert waits == [1.0]  # no Retry-After on a 502: the doubling back-off's first step


def test_the_async_client_waits_what_retry_after_asks(gateway, backend):
    backend.healthy = False
    running = gateway(scale_from_zero_timeout_seconds="0.2")
    waits: list[float] = []

    async def predictor_up(wait: float) -> None:
        waits.append(wait)
        backend.healthy = True

    client = AsyncRewardClient(GatewaySettings(url=running.url, max_backoff_s=5), sleep=predictor_up)
    assert asyncio.run(client.score([ITEM])) == pytest.approx([logit(PAIR)])
    assert waits == [5]  # the gateway's Retry-After (10 s), capped by max_backoff_s


def test_an_unreachable_gateway_is_retried_then_reported():
    waits: list[float] = []
    client = RewardClient(GatewaySettings(url=f"127.0.0.1:{free_port()}", attempts=3), sleep=waits.append)
    with pytest.raises(GatewayError) as raised:
        client.score([ITEM])
    assert raised.value.status is None and raised.value.attempts == 3
    assert waits == [1.0, 2.0]


def test_a_wrong_model_is_a_404_with_the_gateways_message(gateway, backend):
    running = gateway()
    with pytest.raises(GatewayError) as raised:
        RewardClient(GatewaySettings(url=running.url, model="other")).score([ITEM])
    assert raised.value.status == 404 and "this gateway serves 'rm'" in raised.value.message
    assert RewardClient(GatewaySettings(url=running.url, model="rm")).score([ITEM]) == pytest.approx([logit(PAIR)])


def _probes(response) -> tuple[int, int]:
    """Keep-alive on the connection a response came on, and how long a silent peer would last on it."""
    sock = response.extensions["network_stream"].get_extra_info("socket")
    idle, interval, probes = (
        sock.getsockopt(socket.IPPROTO_TCP, option)
        for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
    )
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE), idle + interval * probes


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="Linux's per-socket keep-alive options")
def test_both_clients_probe_the_gateway_so_a_vanished_pod_is_noticed_within_the_bound(gateway, backend):
    """A gateway pod gone without a reset sends nothing, and neither does a request waiting for its answer:
    the kernel's keep-alive probes end the connection (a TransportError, retried) DEAD_GATEWAY_S after the
    last packet instead of the read timeout (docs/trainers.md counts on 20 s)."""
    running = gateway()
    with http_client(200) as http:
        assert _probes(http.get(running.url + "/v1/models")) == (1, DEAD_GATEWAY_S)

    async def asynchronous() -> tuple[int, int]:
        async with async_http_client(200) as http:
            return _probes(await http.get(running.url + "/v1/models"))

    assert asyncio.run(asynchronous()) == (1, DEAD_GATEWAY_S) and DEAD_GATEWAY_S <= 20


def test_no_url_says_how_to_give_one(monkeypatch):
    monkeypatch.delenv("REWARD_GATEWAY_URL", raising=False)
    with pytest.raises(ValueError, match="REWARD_GATEWAY_URL"):
        RewardClient(GatewaySettings()).score([ITEM])
    assert RewardClient(GatewaySettings()).score([]) == []  # nothing to score, nothing sent


def test_the_client_keeps_the_identity_of_the_model_that_scored(gateway, backend):
    running = gateway(
        model_revision="s3://models/rm/v3", model_digest="sha256:abc", model_generation="7", coalesce="true"
    )
    client = RewardClient(GatewaySettings(url=running.url, client="job-a"))
    assert client.score([ITEM]) == pytest.approx([logit(PAIR)])
    assert client.last_identity == {
        "model": "rm",
        "revision": "s3://models/rm/v3",
        "digest": "sha256:abc",
        "generation": 7,
        "role": "stable",
    }
    async_client = AsyncRewardClient(GatewaySettings(url=running.url))
    assert asyncio.run(async_client.score([ITEM])) == pytest.approx([logit(PAIR)])
    assert async_client.last_identity["revision"] == "s3://models/rm/v3"


def test_a_failure_is_an_error_with_a_message_never_a_number(gateway, backend):
    running = gateway()
    client = RewardClient(GatewaySettings(url=running.url))
    with pytest.raises(GatewayError) as failure:
        client.score([{"prompt": "p"}])  # neither response nor steps
    assert failure.value.status == 400 and str(failure.value)


def test_the_clients_errors_cross_processes_as_they_were_raised():
    """verl's Ray workers pickle a reward function's exception to the driver: it must arrive whole."""
    import pickle

    from reward_gateway_client.http import ItemFailed, ItemFailure

    whole = pickle.loads(pickle.dumps(GatewayError(503, "vLLM is away", 8)))
    assert (whole.status, whole.message, whole.attempts) == (503, "vLLM is away", 8)
    failure = ItemFailure(3, "too_long", "over the context", retry=False)
    item = pickle.loads(pickle.dumps(ItemFailed(failure)))
    assert item.failure == failure and "too_long" in str(item)
