"""Runs the gateway on kserve's model server (the InferenceService transformer).

kserve's ModelServer brings the process model KServe expects of a transformer:
its uvicorn setup, `/v1/models` readiness, `/metrics` from the default
Prometheus registry (where the gateway's metrics live) and graceful shutdown.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import kserve
import uvloop
from kserve import model_server

from reward_gateway.app import build_router
from reward_gateway.asgi import ScoringFront
from reward_gateway.config import GatewayConfig
from reward_gateway.gateway import Gateway


class RewardModelEndpoint(kserve.Model):
    """The model entry kserve lists and reports ready; scoring is on the gateway's routes."""

    def __init__(self, name: str):
        super().__init__(name)
        self.ready = True


def _silence_access_log() -> None:
    """No access log line per request: at training-burst rates it costs more than
    the gateway's own work, and latency and status are in the reward_gateway_*
    metrics. uvicorn logs access only when its logger has handlers, so removing
    the ones kserve's logging set-up (in ModelServer()) attached skips even
    building the record, which a filter would not."""
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False


def _calm_garbage_collector() -> None:
    """Keep full collections out of the request path.

    Each request allocates thousands of short-lived objects, so CPython's default
    thresholds run a collection every few requests, and every so often a full one
    over everything kserve and FastAPI imported: that was the gateway's p99 (about
    50 ms added at 600 requests/s, against about 1 ms with this). Objects alive
    after start-up are frozen out of collection, and young-generation collections
    run far less often; reference counting still frees almost everything at once.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def serve(config: GatewayConfig) -> None:
    gateway = Gateway(config)
    model_server.app.include_router(build_router())
    # The scoring routes are answered ahead of FastAPI and its middleware
    # (see reward_gateway.asgi). kserve's REST server and uvicorn both load the
    # app by its import string, "kserve.model_server:app", so the front takes
    # that place; kserve still registers its routes and middleware on the
    # FastAPI app behind it, as the front passes attribute lookups through.
    model_server.app = ScoringFront(gateway, model_server.app)
    server = kserve.ModelServer(
        http_port=config.port,
        enable_grpc=False,
        workers=1,
        enable_docs_url=False,
        # kserve's per-request latency trace lines: see _silence_access_log
        enable_latency_logging=config.access_log,
    )
    if not config.access_log:
        _silence_access_log()
    _calm_garbage_collector()
    # kserve runs its server under asyncio.run; uvloop's C event loop and
    # transports halve the gateway's CPU per request against asyncio's own.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    # kserve configures "the current loop" before asyncio.run makes its own; with
    # a new policy there is none until one is set.
    asyncio.set_event_loop(asyncio.new_event_loop())
    server.start([RewardModelEndpoint(config.model_name)])
