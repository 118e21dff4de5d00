"""Keep-alive HTTP/1.1 POSTs to one upstream, on asyncio protocols and httptools.

The gateway sends every score through one upstream (vLLM, or the sidecar in
front of it), always the same kind of call: a JSON POST, a JSON answer with a
length. aiohttp's general-purpose client spent about 60% of the gateway's CPU
per request on that (URL objects, header multidicts, payload registry, timers,
response objects), and the gateway's CPU per request is what it adds to every
reward when vLLM answers a batch at once. This does only that call: a request
head formatted once per path, httptools (the parser uvicorn uses) for the
answer, and idle connections kept for reuse.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from urllib.parse import urlsplit

import httptools

DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024

# A peer that vanishes without a word (its pod's network torn down before its process, its link cut, its
# node gone) sends no FIN or reset, and a connection that waits for an answer sends nothing either: without
# keep-alive it would wait for the call's whole timeout (minutes, for a batch of generations). TCP keep-alive
# probes a connection after DEAD_PEER_IDLE_S without a packet, every DEAD_PEER_INTERVAL_S, and ends it after
# DEAD_PEER_PROBES unanswered: a vanished peer is noticed at most DEAD_PEER_S after its last packet. A live
# peer's kernel answers the probes however long its process takes, so no slow answer is cut. (No
# TCP_USER_TIMEOUT: it would also end a connection whose peer reads slowly, a zero window, which is load.)
DEAD_PEER_IDLE_S = 5
DEAD_PEER_INTERVAL_S = 5
DEAD_PEER_PROBES = 3
DEAD_PEER_S = DEAD_PEER_IDLE_S + DEAD_PEER_INTERVAL_S * DEAD_PEER_PROBES
_KEEPALIVE_OPTIONS = tuple(
    (level, getattr(socket, name), value)
    for level, name, value in (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", DEAD_PEER_IDLE_S),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", DEAD_PEER_INTERVAL_S),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", DEAD_PEER_PROBES),
    )
    if hasattr(socket, name)  # Linux has them all; the gateway's tests also run elsewhere
)


class UpstreamClosed(ConnectionError):
    """The upstream closed the connection before it answered."""


class BrokenAnswer(Exception):
    """The upstream began answering, then cut the answer short or wrote something
    that is not HTTP. Not an OSError: the upstream was reached and may have done
    the work, so the call is not sent again (nor retried as unreachable)."""


class AnswerTooLarge(BrokenAnswer):
    """The upstream's answer outgrew what its request can be answered with; not
    buffered further (the gateway's memory budget counts on that bound)."""


class _Connection(asyncio.Protocol):
    """One connection: at most one request in flight, answers parsed as they arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.chunks: list[bytes] = []
        self.size = 0  # of the current answer's body
        self.max_size = 0
        self.received = False  # any byte of the current answer
        self.reusable = True

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(BrokenAnswer(f"unreadable HTTP answer: {error}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        # exc: the socket's error, such as ETIMEDOUT when keep-alive found the peer gone; None for its FIN
        how = "closed the connection" if exc is None else f"was lost ({exc})"
        if self.received:
            self._fail(BrokenAnswer(f"the upstream {how} in the middle of its answer"))
        else:
            self._fail(UpstreamClosed(f"the upstream {how}"))
        # The parser holds this protocol (its callbacks): a cycle that, with the
        # server's calm collector, would keep every closed connection for hours.
        self.parser = None  # type: ignore[assignment]
        self.transport = None

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self.answer is None or self.answer.done():
            # An answer nobody asked for (a second one, or an idle connection's
            # timeout notice): the connection's state is unknown; not used again.
            self._fail(UpstreamClosed("the upstream sent an answer to no request"))

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > self.max_size:
            if self.reusable:  # the first chunk over: fail once, keep nothing
                self.chunks = []
                self._fail(AnswerTooLarge(f"the answer is over {self.max_size} bytes, more than its request allows"))
            return
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.reusable = self.reusable and self.parser.should_keep_alive()
        if self.answer is not None and not self.answer.done():
            self.answer.set_result((self.parser.get_status_code(), b"".join(self.chunks)))

    # use

    def send(self, data: bytes, max_answer_bytes: int) -> asyncio.Future[tuple[int, bytes]]:
        self.answer = asyncio.get_running_loop().create_future()
        self.chunks = []
        self.size, self.max_size = 0, max_answer_bytes
        self.received = False
        self.transport.write(data)  # type: ignore[union-attr]
        return self.answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        self.reusable = False
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class HttpPool:
    """POSTs to one base URL over kept-alive connections (at most ``max_idle`` idle)."""

    def __init__(self, base_url: str, max_idle: int, connect_timeout_s: float):
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.prefix = url.path.rstrip("/")
        authority = url.netloc.rsplit("@", 1)[-1]  # never send userinfo as a Host
        if not authority.isascii():
            raise ValueError(f"write the upstream host in ASCII (IDNA): {base_url!r}")
        self.host_header = authority.encode()
        self.max_idle = max_idle
        self.connect_timeout_s = connect_timeout_s
        self.idle: deque[_Connection] = deque()
        self.heads: dict[str, bytes] = {}

    async def post_json(
        self, path: str, body: bytes, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    ) -> tuple[int, bytes]:
        """POST JSON bytes; returns status and body. Raises OSError subclasses when
        the upstream cannot be reached or drops the connection unanswered,
        BrokenAnswer when it answered in part, not in HTTP, or with a body over
        max_answer_bytes; cancellation (a timeout around this call) closes the
        connection it was using."""
        data = self._head(path) + str(len(body)).encode() + b"\r\n\r\n" + body
        connection = self._idle_connection()
        if connection is not None:
            try:
                return await self._exchange(connection, data, max_answer_bytes)
            except UpstreamClosed:
                # A kept-alive connection the upstream closed as we reused it
                # (its idle timeout): nothing was answered, so it is safe to send
                # once more, on a new connection. One that answered part raised
                # BrokenAnswer instead, and is not.
                pass
        return await self._exchange(await self._connect(), data, max_answer_bytes)

    async def connect_idle(self, timeout_s: float | None = None) -> None:
        """Open a connection and keep it idle for the next call; raises OSError where the
        upstream cannot be reached (how a call held for it learns that it can be)."""
        connection = await self._connect(timeout_s)
        if len(self.idle) < self.max_idle:
            self.idle.append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        while self.idle:
            self.idle.pop().close()

    def _idle_connection(self) -> _Connection | None:
        while self.idle:
            connection = self.idle.pop()  # the most recently used is the least likely to be closed
            if connection.reusable:  # not closed by the upstream while idle
                return connection
        return None

    def _head(self, path: str) -> bytes:
        head = self.heads.get(path)
        if head is None:
            target = (self.prefix + "/" + path.lstrip("/")).encode()
            head = self.heads[path] = (
                b"POST " + target + b" HTTP/1.1\r\nHost: " + self.host_header + b"\r\n"
                b"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: "
            )
        return head

    async def _connect(self, timeout_s: float | None = None) -> _Connection:
        loop = asyncio.get_running_loop()
        timeout_s = self.connect_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        except TimeoutError:
            raise ConnectionError(f"no connection within {timeout_s:g} s") from None
        sock = connection.transport.get_extra_info("socket")  # type: ignore[union-attr]
        for option in _KEEPALIVE_OPTIONS:
            sock.setsockopt(*option)
        return connection

    async def _exchange(self, connection: _Connection, data: bytes, max_answer_bytes: int) -> tuple[int, bytes]:
        try:
            answer = await connection.send(data, max_answer_bytes)
        except BaseException:
            connection.close()  # an answer may still come; it must not meet the next request
            raise
        if connection.reusable and len(self.idle) < self.max_idle:
            self.idle.append(connection)
        else:
            connection.close()
        return answer
