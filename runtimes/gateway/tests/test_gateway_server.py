"""`python -m reward_gateway` as the transformer container runs it: kserve's model
server in its own process, configured only through the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from reward_testing.fake_vllm import logit
from reward_testing.ports import free_port

pytest.importorskip("kserve", reason="the gateway extra (kserve) is not installed: pip install -e '.[gateway]'")


@pytest.fixture
def served_gateway(backend, tmp_path):
    port = free_port()
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    env = {
        **os.environ,
        "REWARD_GATEWAY_UPSTREAM_URL": backend.url,
        "REWARD_GATEWAY_MODEL_NAME": "rm",
        "REWARD_GATEWAY_PORT": str(port),
        "REWARD_GATEWAY_AUTH_TOKEN_FILE": str(token),
    }
    log = tmp_path / "gateway.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "reward_gateway"], env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"gateway did not come up:\n{log.read_text()}")
    yield url, log
    process.terminate()
    process.wait(timeout=20)


def test_real_server_scores_with_auth_and_exports_metrics(served_gateway):
    url, log = served_gateway
    headers = {"Authorization": "Bearer s3cret-token"}
    answer = httpx.post(f"{url}/get_reward", json={"query": ["a", "bb"]}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == pytest.approx([logit("a"), logit("bb")])

    predicted = httpx.post(
        f"{url}/v1/models/rm:predict",
        json={"instances": [{"prompt": "p", "response": "r"}]},
        headers=headers,
        timeout=30,
    )
    assert predicted.status_code == 200, predicted.text
    assert len(predicted.json()["predictions"]) == 1

    refused = httpx.post(f"{url}/get_reward", json={"query": ["a"]}, timeout=30)
    assert refused.status_code == 401
    assert "error" in refused.json()

    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'reward_gateway_requests_total{code="200",model="rm",route="get_reward"}' in metrics
    assert "reward_gateway_score_bucket" in metrics
    assert "s3cret-token" not in log.read_text(), "tokens never reach the logs"

    # kserve's own routes still answer behind the scoring front
    ready = httpx.get(f"{url}/v1/models/rm", timeout=10)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    # and no access-log line is written per request (REWARD_GATEWAY_ACCESS_LOG is off)
    assert "POST /get_reward" not in log.read_text()
