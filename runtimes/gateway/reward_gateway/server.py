"""Runs the gateway's app (reward_gateway.app.build_app, the one the tests run)
on uvicorn, as the InferenceService's transformer.

One process on uvloop, sized for the transformer's default of one CPU: gateway
throughput scales with replicas. The server settings KServe's own model server
uses for transformers are kept: all interfaces, keep-alive longer than the
proxies' idle timeout, a graceful shutdown.
"""

from __future__ import annotations

import gc

import uvicorn

from reward_gateway.app import build_app
from reward_gateway.config import GatewayConfig
from reward_gateway.gateway import Gateway

# Longer than the idle timeout of the proxies in front (Knative's queue-proxy,
# Istio/Envoy): the proxy closes an idle connection first, never the gateway
# under a request the proxy is sending. KServe's model server uses the same.
KEEP_ALIVE_S = 65
GRACEFUL_SHUTDOWN_S = 30


def _calm_garbage_collector() -> None:
    """Keep full collections out of the request path.

    Each request allocates thousands of short-lived objects, so CPython's default
    thresholds run a collection every few requests, and every so often a full one
    over everything FastAPI and pydantic imported: that was the gateway's p99
    (about 50 ms added at 600 requests/s, against about 1 ms with this). Objects
    alive after start-up are frozen out of collection, and young-generation
    collections run far less often; reference counting still frees almost
    everything at once.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def serve(config: GatewayConfig) -> None:
    settings = uvicorn.Config(
        build_app(Gateway(config)),
        host="0.0.0.0",
        port=config.port,
        # uvloop's C event loop and transports halve the gateway's CPU per
        # request against asyncio's own; httptools is uvicorn's C parser.
        loop="uvloop",
        http="httptools",
        lifespan="on",
        # No access log line per request unless asked for: at training-burst
        # rates it costs more than the gateway's own work, and latency and
        # status are in the reward_gateway_* metrics. Off, uvicorn removes the
        # access logger's handlers and then skips building the record at all.
        access_log=config.access_log,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    settings.load()  # imports the protocol classes now, so the collector freezes them too
    _calm_garbage_collector()
    uvicorn.Server(settings).run()
