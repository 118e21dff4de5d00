"""Requests held while the predictor is at zero: answered once vLLM comes up, bounded, counted.

The predictor at zero and coming up: the ``predictor`` fixture (conftest.py).
"""

from __future__ import annotations

import threading

import httpx

from reward_testing.fake_vllm import logit
from reward_testing.gateway_process import retry_later_error
from reward_testing.waiting import wait_until


class Sent:
    """A request sent from a thread of its own: it is held, so it does not return soon."""

    def __init__(self, client: httpx.Client, path: str, body: dict):
        self.answer: httpx.Response | None = None
        self.thread = threading.Thread(target=self._send, args=(client, path, body), daemon=True)
        self.thread.start()

    def _send(self, client: httpx.Client, path: str, body: dict) -> None:
        self.answer = client.post(path, json=body)

    def result(self, timeout: float = 30) -> httpx.Response:
        self.thread.join(timeout)
        assert self.answer is not None, "the held request was not answered"
        return self.answer


def _held(gateway: httpx.Client, count: int) -> bool:
    return gateway.gateway.load.held == count


def test_a_request_held_at_zero_is_answered_once_vllm_comes_up(start_gateway, predictor):
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="60")
    first = Sent(gateway, "/v1/rewards", {"items": [{"text": "a", "group": "g"}, {"text": "b", "group": "g"}]})
    second = Sent(gateway, "/get_reward", {"query": ["c"]})
    wait_until("both requests held", lambda: _held(gateway, 2), timeout=10, interval=0.05)
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_held_requests{model="rm"} 2.0' in metrics
    assert gateway.gateway.load.items == 3  # what the autoscaler reads: the held items too

    fake = predictor()
    assert first.result().json()["rewards"] == [logit("a"), logit("b")]
    assert second.result().json()["rewards"] == [logit("c")]
    assert len(fake.calls) == 2  # one call per request: the group of two went together
    assert gateway.gateway.load.held == 0 and gateway.gateway.load.items == 0
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_held_requests{model="rm"} 0.0' in metrics
    assert 'reward_gateway_hold_duration_seconds_count{model="rm"} 2.0' in metrics
    assert 'reward_gateway_upstream_errors_total{model="rm",reason="connect"} 0.0' in metrics


def test_a_request_of_many_calls_is_held_once(start_gateway, predictor):
    """Three groups are three calls to vLLM, all refused: one held request, not three."""
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="60", max_held_requests="1")
    items = [{"text": text, "group": text} for text in ("x", "y", "z")]
    held = Sent(gateway, "/v1/rewards", {"items": items})
    wait_until("the request held", lambda: _held(gateway, 1), timeout=10, interval=0.05)
    predictor()
    answer = held.result()
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == [logit(text) for text in ("x", "y", "z")]


def test_over_the_bound_a_request_is_answered_503_at_once(start_gateway, predictor):
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="60", max_held_requests="2")
    held = [Sent(gateway, "/get_reward", {"query": [text]}) for text in ("a", "b")]
    wait_until("two requests held", lambda: _held(gateway, 2), timeout=10, interval=0.05)

    refused = gateway.post("/get_reward", json={"query": ["c"]})
    assert "holds 2 requests" in retry_later_error(refused)
    metrics = gateway.get("/metrics").text
    assert 'reward_gateway_hold_refused_total{model="rm"} 1.0' in metrics
    assert 'reward_gateway_requests_total{code="503",model="rm",route="get_reward"} 1.0' in metrics

    predictor()
    assert [sent.result().status_code for sent in held] == [200, 200]
    # room again: the next one goes straight through
    assert gateway.post("/get_reward", json={"query": ["c"]}).json()["rewards"] == [logit("c")]


def test_held_calls_leave_their_upstream_slots_free(start_gateway, predictor):
    """One call to vLLM at a time, three requests held: a held call is not in flight, so it
    holds no slot, and the bound on held requests is what limits them."""
    gateway = start_gateway(
        upstream=predictor.url, scale_from_zero_timeout_seconds="60", max_concurrency="1", max_held_requests="3"
    )
    held = [Sent(gateway, "/get_reward", {"query": [text]}) for text in ("a", "b", "c")]
    wait_until("three requests held", lambda: _held(gateway, 3), timeout=10, interval=0.05)
    predictor()
    assert [sent.result().json()["rewards"] for sent in held] == [[logit(text)] for text in ("a", "b", "c")]


def test_held_calls_go_as_soon_as_vllm_takes_connections(start_gateway, predictor, monkeypatch):
    """A probe tells them all; they make no attempts of their own meanwhile. Were they to
    retry on their own (30 s apart here), the 10 s this test waits would not do."""
    monkeypatch.setattr("reward_gateway.upstream.client.RETRY_PAUSE_S", 30.0)
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="60")
    held = [Sent(gateway, "/get_reward", {"query": [text]}) for text in ("a", "b")]
    wait_until("two requests held", lambda: _held(gateway, 2), timeout=10, interval=0.05)
    predictor()
    assert [sent.result(timeout=10).json()["rewards"] for sent in held] == [[logit("a")], [logit("b")]]


def test_a_hold_ends_with_503_when_the_wait_is_spent(start_gateway, predictor):
    gateway = start_gateway(upstream=predictor.url, scale_from_zero_timeout_seconds="0.5")
    answer = gateway.post("/get_reward", json={"query": ["a"]})
    assert answer.status_code == 503 and "retry-after" in answer.headers
    assert gateway.gateway.load.held == 0
    assert 'reward_gateway_hold_duration_seconds_count{model="rm"} 1.0' in gateway.get("/metrics").text


def test_a_loading_vllm_holds_requests_too(start_gateway, backend):
    """vLLM's own 503 while it loads: held like a refused connection, answered once it is ready."""
    backend.healthy = False
    gateway = start_gateway(scale_from_zero_timeout_seconds="60")
    held = Sent(gateway, "/get_reward", {"query": ["a"]})
    wait_until("the request held", lambda: _held(gateway, 1), timeout=10, interval=0.05)
    backend.healthy = True
    assert held.result().json()["rewards"] == [logit("a")]
