"""KEDA's external scaler, served by the gateway: the predictor wakes on the first
request and scales on what the gateway has in flight.

In Standard mode the GPU predictor may be at zero replicas while the gateway (the
transformer, one CPU) stays up. Nothing of the predictor's own exists then (its
``vllm:*`` metrics vanish with its last pod), so the gateway is what KEDA asks.
It serves ``externalscaler.ExternalScaler`` (KEDA's
``pkg/scalers/externalscaler/externalscaler.proto``) on its own port, for an
``external-push`` trigger:

- StreamIsActive: KEDA keeps it open and scales 0 -> 1 the moment it reads
  ``true``. It is sent when a request arrives after a quiet spell (before its
  call to vLLM is even refused) and when the first request is held for a
  predictor that is not there. KEDA ignores ``false`` on the stream, so nothing
  else is sent.
- IsActive (KEDA's poll): requests in flight, or one ended less than
  REWARD_GATEWAY_SCALER_ACTIVE_SECONDS ago. KEDA scales to zero once it has been
  false for the ScaledObject's cooldownPeriod.
- GetMetricSpec / GetMetrics: ``inflight-items`` (or ``-requests``), held ones
  included, against a target per predictor replica: the HPA KEDA makes wants
  ceil(value / target) replicas.

Several replicas: KEDA does not add up scalers. A trigger has one address; its
gRPC client resolves it and sends each call to one address in turn (round robin),
and its stream to one. So every replica answers for all of them: with
REWARD_GATEWAY_SCALER_PEERS (a headless Service over the gateway's pods) a
replica asks each peer for its own figures (``PEER_KEY`` in the request's
metadata: answer for yourself only) and adds them up, and keeps a stream open to
each peer, passing a peer's ``true`` on to KEDA's stream. Whichever replica KEDA
reaches, it hears of a request held by any of them at once.

The messages are built from a descriptor written out after KEDA's proto (same
package, names and numbers), so no generated code is needed: grpcio serves them,
protobuf encodes them. Imported only where REWARD_GATEWAY_SCALER_PORT is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from reward_gateway.config.gateway import ScalerConfig
from reward_gateway.signals.load import Load

logger = logging.getLogger("reward_gateway")

SERVICE = "externalscaler.ExternalScaler"
# In a ScaledObjectRef's scalerMetadata: the call comes from a peer replica, whose
# id is the value; answer for this replica alone (and as nothing, to itself).
PEER_KEY = "reward-gateway-peer"
# A peer's answer to GetMetrics carries its activity as a second value of this name.
PEER_ACTIVE = "active"
PEER_REFRESH_S = 5.0  # how often the peers' name is resolved again
# A peer that was away (starting, restarting) is reached again within 2 s, not
# after gRPC's default backoff, which grows to two minutes: its pushes would be lost.
PEER_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
GRACE_S = 1.0


def _external_scaler_messages() -> dict[str, type]:
    """Message classes for KEDA's external scaler protocol (proto3), by short name."""
    proto = descriptor_pb2.FileDescriptorProto(name="externalscaler.proto", package="externalscaler", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    optional, repeated = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def message(name: str, *fields: tuple[str, int, int, int, str]):
        described = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            added = described.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                added.type_name = type_name
        return described

    ref = message(
        "ScaledObjectRef",
        ("name", 1, optional, F.TYPE_STRING, ""),
        ("namespace", 2, optional, F.TYPE_STRING, ""),
        ("scalerMetadata", 3, repeated, F.TYPE_MESSAGE, ".externalscaler.ScaledObjectRef.ScalerMetadataEntry"),
    )
    entry = ref.nested_type.add(name="ScalerMetadataEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=optional, type=F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=optional, type=F.TYPE_STRING)
    message("IsActiveResponse", ("result", 1, optional, F.TYPE_BOOL, ""))
    message("GetMetricSpecResponse", ("metricSpecs", 1, repeated, F.TYPE_MESSAGE, ".externalscaler.MetricSpec"))
    message(
        "GetMetricsRequest",
        ("scaledObjectRef", 1, optional, F.TYPE_MESSAGE, ".externalscaler.ScaledObjectRef"),
        ("metricName", 2, optional, F.TYPE_STRING, ""),
    )
    message("GetMetricsResponse", ("metricValues", 1, repeated, F.TYPE_MESSAGE, ".externalscaler.MetricValue"))
    # A metric's name and a number, as an integer or (where non-zero, preferred by KEDA) a float.
    for name, number in (("MetricSpec", "targetSize"), ("MetricValue", "metricValue")):
        message(
            name,
            ("metricName", 1, optional, F.TYPE_STRING, ""),
            (number, 2, optional, F.TYPE_INT64, ""),
            (number + "Float", 3, optional, F.TYPE_DOUBLE, ""),
        )
    # a pool of its own: the process's default pool may already know a file of that name
    classes = message_factory.GetMessages([proto], pool=descriptor_pool.DescriptorPool())
    return {name.rsplit(".", 1)[-1]: cls for name, cls in classes.items()}


MESSAGES = _external_scaler_messages()
# (request message, streaming) of each method, by name: for servers and clients alike.
METHODS = {
    "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
    "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
    "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
    "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
}


def method_handlers(behaviours: dict) -> grpc.GenericRpcHandler:
    """A generic handler serving ``behaviours`` (method name -> function) as KEDA's service."""
    handlers = {}
    for name, behaviour in behaviours.items():
        request, _, streaming = METHODS[name]
        make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
        handlers[name] = make(
            behaviour,
            request_deserializer=MESSAGES[request].FromString,
            response_serializer=lambda message: message.SerializeToString(),
        )
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def stub(channel: grpc.aio.Channel, name: str):
    """A callable for one of the service's methods on an asyncio channel."""
    _, response, streaming = METHODS[name]
    make = channel.unary_stream if streaming else channel.unary_unary
    return make(
        f"/{SERVICE}/{name}",
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=MESSAGES[response].FromString,
    )


class _Wakes:
    """Streams waiting for a ``true``: each has a one-slot queue, so wakes coalesce."""

    def __init__(self) -> None:
        self.queues: set[asyncio.Queue[None]] = set()

    def wake(self) -> None:
        for queue in self.queues:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)

    @contextlib.contextmanager
    def listen(self):
        queue: asyncio.Queue[None] = asyncio.Queue(maxsize=1)
        self.queues.add(queue)
        try:
            yield queue
        finally:
            self.queues.discard(queue)


class Scaler:
    """The gateway's external scaler, on the gateway's event loop."""

    def __init__(self, config: ScalerConfig, load: Load, listen_address: str = ""):
        self.config = config
        self.load = load
        # REWARD_GATEWAY_LISTEN_ADDRESS, as the HTTP port's; empty: all interfaces
        self.listen_address = listen_address
        self.id = uuid.uuid4().hex  # tells a peer's call to itself from a call to another replica
        self.keda_streams = _Wakes()  # KEDA's: told of this replica's wakes and its peers'
        self.peer_streams = _Wakes()  # peers': told of this replica's own wakes only
        self.wakes = 0  # of this replica's own, for tests
        self.server: grpc.aio.Server | None = None
        self.peers = Peers(config, self) if config.peers else None
        load.on_first = self._arrived
        load.on_held = self.wake

    # this replica

    def active_here(self) -> bool:
        return self.load.requests > 0 or time.monotonic() - self.load.idle_since < self.config.active_s

    def value_here(self) -> float:
        return float(self.load.items if self.config.metric == "items" else self.load.requests)

    def wake(self) -> None:
        """The predictor is needed now: tell every stream (KEDA scales 0 -> 1 on it)."""
        self.wakes += 1
        self.keda_streams.wake()
        self.peer_streams.wake()

    def _arrived(self) -> None:
        # The first request after a quiet spell: wake before its call is even refused.
        if not self.active_here():
            self.wake()

    # all replicas

    async def state(self) -> tuple[bool, float]:
        """(active, value) over every replica this one knows of."""
        active, value = self.active_here(), self.value_here()
        if self.peers is not None:
            for peer_active, peer_value in await self.peers.states():
                active, value = active or peer_active, value + peer_value
        return active, value

    # KEDA's service

    def _peer(self, ref) -> str | None:
        return ref.scalerMetadata.get(PEER_KEY)

    async def is_active(self, ref, context) -> object:
        if self._peer(ref) is not None:
            return MESSAGES["IsActiveResponse"](result=self._peer(ref) != self.id and self.active_here())
        active, _ = await self.state()
        return MESSAGES["IsActiveResponse"](result=active)

    async def stream_is_active(self, ref, context) -> AsyncIterator[object]:
        peer = self._peer(ref)
        if peer == self.id:  # itself, through the peers' name: nothing to tell
            await asyncio.Event().wait()
        wakes = self.peer_streams if peer is not None else self.keda_streams
        if peer is None:
            logger.info("KEDA holds StreamIsActive open for %s/%s", ref.namespace, ref.name)
        with wakes.listen() as woken:
            active = self.active_here() if peer is not None else (await self.state())[0]
            yield MESSAGES["IsActiveResponse"](result=active)
            while True:
                await woken.get()
                yield MESSAGES["IsActiveResponse"](result=True)

    async def get_metric_spec(self, ref, context) -> object:
        spec = MESSAGES["MetricSpec"](metricName=self.config.metric_name, targetSizeFloat=self.config.target)
        return MESSAGES["GetMetricSpecResponse"](metricSpecs=[spec])

    async def get_metrics(self, request, context) -> object:
        value = MESSAGES["MetricValue"]
        peer = self._peer(request.scaledObjectRef)
        if peer is not None:
            mine = peer != self.id
            values = [
                value(metricName=self.config.metric_name, metricValueFloat=self.value_here() if mine else 0.0),
                value(metricName=PEER_ACTIVE, metricValueFloat=1.0 if mine and self.active_here() else 0.0),
            ]
            return MESSAGES["GetMetricsResponse"](metricValues=values)
        _, total = await self.state()
        name = request.metricName or self.config.metric_name
        return MESSAGES["GetMetricsResponse"](metricValues=[value(metricName=name, metricValueFloat=total)])

    # serving

    async def start(self) -> None:
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            [
                method_handlers(
                    {
                        "IsActive": self.is_active,
                        "StreamIsActive": self.stream_is_active,
                        "GetMetricSpec": self.get_metric_spec,
                        "GetMetrics": self.get_metrics,
                    }
                )
            ]
        )
        # StreamMetricSpec (optional in KEDA's proto) is left out: gRPC answers
        # Unimplemented, and KEDA then keeps reading GetMetricSpec.
        host = self.listen_address or "::"
        self.server.add_insecure_port(f"[{host}]:{self.config.port}" if ":" in host else f"{host}:{self.config.port}")
        await self.server.start()
        if self.peers is not None:
            self.peers.start()
        logger.info("KEDA external scaler on port %d (%s, target %g)", self.config.port, self.config.metric_name,
                    self.config.target)  # fmt: skip

    async def stop(self) -> None:
        if self.peers is not None:
            await self.peers.stop()
        if self.server is not None:
            await self.server.stop(GRACE_S)


class Peers:
    """The other replicas, found through REWARD_GATEWAY_SCALER_PEERS: names (a headless
    Service's, one address per ready pod) with an optional ``:port`` (else the
    scaler's own port), comma-separated. Each address found gets a channel, a stream
    whose ``true`` is passed on to KEDA's streams, and a GetMetrics per state().
    """

    def __init__(self, config: ScalerConfig, scaler: Scaler):
        self.config = config
        self.scaler = scaler
        self.ref = MESSAGES["ScaledObjectRef"](scalerMetadata={PEER_KEY: scaler.id})
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.streams: dict[str, asyncio.Task] = {}
        self.refresher: asyncio.Task | None = None
        self.refreshing = asyncio.Lock()  # the refresher and a KEDA call may both refresh

    def start(self) -> None:
        self.refresher = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def stop(self) -> None:
        tasks = [task for task in (self.refresher, *self.streams.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in self.channels.values():
            await channel.close()
        self.channels.clear()
        self.streams.clear()

    async def states(self) -> list[tuple[bool, float]]:
        """Each reachable peer's (active, value); one that does not answer in time counts as nothing."""
        await self.refresh()
        request = MESSAGES["GetMetricsRequest"](scaledObjectRef=self.ref, metricName=self.config.metric_name)

        async def ask(target: str, channel: grpc.aio.Channel) -> tuple[bool, float]:
            try:
                answer = await stub(channel, "GetMetrics")(request, timeout=self.config.peer_timeout_s)
            except grpc.aio.AioRpcError as error:
                logger.warning("scaler peer %s did not answer: %s", target, error.code().name)
                return False, 0.0
            values = {value.metricName: value.metricValueFloat for value in answer.metricValues}
            return values.get(PEER_ACTIVE, 0.0) > 0, values.get(self.config.metric_name, 0.0)

        return list(await asyncio.gather(*(ask(target, channel) for target, channel in self.channels.items())))

    async def refresh(self) -> None:
        """Resolve the peers' names again: channels and streams for new addresses, none for gone ones."""
        async with self.refreshing:
            found = await self._resolve()
            if found:  # else resolution failed: keep the peers known so far
                await self._track(found)

    async def _track(self, found: set[str]) -> None:
        for target in set(self.channels) - found:
            self.streams.pop(target).cancel()
            await self.channels.pop(target).close()
        for target in found - set(self.channels):
            channel = self.channels[target] = grpc.aio.insecure_channel(target, options=PEER_CHANNEL_OPTIONS)
            self.streams[target] = asyncio.get_running_loop().create_task(self._follow(target, channel))

    async def _resolve(self) -> set[str]:
        loop = asyncio.get_running_loop()
        found: set[str] = set()
        for entry in self.config.peers.split(","):  # type: ignore[union-attr]
            host, _, port = entry.strip().rpartition(":") if entry.count(":") == 1 else (entry.strip(), "", "")
            port = port or str(self.config.port)
            try:
                addresses = await loop.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except (OSError, ValueError) as error:
                logger.warning("scaler peers %r not resolved: %s", entry, error)
                continue
            for family, _, _, _, address in addresses:
                ip = address[0]
                found.add(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
        return found

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # never let the refresher die: peers would stop being heard
                logger.exception("scaler peers not refreshed")
            await asyncio.sleep(PEER_REFRESH_S)

    async def _follow(self, target: str, channel: grpc.aio.Channel) -> None:
        """Pass a peer's ``true`` on to KEDA's streams here, reconnecting while the peer is known."""
        while True:
            try:
                async for answer in stub(channel, "StreamIsActive")(self.ref):
                    if answer.result:
                        self.scaler.keda_streams.wake()
            except grpc.aio.AioRpcError as error:
                logger.debug("scaler peer %s stream ended: %s", target, error.code().name)
            await asyncio.sleep(PEER_REFRESH_S / 5)
