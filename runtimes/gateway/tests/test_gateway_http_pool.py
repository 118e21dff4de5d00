"""The gateway's upstream HTTP client against real sockets, including upstreams that misbehave.

Each test runs a small TCP server whose behaviour per request the test decides
(answer, close without answering, answer chunked, stall), so the cases a kept-
alive client gets wrong in production are exercised for real: an upstream that
closes idle connections, says Connection: close, cuts an answer short, or
answers after the caller gave up. Events are ordered by signals (a request
arriving, a connection ending), never by sleeping.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from reward_gateway.upstream.http_pool import DEAD_PEER_S, BrokenAnswer, HttpPool
from reward_testing import pki
from reward_testing.ports import free_port


@dataclass
class Request:
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which accepted connection it came on, from 1
    number: int  # its place on that connection, from 1


def answer(body: bytes, status: int = 200, extra: str = "") -> bytes:
    reason = {200: "OK", 503: "Service Unavailable"}.get(status, "Status")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


# What the server does for one request: bytes to write, or None to close without answering.
Behaviour = Callable[[Request], Awaitable[bytes | None]]


async def echo(request: Request) -> bytes:
    return answer(request.body)


@dataclass
class Server:
    behaviour: Behaviour
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    _ended: dict[int, asyncio.Future[str]] = field(default_factory=dict)

    def ended(self, connection: int) -> asyncio.Future[str]:
        """Resolves when the server is done with a connection: 'by the client' when
        the client closed it, 'by the server' when the behaviour did."""
        return self._ended.setdefault(connection, asyncio.get_running_loop().create_future())

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, number = self.connections, 0
        how = "by the server"
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode().split("\r\n")
                headers = dict(line.split(": ", 1) for line in lines if line)
                body = await reader.readexactly(int(headers.get("Content-Length", "0")))
                number += 1
                request = Request(request_line.split(" ")[1], headers, body, connection, number)
                self.requests.append(request)
                data = await self.behaviour(request)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                if b"Connection: close" in data:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            how = "by the client"
        finally:
            writer.close()
            ended = self.ended(connection)
            if not ended.done():  # cancelled where a test gave up waiting
                ended.set_result(how)


def run(
    behaviour: Behaviour, test: Callable[[Server, str], Awaitable[None]], tls: ssl.SSLContext | None = None
) -> Server:
    async def main() -> Server:
        server = Server(behaviour)
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
        port = listening.sockets[0].getsockname()[1]
        # A bound, not a pace: a pool that never gives the signal a test waits
        # for fails here instead of hanging.
        async with listening, asyncio.timeout(30):
            await test(server, f"{'https' if tls else 'http'}://127.0.0.1:{port}")
        return server

    return asyncio.run(main())


def answered_on_one_connection(answers: dict[bytes, bytes]) -> Callable[[Server, str], Awaitable[None]]:
    """A test: each body in turn gets its answer (status 200), all on one kept-alive connection."""

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        for body, expected in answers.items():
            assert await pool.post_json("/classify", body) == (200, expected)
        assert server.connections == 1
        await pool.close()

    return test


def test_connections_are_kept_alive_and_reused():
    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        for i in range(20):
            assert await pool.post_json("/classify", b'{"i":%d}' % i) == (200, b'{"i":%d}' % i)
        assert server.connections == 1
        answers = await asyncio.gather(*(pool.post_json("/classify", b"[%d]" % i) for i in range(8)))
        assert answers == [(200, b"[%d]" % i) for i in range(8)]
        assert server.connections <= 8
        await pool.close()

    run(echo, test)


def test_idle_connections_are_capped():
    arrived, all_in = [], asyncio.Event()

    async def echo_once_all_six_are_in(request):
        # No call is answered before the sixth arrives, so none frees its
        # connection for another: six calls in flight on six connections.
        arrived.append(request)
        if len(arrived) == 6:
            all_in.set()
        await all_in.wait()
        return answer(request.body)

    async def test(server, url):
        pool = HttpPool(url, max_idle=2, connect_timeout_s=5)
        await asyncio.gather(*(pool.post_json("/classify", b"{}") for _ in range(6)))
        assert server.connections == 6
        assert len(pool.idle) == 2
        await pool.close()

    run(echo_once_all_six_are_in, test)


def test_a_kept_alive_connection_closed_by_the_upstream_is_retried_on_a_new_one():
    # The upstream's idle timeout closes a connection just as the pool reuses it:
    # it reads the request and closes without answering. Nothing was answered, so
    # the call goes again on a fresh connection instead of failing a training step.
    async def closes_second_request(request):
        return None if request.number == 2 else answer(request.body)

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        assert await pool.post_json("/classify", b"1") == (200, b"1")
        assert await pool.post_json("/classify", b"2") == (200, b"2")
        assert [(r.connection, r.number, r.body) for r in server.requests] == [(1, 1, b"1"), (1, 2, b"2"), (2, 1, b"2")]
        await pool.close()

    run(closes_second_request, test)


def test_a_call_is_sent_at_most_twice_when_reused_connections_keep_closing():
    # An upstream that drops every call on a reused connection unanswered (it is
    # going down): each call is tried on one reused connection and one new one,
    # not on every idle connection in turn.
    async def drops_reused(request):
        return None if request.number > 1 else answer(request.body)

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        await asyncio.gather(*(pool.post_json("/classify", b"warm") for _ in range(4)))
        assert len(pool.idle) == 4
        server.requests.clear()
        assert await pool.post_json("/classify", b"x") == (200, b"x")
        assert [r.body for r in server.requests] == [b"x", b"x"]
        await pool.close()

    run(drops_reused, test)


def test_connection_close_from_the_upstream_is_honoured():
    async def closing(request):
        return answer(request.body, extra="Connection: close\r\n")

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        for i in range(3):
            assert await pool.post_json("/classify", b"%d" % i) == (200, b"%d" % i)
        assert server.connections == 3
        assert not pool.idle
        await pool.close()

    run(closing, test)


def test_a_chunked_answer_is_read_whole():
    async def chunked(request):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head + b'5\r\n{"a":\r\n3\r\n[1]\r\n1\r\n}\r\n0\r\n\r\n'

    run(chunked, answered_on_one_connection({b"{}": b'{"a":[1]}', b"[]": b'{"a":[1]}'}))


def test_an_answer_cut_short_fails_and_is_not_sent_again():
    async def crashes_mid_second_answer(request):
        if request.body == b"1":
            return answer(request.body)
        # Half an answer, then the connection closes (the server closes after
        # writing anything that says Connection: close).
        return b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\n{"partial":'

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        assert await pool.post_json("/classify", b"1") == (200, b"1")
        with pytest.raises(BrokenAnswer):  # on the kept-alive connection
            await pool.post_json("/classify", b"2")
        with pytest.raises(BrokenAnswer):  # on a fresh one
            await pool.post_json("/classify", b"3")
        # Each call was sent once: the upstream began answering, so it may have
        # done the work, and the call is not repeated behind the caller's back.
        assert [r.body for r in server.requests] == [b"1", b"2", b"3"]
        await pool.close()

    run(crashes_mid_second_answer, test)


@pytest.mark.parametrize("garbage", [b"SSH-2.0-OpenSSH_9.6\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"])
def test_an_answer_that_is_not_http_fails_and_is_not_sent_again(garbage):
    async def speaks_garbage(request):
        return answer(request.body) if request.body == b"1" else garbage

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        assert await pool.post_json("/classify", b"1") == (200, b"1")
        with pytest.raises(BrokenAnswer):
            await pool.post_json("/classify", b"2")
        assert [r.body for r in server.requests] == [b"1", b"2"]
        await pool.close()

    run(speaks_garbage, test)


def test_a_call_given_up_on_does_not_leak_its_answer_into_the_next():
    first_arrived, release_first = asyncio.Event(), asyncio.Event()

    async def answers_first_when_released(request):
        if request.body == b"first":
            first_arrived.set()
            await release_first.wait()
        return answer(request.body)

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        call = asyncio.create_task(pool.post_json("/classify", b"first"))
        await first_arrived.wait()
        call.cancel()  # what the caller's timeout does once the call is sent
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await pool.post_json("/classify", b"second") == (200, b"second")
        release_first.set()  # the late answer to "first" goes out...
        # ...to a connection the pool closed when the call was given up on, so
        # no later call can read it as its own.
        assert await server.ended(1) == "by the client"
        assert await pool.post_json("/classify", b"third") == (200, b"third")
        assert [(r.connection, r.body) for r in server.requests] == [(1, b"first"), (2, b"second"), (2, b"third")]
        await pool.close()

    run(answers_first_when_released, test)


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="Linux's per-socket keep-alive options")
def test_every_connection_probes_its_peer_so_a_vanished_one_is_noticed_within_the_bound():
    """A vLLM pod that vanishes without a reset (its network torn down first, its node gone) sends nothing; a
    call waiting for its answer sends nothing either. The kernel's keep-alive probes are what notice it, at
    most DEAD_PEER_S after the peer's last packet (the pipeline's documented bound counts on 20 s)."""

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        await pool.post_json("/classify", b"{}")
        await pool.connect_idle()  # the held calls' probe opens its connections the same way
        assert len(pool.idle) == 2
        for connection in pool.idle:
            sock = connection.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            idle, interval, probes = (
                sock.getsockopt(socket.IPPROTO_TCP, option)
                for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
            )
            assert idle + interval * probes == DEAD_PEER_S <= 20
        await pool.close()

    run(echo, test)


def test_nothing_listening_raises_connection_refused():
    async def main():
        pool = HttpPool(f"http://127.0.0.1:{free_port()}", max_idle=8, connect_timeout_s=5)
        with pytest.raises(ConnectionRefusedError):
            await pool.post_json("/classify", b"{}")

    asyncio.run(main())


def test_requests_go_below_the_url_path_with_the_host_and_json_headers():
    async def test(server, url):
        pool = HttpPool(url + "/openai/", max_idle=8, connect_timeout_s=5)
        await pool.post_json("/classify", b"{}")
        await pool.post_json("pooling", b"{}")
        first, second = server.requests
        assert (first.target, second.target) == ("/openai/classify", "/openai/pooling")
        assert first.headers["Host"] == url.removeprefix("http://")
        assert first.headers["Content-Type"] == "application/json"
        assert first.headers["Content-Length"] == "2"
        await pool.close()

    run(echo, test)


def test_statuses_come_back_as_they_are():
    async def unavailable(request):
        return answer(b'{"error":"loading"}', status=503)

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        assert await pool.post_json("/classify", b"{}") == (503, b'{"error":"loading"}')
        await pool.close()

    run(unavailable, test)


@pytest.mark.parametrize("url", ["ftp://host/", "http://", "host:8080", "http://bücher.example:80"])
def test_only_http_urls_with_ascii_hosts_are_accepted(url):
    with pytest.raises(ValueError, match=r"not an http|ASCII"):
        HttpPool(url, max_idle=1, connect_timeout_s=1)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return pki.create(tmp_path_factory.mktemp("pki"))


def _serving(certificates) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.serving_cert, certificates.serving_key)
    return context


def test_https_upstream_is_verified_against_the_trusted_cas(certificates, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca_cert))  # as a mounted CA bundle would be

    run(echo, answered_on_one_connection({b"{}": b"{}", b"[]": b"[]"}), tls=_serving(certificates))


def test_https_upstream_with_an_unknown_ca_is_refused(certificates):
    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        with pytest.raises(ssl.SSLCertVerificationError):  # an OSError: the gateway answers 503
            await pool.post_json("/classify", b"{}")

    run(echo, test, tls=_serving(certificates))


def test_a_connection_that_speaks_unasked_is_not_reused():
    # An upstream that writes on an idle connection (a timeout notice, say) has
    # left it in an unknown state: the next call must not read that as its answer.
    async def answers_twice(request):
        return answer(request.body) + answer(b'{"stray":true}')

    async def test(server, url):
        pool = HttpPool(url, max_idle=8, connect_timeout_s=5)
        assert await pool.post_json("/classify", b"1") == (200, b"1")
        # The stray answer arrived on the idle connection: the pool closed it.
        assert await server.ended(1) == "by the client"
        assert await pool.post_json("/classify", b"2") == (200, b"2")
        assert server.connections == 2
        await pool.close()

    run(answers_twice, test)
