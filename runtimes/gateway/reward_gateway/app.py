"""HTTP routes of the gateway, mounted on kserve's app or on a bare FastAPI app.

The scoring routes (the v1 predict route among them, so that it shares the item
validation, authentication and error answers of the RLHF routes) are served by
the ASGI front in reward_gateway.asgi, ahead of the framework; the rest is here.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import exposition

from reward_gateway.asgi import ScoringFront
from reward_gateway.gateway import Gateway


def build_router() -> APIRouter:
    router = APIRouter()

    async def health() -> dict[str, str]:
        # The gateway's own liveness; vLLM's health is its own container's probe.
        return {"status": "ok"}

    router.add_api_route("/health", health, methods=["GET"])
    return router


def build_app(gateway: Gateway) -> ScoringFront:
    """A standalone app: the gateway's routes, readiness and /metrics, without kserve."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await gateway.close()

    app = FastAPI(title="reward-gateway", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.include_router(build_router())
    name = gateway.config.model_name

    async def model_ready() -> dict[str, object]:
        return {"name": name, "ready": True}

    async def metrics(request: Request) -> Response:
        encoder, content_type = exposition.choose_encoder(request.headers.get("accept"))
        return Response(encoder(gateway.metrics.registry), headers={"content-type": content_type})

    app.add_api_route(f"/v1/models/{name}", model_ready, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    return ScoringFront(gateway, app)
