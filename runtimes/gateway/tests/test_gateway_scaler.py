"""KEDA's external scaler served by the gateway: what IsActive, StreamIsActive,
GetMetricSpec and GetMetrics answer, over real gRPC, alone and across replicas.

The calls are the ones KEDA's external-push scaler makes (a ScaledObjectRef with
the trigger's metadata); e2e/suites/keda/test_keda.py has KEDA itself make them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from reward_gateway.config.gateway import ConfigError, load_config
from reward_gateway.scale.scaler import MESSAGES, stub
from reward_testing.fake_vllm import logit
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

REF = MESSAGES["ScaledObjectRef"](name="rm-predictor", namespace="ns", scalerMetadata={"rewardModel": "rm"})


class ScalerClient:
    """KEDA's side of the protocol, over a real channel."""

    def __init__(self, port: int):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def active(self) -> bool:
        return stub(self.channel, "IsActive")(REF, timeout=10).result

    def metric(self, name: str = "inflight-items") -> float:
        request = MESSAGES["GetMetricsRequest"](scaledObjectRef=REF, metricName=name)
        (value,) = stub(self.channel, "GetMetrics")(request, timeout=10).metricValues
        assert value.metricName == name
        return value.metricValueFloat

    def spec(self) -> list[tuple[str, float]]:
        answer = stub(self.channel, "GetMetricSpec")(REF, timeout=10)
        return [(spec.metricName, spec.targetSizeFloat) for spec in answer.metricSpecs]

    def stream(self) -> Iterator:
        return stub(self.channel, "StreamIsActive")(REF, timeout=30)


@pytest.fixture
def scaler_client():
    clients: list[ScalerClient] = []

    def connect(port: int) -> ScalerClient:
        clients.append(ScalerClient(port))
        return clients[-1]

    yield connect
    for client in clients:
        client.channel.close()


def _send_in_thread(gateway, body: dict) -> threading.Thread:
    thread = threading.Thread(target=gateway.post, args=("/v1/rewards",), kwargs={"json": body}, daemon=True)
    thread.start()
    return thread


def test_metric_spec_and_an_idle_gateway(start_gateway, scaler_client):
    port = free_port()
    start_gateway(scaler_port=str(port), scaler_target="32")
    scaler = scaler_client(port)
    assert scaler.spec() == [("inflight-items", 32.0)]
    assert scaler.active() is False  # no request yet: KEDA may keep the predictor at zero
    assert scaler.metric() == 0


def test_held_requests_make_it_active_and_count_in_the_metric(start_gateway, predictor, scaler_client):
    port = free_port()
    gateway = start_gateway(upstream=predictor.url, scaler_port=str(port), scale_from_zero_timeout_seconds="60")
    scaler = scaler_client(port)
    _send_in_thread(gateway, {"items": [{"text": "a"}, {"text": "b"}, {"text": "c"}]})
    _send_in_thread(gateway, {"items": [{"text": "d"}]})
    wait_until("two requests held", lambda: gateway.gateway.load.held == 2, timeout=10, interval=0.05)
    assert scaler.active() is True
    assert scaler.metric() == 4  # items, the held ones included


def test_the_metric_can_count_requests(start_gateway, predictor, scaler_client):
    port = free_port()
    gateway = start_gateway(
        upstream=predictor.url,
        scaler_port=str(port),
        scaler_metric="requests",
        scale_from_zero_timeout_seconds="60",
    )
    scaler = scaler_client(port)
    assert scaler.spec() == [("inflight-requests", 256.0)]
    _send_in_thread(gateway, {"items": [{"text": "a"}, {"text": "b"}]})
    wait_until("the request held", lambda: gateway.gateway.load.held == 1, timeout=10, interval=0.05)
    assert scaler.metric("inflight-requests") == 1


def test_the_stream_pushes_true_when_a_request_is_held(start_gateway, predictor, scaler_client):
    port = free_port()
    gateway = start_gateway(upstream=predictor.url, scaler_port=str(port), scale_from_zero_timeout_seconds="60")
    stream = scaler_client(port).stream()
    assert next(stream).result is False  # the state at once, as KEDA opens it
    _send_in_thread(gateway, {"items": [{"text": "a"}]})
    assert next(stream).result is True  # pushed: KEDA scales 0 -> 1 on it
    assert gateway.gateway.scaler.wakes >= 1
    stream.cancel()


def test_a_request_after_a_quiet_spell_wakes_before_its_call_is_refused(start_gateway, backend, scaler_client):
    """With vLLM up, the first request of a burst still pushes (it may be at zero for all the gateway knows);
    the requests after it, while it is active, do not."""
    port = free_port()
    gateway = start_gateway(scaler_port=str(port), scaler_active_seconds="60")
    stream = scaler_client(port).stream()
    assert next(stream).result is False
    assert gateway.post("/v1/rewards", json={"items": [{"text": "a"}]}).json()["rewards"] == [logit("a")]
    assert next(stream).result is True
    for text in "bcd":
        assert gateway.post("/v1/rewards", json={"items": [{"text": text}]}).status_code == 200
    assert gateway.gateway.scaler.wakes == 1
    stream.cancel()


def test_a_request_without_the_bearer_token_wakes_nothing(start_gateway, backend, scaler_client, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    port = free_port()
    gateway = start_gateway(scaler_port=str(port), auth_token_file=str(token_file), scaler_active_seconds="60")
    assert gateway.post("/v1/rewards", json={"items": [{"text": "a"}]}).status_code == 401
    assert gateway.gateway.scaler.wakes == 0
    assert scaler_client(port).active() is False
    authorized = {"Authorization": "Bearer s3cret-token"}
    assert gateway.post("/v1/rewards", json={"items": [{"text": "a"}]}, headers=authorized).status_code == 200
    assert gateway.gateway.scaler.wakes == 1
    assert scaler_client(port).active() is True


def test_active_for_a_while_after_the_last_request(start_gateway, backend, scaler_client):
    """KEDA polls every pollingInterval: a burst that ended between two polls still counts."""
    lingering, forgetful = free_port(), free_port()
    first = start_gateway(scaler_port=str(lingering), scaler_active_seconds="600")
    second = start_gateway(scaler_port=str(forgetful), scaler_active_seconds="0")
    for gateway in (first, second):
        assert gateway.post("/v1/rewards", json={"items": [{"text": "a"}]}).status_code == 200
    assert scaler_client(lingering).active() is True
    assert scaler_client(forgetful).active() is False
    assert scaler_client(lingering).metric() == 0  # nothing in flight, though


def test_any_replica_answers_for_all_of_them(start_gateway, predictor, scaler_client):
    """Two replicas that know each other (REWARD_GATEWAY_SCALER_PEERS): KEDA may reach
    either; a request held by one makes the other active, counts in its metric and is
    pushed on its stream."""
    ports = [free_port(), free_port()]
    peers = ",".join(f"127.0.0.1:{port}" for port in ports)
    settings = {"upstream": predictor.url, "scale_from_zero_timeout_seconds": "60"}
    asked = start_gateway(scaler_port=str(ports[0]), scaler_peers=peers, **settings)
    holding = start_gateway(scaler_port=str(ports[1]), scaler_peers=peers, **settings)
    scaler = scaler_client(ports[0])
    assert scaler.active() is False and scaler.metric() == 0  # itself among its peers: not counted twice

    stream = scaler.stream()
    assert next(stream).result is False

    def following() -> bool:  # the asked replica's stream to its peer is open
        return len(holding.gateway.scaler.peer_streams.queues) >= 1

    wait_until("the replicas following each other", following, timeout=15, interval=0.05)
    _send_in_thread(holding, {"items": [{"text": "a"}, {"text": "b"}]})
    assert next(stream).result is True  # relayed from the peer
    wait_until("the request held", lambda: holding.gateway.load.held == 1, timeout=10, interval=0.05)
    assert asked.gateway.load.requests == 0
    assert scaler.active() is True
    assert scaler.metric() == 2
    _send_in_thread(asked, {"items": [{"text": "c"}]})
    wait_until("a request held by each", lambda: asked.gateway.load.held == 1, timeout=10, interval=0.05)
    assert scaler_client(ports[1]).metric() == 3  # the same total from either
    stream.cancel()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REWARD_GATEWAY_SCALER_TARGET": "8"}, "without REWARD_GATEWAY_SCALER_PORT"),
        ({"REWARD_GATEWAY_SCALER_PORT": "9090", "REWARD_GATEWAY_SCALER_METRIC": "tokens"}, "items, requests"),
        ({"REWARD_GATEWAY_SCALER_PORT": "9090", "REWARD_GATEWAY_SCALER_TARGET": "0"}, "positive number"),
        ({"REWARD_GATEWAY_SCALER_PORT": "0"}, "between 1 and 65535"),
        ({"REWARD_GATEWAY_MAX_HELD_REQUESTS": "0"}, "at least 1"),
    ],
)
def test_bad_scaler_settings_are_refused_naming_the_variable(env, message):
    base = {"REWARD_GATEWAY_UPSTREAM_URL": "http://vllm", "REWARD_GATEWAY_MODEL_NAME": "rm"}
    with pytest.raises(ConfigError, match=message):
        load_config({**base, **env})


def test_without_a_scaler_port_no_grpc_is_loaded():
    """The scoring path stays as it was: gRPC only where the scaler is on."""
    import subprocess
    import sys

    code = (
        "import sys; from reward_gateway.http.app import build_app; from reward_gateway.http.routes import Gateway;"
        "from reward_gateway.config.gateway import load_config;"
        "env = {'REWARD_GATEWAY_UPSTREAM_URL': 'http://v', 'REWARD_GATEWAY_MODEL_NAME': 'rm'};"
        "build_app(Gateway(load_config(env))); import reward_gateway.http.server;"
        "print('grpc' in sys.modules)"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False"
