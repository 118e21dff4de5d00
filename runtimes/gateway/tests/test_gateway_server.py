"""`python -m reward_gateway` as KServe runs the transformer container: its own
process, with the arguments KServe appends to the container's command."""

from __future__ import annotations

import signal
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from reward_testing.fake_vllm import logit
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until


def kserve_args(isvc: str, predictor_host: str, http_port: int) -> list[str]:
    """What KServe appends to a transformer container's args (and --workers with containerConcurrency)."""
    return ["--model_name", isvc, "--predictor_host", predictor_host, "--http_port", str(http_port)]


def test_kserves_args_alone_configure_the_gateway(run_gateway, backend):
    port = free_port()
    # The fake vLLM stands in for the predictor's Service (<isvc>-predictor.<namespace>).
    predictor_host = backend.url.removeprefix("http://")
    args = [*kserve_args("rm", predictor_host, port), "--workers", "4", "--protocol", "v1"]
    url, log = run_gateway(args, {}, port, "rm")

    assert httpx.get(f"{url}/v1/models/rm").json() == {"name": "rm", "ready": True}
    assert httpx.get(f"{url}/v1/models").json() == {"models": ["rm"]}
    assert httpx.get(f"{url}/").json() == {"status": "alive"}
    answer = httpx.post(f"{url}/get_reward", json={"query": ["a", "bb"]}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == pytest.approx([logit("a"), logit("bb")])
    assert [body["model"] for _, body in backend.calls] == ["rm", "rm"]

    lines = log.read_text().splitlines()
    assert sum("ignoring arguments the gateway does not take: --protocol v1" in line for line in lines) == 1
    assert any("--workers 4 ignored" in line for line in lines)


def test_the_environment_wins_and_the_v1_routes_answer_both_names(run_gateway, backend, tmp_path):
    port, unused_port = free_port(), free_port()
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    env = {
        "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
        "REWARD_GATEWAY_MODEL_NAME": "served-rm",
        "REWARD_GATEWAY_PORT": str(port),
        "REWARD_GATEWAY_AUTH_TOKEN_FILE": str(token),
    }
    # Nothing listens at this predictor host: scores reach vLLM only through the variable.
    args = kserve_args("rm-isvc", f"127.0.0.1:{free_port()}", unused_port)
    url, log = run_gateway(args, env, port, "rm-isvc")
    headers = {"Authorization": "Bearer s3cret-token"}

    assert httpx.get(f"{url}/v1/models").json() == {"models": ["served-rm", "rm-isvc"]}
    for name in ("served-rm", "rm-isvc"):  # KServe's InferenceGraph calls the InferenceService's name
        assert httpx.get(f"{url}/v1/models/{name}").json() == {"name": name, "ready": True}
        instances = [{"prompt": "p", "response": "r"}]
        predicted = httpx.post(f"{url}/v1/models/{name}:predict", json={"instances": instances}, headers=headers)
        assert predicted.status_code == 200, predicted.text
        assert len(predicted.json()["predictions"]) == 1
    assert [body["model"] for _, body in backend.calls] == ["served-rm", "served-rm"]
    with pytest.raises(httpx.ConnectError):  # REWARD_GATEWAY_PORT won over --http_port
        httpx.get(f"http://127.0.0.1:{unused_port}/")

    refused = httpx.post(f"{url}/get_reward", json={"query": ["a"]}, timeout=30)
    assert refused.status_code == 401
    assert "error" in refused.json()
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'reward_gateway_requests_total{code="200",model="served-rm",route="v1_predict"} 2.0' in metrics
    assert "process_cpu_seconds_total" in metrics  # the default registry's collectors too
    assert "s3cret-token" not in log.read_text(), "tokens never reach the logs"
    # no access-log line per request (REWARD_GATEWAY_ACCESS_LOG is off)
    assert "POST /v1/models" not in log.read_text()


def test_an_over_large_request_head_is_refused(run_gateway, backend):
    port = free_port()
    url, _ = run_gateway(kserve_args("rm", backend.url.removeprefix("http://"), port), {}, port, "rm")
    big = httpx.get(f"{url}/health", headers={"X-Padding": "x" * 100_000}, timeout=10)
    assert big.status_code == 400
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # httpx refuses such a URL
        raw.sendall(b"GET /health?" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{url}/health", headers={"X-Padding": "x" * 8000}, timeout=10).status_code == 200


def test_after_sigterm_it_answers_the_drain_with_connection_close_then_exits(run_gateway, backend):
    """The kubelet's SIGTERM comes before the Service's endpoints drop the pod: requests sent meanwhile are
    answered (each with Connection: close, so keep-alive clients reconnect elsewhere), then it exits."""
    port = free_port()
    args = kserve_args("rm", backend.url.removeprefix("http://"), port)
    url, log = run_gateway(args, {"REWARD_GATEWAY_DRAIN_SECONDS": "3"}, port, "rm")
    with httpx.Client(base_url=url, timeout=10) as client:
        assert "connection" not in client.get("/health").headers  # kept alive before
        run_gateway.process.terminate()
        wait_until("the drain begun", lambda: "SIGTERM: answering 3 s more" in log.read_text(), 10, 0.05)
        answer = client.post("/get_reward", json={"query": ["a"]})
        assert answer.status_code == 200 and answer.json()["rewards"] == pytest.approx([logit("a")])
        assert answer.headers["connection"] == "close"
    # uvicorn raises the signal again once it has shut down gracefully, as it does without the drain
    assert run_gateway.process.wait(timeout=30) == -signal.SIGTERM
    assert "Application shutdown complete" in log.read_text()


def test_at_sigterm_a_request_held_for_the_predictor_is_answered_503_for_its_client_to_retry_elsewhere(run_gateway):
    """A pod replaced while the predictor is at zero (KServe rolls the gateways): the graceful shutdown (30 s) is
    shorter than a cold start, and would cut the held request without an answer. It is answered 503 at the
    signal instead, and so is a request that comes during the drain: their clients retry on the pod that stays."""
    port, nothing_listens = free_port(), free_port()
    env = {"REWARD_GATEWAY_DRAIN_SECONDS": "3", "REWARD_GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS": "600"}
    url, _ = run_gateway(kserve_args("rm", f"127.0.0.1:{nothing_listens}", port), env, port, "rm")
    held_now = 'reward_gateway_held_requests{model="rm"} 1.0'
    with ThreadPoolExecutor(max_workers=1) as pool, httpx.Client(base_url=url, timeout=60) as client:
        held = pool.submit(client.post, "/get_reward", json={"query": ["a"]})
        wait_until("the request held", lambda: held_now in client.get("/metrics").text, 10, 0.05)
        run_gateway.process.terminate()
        answer = held.result(timeout=10)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
        assert "shutting down" in answer.json()["error"]
        late = client.post("/get_reward", json={"query": ["b"]})  # during the drain
        assert late.status_code == 503 and "shutting down" in late.json()["error"]
    assert run_gateway.process.wait(timeout=30) == -signal.SIGTERM


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(request)
        return raw.recv(1000)


def test_access_log_lines_escape_the_clients_text_and_leave_out_query_strings(run_gateway, backend):
    port = free_port()
    args = kserve_args("rm", backend.url.removeprefix("http://"), port)
    _, log = run_gateway(args, {"REWARD_GATEWAY_ACCESS_LOG": "true"}, port, "rm")
    raw_request(port, b"GET /health%0d%0aFORGED-LINE%20admin%20logged%20in HTTP/1.1\r\nHost: x\r\n\r\n")
    raw_request(port, b"GET /health?token=s3cret-token HTTP/1.1\r\nHost: x\r\n\r\n")
    assert raw_request(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200")
    wait_until("the access lines", lambda: log.read_text().count('"GET /health') >= 3, timeout=10, interval=0.1)
    text = log.read_text()
    assert not any(line.startswith("FORGED-LINE") for line in text.splitlines()), text
    assert "s3cret-token" not in text
    assert "/health%0D%0AFORGED-LINE" in text  # uvicorn quotes the path; logs.escape is the second guard


def test_probes_write_no_log_lines_with_the_access_log_off(run_gateway, backend):
    port = free_port()
    url, log = run_gateway(kserve_args("rm", backend.url.removeprefix("http://"), port), {}, port, "rm")
    before = log.read_text()
    for path in ("/health", "/", "/v1/models/rm", "/metrics"):
        assert httpx.get(f"{url}{path}", timeout=10).status_code == 200
    assert httpx.post(f"{url}/get_reward", json={"query": ["a"]}, timeout=10).status_code == 200
    assert log.read_text() == before


def test_a_rollout_from_the_environment_in_the_real_process(run_gateway, backend, candidate_backend, tmp_path):
    """The CANARY_ variables as the operator renders them, a token-keyed split, and /canary's door."""
    candidate_backend.offset = 1000.0
    port = free_port()
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    env = {
        "REWARD_GATEWAY_CANARY_URL": candidate_backend.url.removeprefix("http://"),  # a bare host:port, as KServe's
        "REWARD_GATEWAY_CANARY_MODEL_NAME": "rm-v2",
        "REWARD_GATEWAY_CANARY_MODE": "split",
        "REWARD_GATEWAY_CANARY_PERCENT": "100",
        "REWARD_GATEWAY_CANARY_STICKY": "client",
        "REWARD_GATEWAY_AUTH_TOKEN_FILE": str(token),
    }
    url, log = run_gateway(kserve_args("rm", backend.url.removeprefix("http://"), port), env, port, "rm")
    headers = {"Authorization": "Bearer s3cret-token"}
    answer = httpx.post(f"{url}/get_reward", json={"query": ["a", "bb"]}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Reward-Model"] == "candidate"
    assert answer.json()["rewards"] == pytest.approx([logit("a") + 1000, logit("bb") + 1000])
    summary = httpx.get(f"{url}/canary", timeout=10).json()  # no token: figures only
    assert (summary["model"], summary["candidate"], summary["mode"], summary["percent"]) == (
        "rm",
        "rm-v2",
        "split",
        100,
    )
    assert summary["models"]["candidate"]["answers"] == pytest.approx(1, rel=0.01)  # decayed a little since
    assert summary["items"] == pytest.approx(2, rel=0.01)  # the stable model scored it too, in shadow
    text = log.read_text()
    assert "rolling out rm-v2 beside rm: split (100 % to the candidate, sticky by client)" in text
    assert "s3cret-token" not in text
