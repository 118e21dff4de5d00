"""The gateway's ASGI app: what `python -m reward_gateway` serves and the tests run.

The scoring routes (the v1 predict route among them, so that it shares the item
validation, authentication and error answers of the RLHF routes) are served by
the ASGI front in reward_gateway.http.asgi, ahead of the framework. Behind it,
FastAPI answers the routes KServe expects of a transformer: liveness at /,
readiness at /v1/models/<name>, the model list at /v1/models, plus /health,
/metrics and, during a rollout, /canary; it also starts KEDA's external scaler
(reward_gateway.scale.scaler) on its own port where one is configured. Nothing else: no docs, no OpenAPI
schema, no v2 protocol. None of these asks for the bearer token: they carry no
scores or texts, and the kubelet, Prometheus and the operator read them. A gateway
in an RLHFPipeline role serves the same, with its role's /v1/pipeline/ routes in
the front instead of the scoring routes (reward_gateway.pipeline.routes).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from prometheus_client import exposition

from reward_gateway.http.asgi import ScoringFront
from reward_gateway.http.routes import Gateway
from reward_gateway.items.errors import GatewayError
from reward_gateway.scoring.scorer import ItemScorer

logger = logging.getLogger("reward_gateway")
# How long the start waits for the checks to be done before it listens (vLLM answers in milliseconds where it is up).
CHECK_BEFORE_LISTENING_S = 5.0


async def _checked(scorer: ItemScorer) -> None:
    try:
        await scorer.check_at_start()
    except GatewayError as error:  # refused: the scorer records it, and the server ends the gateway
        logger.debug("check at start: %s", error.message)


def build_app(gateway: Gateway) -> ScoringFront:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if gateway.config.scaler is not None:
            # Imported only here: a gateway without KEDA's scaler loads no gRPC.
            from reward_gateway.scale.scaler import Scaler

            gateway.scaler = Scaler(gateway.config.scaler, gateway.load, gateway.config.listen_address)
            await gateway.scaler.start()
        if gateway.canary is not None:
            gateway.canary.start()  # follows the candidate's share where a file gives it (reward_gateway.config.share)
        if gateway.generation is not None:
            gateway.generation.start()  # follows the RewardModel's generation (reward_gateway.config.generation)
        # a judge's labels checked against its tokenizer once vLLM answers (reward_gateway.judge.scorer); where vLLM
        # is up already (a restarted gateway), before the gateway listens, so one that refuses them is never Ready
        checks = [asyncio.create_task(_checked(scorer)) for scorer in gateway.scorers()]
        await asyncio.wait(checks, timeout=CHECK_BEFORE_LISTENING_S)
        try:
            yield
        finally:
            for check in checks:
                check.cancel()
            if gateway.scaler is not None:
                await gateway.scaler.stop()
            await gateway.close()

    app = FastAPI(title="reward-gateway", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    names = gateway.config.v1_names

    async def live() -> dict[str, str]:
        # KServe's model server answers the same at /.
        return {"status": "alive"}

    async def health() -> dict[str, str]:
        # The gateway's own liveness; vLLM's health is its own container's probe.
        return {"status": "ok"}

    async def models() -> dict[str, list[str]]:
        return {"models": list(names)}

    def model_ready(name: str):
        async def ready() -> dict[str, object]:
            return {"name": name, "ready": True}

        return ready

    async def metrics(request: Request) -> Response:
        encoder, content_type = exposition.choose_encoder(request.headers.get("accept"))
        return Response(encoder(gateway.metrics.registry), headers={"content-type": content_type})

    app.add_api_route("/", live, methods=["GET"])
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    for name in names:
        app.add_api_route(f"/v1/models/{name}", model_ready(name), methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    if gateway.canary is not None:
        rollout = gateway.canary

        async def canary() -> dict[str, object]:
            # The rollout's figures for the operator's promotion gates (reward_gateway.rollout.canary).
            return rollout.summary()

        # Only during a rollout: elsewhere it is a 404 like any unknown route.
        app.add_api_route("/canary", canary, methods=["GET"])
    return ScoringFront(gateway, app)
