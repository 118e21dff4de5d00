"""Runs the gateway's app (reward_gateway.http.app.build_app, the one the tests run)
on uvicorn, as the InferenceService's transformer.

One process on uvloop, sized for the transformer's default of one CPU: gateway
throughput scales with replicas. The server settings KServe's own model server
uses for transformers are kept: all interfaces, keep-alive longer than the
proxies' idle timeout, a graceful shutdown.

A pod's end: the kubelet sends SIGTERM as the pod starts terminating, and kube-proxy, Knative's
activator and the ingress proxies drop the pod from their endpoints only a moment later. A gateway
that stopped listening at the signal left the requests sent meanwhile without any HTTP answer (1 of
54 while a promotion rolled the gateway's pods on the real node). So after SIGTERM it goes on
answering for REWARD_GATEWAY_DRAIN_SECONDS (5 s), every answer with ``Connection: close`` so that
keep-alive clients reconnect to a pod that stays, then shuts down gracefully. Kubernetes' usual
answer is a preStop sleep; this one needs no shell in the image and no field of KServe's schema.
SIGINT (Ctrl-C) still stops at once. From SIGTERM on it holds nothing for a predictor that is not up
(reward_gateway.upstream.client): a cold start outlasts the graceful shutdown, which would cut held requests.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.http.app import build_app
from reward_gateway.http.logs import SafeAccessLine
from reward_gateway.http.routes import Gateway

logger = logging.getLogger("reward_gateway")

# Longer than the idle timeout of the proxies in front (Knative's queue-proxy,
# Istio/Envoy): the proxy closes an idle connection first, never the gateway
# under a request the proxy is sending. KServe's model server uses the same.
KEEP_ALIVE_S = 65
GRACEFUL_SHUTDOWN_S = 30
# A request head (request line and headers) above this is refused: httptools
# itself has no limit (uvicorn's h11_max_incomplete_event_size is h11's only).
MAX_HEAD_BYTES = 64 * 1024
# A request head must arrive within this from its first byte (or from the
# connection's opening): uvicorn's timeout_keep_alive covers only the idle time
# between requests, so a client that sends half a head held its connection for ever.
HEAD_TIMEOUT_S = 30.0
# Where Kubernetes reads a container's termination message from (its default terminationMessagePath).
TERMINATION_LOG = "/dev/termination-log"
# The exit code of a gateway that refused its settings once it could check them (a judge's labels).
REFUSED_EXIT_CODE = 3


class HeadTooLarge(Exception):
    pass


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the bounds on request heads it lacks:
    their size and the time they take to arrive.

    An error raised in a parser callback fails the parse: uvicorn answers 400
    and closes the connection.
    """

    head_bytes = 0
    head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._time_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_bytes = 0
        self._time_head()

    def on_headers_complete(self) -> None:
        self._head_done()
        super().on_headers_complete()

    def _time_head(self) -> None:
        self._head_done()
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _head_done(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > MAX_HEAD_BYTES:
            raise HeadTooLarge(f"request head over {MAX_HEAD_BYTES} bytes")


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


def termination_message(message: str) -> None:
    """The message kept where Kubernetes reads a container's termination message (where there is one)."""
    try:
        with open(TERMINATION_LOG, "w", encoding="utf-8") as log:
            log.write(f"reward-gateway: {message}\n")
    except OSError:
        pass  # not in a container: the log line says it


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on SIGTERM answers ``drain_s`` longer before its graceful shutdown, and stops
    when the gateway refuses its settings.

    ``on_leaving`` runs in the event loop at SIGTERM: the gateway stops holding requests for a predictor that
    is not up (a cold start outlasts the graceful shutdown, which would cut them without an answer).
    ``refusal`` answers once the gateway refuses its settings (Gateway.refusal): the server keeps the message
    for Kubernetes and stops, and ``refused`` says why."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain_s: float,
        draining: threading.Event,
        on_leaving: Callable[[], None] = lambda: None,
        refusal: Callable[[], Awaitable[str]] | None = None,
    ):
        super().__init__(config)
        self.drain_s = drain_s
        self.draining = draining
        self.on_leaving = on_leaving
        self.refusal = refusal
        self.refused: str | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        watch = asyncio.create_task(self._stop_on_refusal()) if self.refusal is not None else None
        try:
            await super().serve(sockets)
        finally:
            if watch is not None:
                watch.cancel()

    async def _stop_on_refusal(self) -> None:
        self.refused = await self.refusal()  # type: ignore[misc]
        termination_message(self.refused)
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.draining.is_set():
            try:  # the signal interrupts the loop's own thread: the loop runs the call as its next step
                asyncio.get_running_loop().call_soon_threadsafe(self.on_leaving)
            except RuntimeError:  # no loop running (not started yet, or stopped)
                self.on_leaving()
        if sig != signal.SIGTERM or self.draining.is_set() or self.drain_s <= 0:
            self.draining.set()
            super().handle_exit(sig, frame)  # Ctrl-C, a second signal, or no drain: as uvicorn does
            return
        self.draining.set()
        logger.info("SIGTERM: answering %g s more (Connection: close) before shutting down", self.drain_s)
        # a timer thread: uvicorn's main loop polls should_exit, so setting it from there is enough
        timer = threading.Timer(self.drain_s, super().handle_exit, (sig, frame))
        timer.daemon = True
        timer.start()


class CloseWhileDraining:
    """ASGI middleware: while the server drains, each answer says ``Connection: close`` (uvicorn then
    closes the connection after it), so that a keep-alive client's next request opens a new connection,
    which the Service sends to a pod that is not going away."""

    def __init__(self, app: Any, draining: threading.Event):
        self.app = app
        self.draining = draining

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.draining.is_set():
            await self.app(scope, receive, send)
            return

        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def serve(config: GatewayConfig) -> int:
    """Serves until a signal, or a refusal of the settings (reward_gateway.judge.scorer); returns the exit code."""
    server = server_of(Gateway(config))
    _calm_garbage_collector()
    server.run()
    return REFUSED_EXIT_CODE if server.refused is not None else 0


def server_of(gateway: Gateway) -> DrainingServer:
    """The server of a gateway's app, with the settings below, not started."""
    config = gateway.config
    draining = threading.Event()
    settings = uvicorn.Config(
        CloseWhileDraining(build_app(gateway), draining),
        host=config.listen_address or "0.0.0.0",
        port=config.port,
        # uvloop's C event loop and transports halve the gateway's CPU per
        # request against asyncio's own; httptools is uvicorn's C parser (guarded).
        loop="uvloop",
        http=GuardedHttpToolsProtocol,
        lifespan="on",
        # No access log line per request unless asked for: at training-burst
        # rates it costs more than the gateway's own work, and latency and
        # status are in the reward_gateway_* metrics. Off, uvicorn removes the
        # access logger's handlers and then skips building the record at all.
        access_log=config.access_log,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    # Escaped, and without query strings, where the access log is on.
    logging.getLogger("uvicorn.access").addFilter(SafeAccessLine())
    settings.load()  # imports the protocol classes now, so the collector freezes them too
    return DrainingServer(settings, config.drain_s, draining, gateway.load.stop_holding, gateway.refusal)
