"""The app's route set: KServe's transformer routes, the scoring routes, nothing else."""

from __future__ import annotations

import pytest

# What kserve's model server added and the gateway never served: gone, not answered by accident.
KSERVE_ONLY_ROUTES = [
    ("GET", "/v2"),
    ("GET", "/v2/health/live"),
    ("GET", "/v2/health/ready"),
    ("GET", "/v2/models/rm"),
    ("GET", "/v2/models/rm/ready"),
    ("POST", "/v2/models/rm/infer"),
    ("POST", "/v1/models/rm:explain"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("POST", "/openai/v1/completions"),
]

# Probes carry no token: liveness, health, readiness (and the model list beside it), metrics.
OPEN_PATHS = {"/", "/health", "/v1/models", "/v1/models/rm", "/metrics"}
SCORING_PATHS = {"/v1/rewards", "/get_reward", "/classify", "/v1/models/rm:predict", "/v1/pipeline/reward"}


def test_kserve_probe_routes_answer_like_kserves_model_server(start_gateway):
    gateway = start_gateway()
    assert gateway.get("/").json() == {"status": "alive"}
    assert gateway.get("/health").json() == {"status": "ok"}
    assert gateway.get("/v1/models").json() == {"models": ["rm"]}
    assert gateway.get("/v1/models/rm").json() == {"name": "rm", "ready": True}
    assert gateway.get("/v1/models/other").status_code == 404


@pytest.mark.parametrize(("method", "path"), KSERVE_ONLY_ROUTES)
def test_routes_of_kserves_model_server_are_gone(start_gateway, method, path):
    assert start_gateway().request(method, path, json={}).status_code == 404


def test_with_auth_only_probes_and_metrics_answer_without_the_token(start_gateway, backend, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    gateway = start_gateway(auth_token_file=str(token_file))
    front = gateway.app
    paths = {route.path for route in front.app.routes} | set(front.scoring_paths)
    # A new route must be placed on one side or the other here.
    assert paths == OPEN_PATHS | SCORING_PATHS
    for path in sorted(paths):
        for method in ("GET", "POST"):
            status = gateway.request(method, path, json={"query": ["a"]}).status_code
            if path not in OPEN_PATHS:
                assert not 200 <= status < 300, f"{method} {path} answered {status} without the token"
            elif method == "GET":
                assert status == 200, f"probe {path} answered {status} without the token"
    assert backend.calls == []
