"""HTTP routes of the gateway, mounted on kserve's app or on a bare FastAPI app.

The v1 predict route is ours rather than kserve's data plane, so it shares the
item validation, authentication and error answers of the RLHF routes; it is
registered before kserve's own routes and so takes precedence.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import exposition

from reward_gateway.gateway import Answer, Gateway


def _respond(answer: Answer) -> Response:
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


def build_router(gateway: Gateway) -> APIRouter:
    router = APIRouter()
    name = gateway.config.model_name

    def route(path: str, label: str) -> None:
        async def handle(request: Request) -> Response:
            body = await request.body()
            return _respond(await gateway.answer(label, body, request.headers.get("authorization")))

        router.add_api_route(path, handle, methods=["POST"], name=label)

    route("/v1/rewards", "rewards")
    route("/get_reward", "get_reward")
    route("/classify", "classify")
    route(f"/v1/models/{name}:predict", "v1_predict")

    async def health() -> dict[str, str]:
        # The gateway's own liveness; vLLM's health is its own container's probe.
        return {"status": "ok"}

    router.add_api_route("/health", health, methods=["GET"])
    return router


def build_app(gateway: Gateway) -> FastAPI:
    """A standalone app: the gateway's routes, readiness and /metrics, without kserve."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await gateway.close()

    app = FastAPI(title="reward-gateway", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.include_router(build_router(gateway))
    name = gateway.config.model_name

    async def model_ready() -> dict[str, object]:
        return {"name": name, "ready": True}

    async def metrics(request: Request) -> Response:
        encoder, content_type = exposition.choose_encoder(request.headers.get("accept"))
        return Response(encoder(gateway.metrics.registry), headers={"content-type": content_type})

    app.add_api_route(f"/v1/models/{name}", model_ready, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    return app
