"""The ``https://`` (and ``http://``) side of ``store``: an input file a web server serves, read with httpx.

A pass over the input is one GET, streamed (never the file whole in memory); where the connection is lost
mid-way and the server takes Range requests, the pass goes on with a ranged GET from the byte it reached.
Every response of a run is pinned to what the first one said of the file: its ETag, or without one its
Last-Modified and size, so a file replaced while the run reads it stops the run instead of mixing two
datasets in one output. A Parquet input (``parquet``) is read at random (its footer first) through ranged
GETs, which the server must take.

Credentials in the URI (its user information, or a presigned URL's query string) are sent, never said: the
messages and the manifest name the URI without its user information, query and fragment (``public_name``).
A 4xx stops the run for good (exit 2); a lost connection or a 5xx, after ``ATTEMPTS`` tries, may pass (exit 3).
"""

from __future__ import annotations

import hashlib
import io
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from reward_gateway_client.batch.errors import BatchError

ATTEMPTS = 3  # tries of one GET while the server is away or answers 5xx, 408 or 429
BACKOFF_S = 0.5  # the pause before the second try, doubled before each later one
TIMEOUT = httpx.Timeout(30.0, connect=15.0)
BLOCK = 1 << 20  # bytes read from a response at once
# Statuses that stop the run, in a user's words (any other 4xx: "refused")
CAUSES = {
    401: "the server asks for credentials (write them in the URI, or use a presigned URL)",
    403: "access refused (a presigned URL may have expired)",
    404: "no such file",
    410: "no such file",
    412: "the file was replaced while this run read it: the input changed",
}


def public_name(uri: str) -> str:
    """``uri`` as messages and the manifest say it: without user information, query string or fragment."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


@dataclass(frozen=True)
class Pin:
    """What a response says of the file it serves; a run's responses must all say the same."""

    etag: str | None
    last_modified: str | None
    size: int | None

    @classmethod
    def of(cls, response: httpx.Response) -> Pin:
        size: int | None = None
        if response.status_code == 206:  # Content-Range: bytes START-END/SIZE
            total = response.headers.get("content-range", "").rpartition("/")[2]
            size = int(total) if total.isdigit() else None
        elif (length := response.headers.get("content-length", "")).isdigit():
            size = int(length)
        return cls(response.headers.get("etag"), response.headers.get("last-modified"), size)

    def moved(self, other: Pin) -> str | None:
        """What moved between this pin and ``other``, in words; None where it is the same file."""
        if self.etag is not None:
            return None if other.etag == self.etag else "its ETag moved"
        if (other.last_modified, other.size) != (self.last_modified, self.size):
            return "its Last-Modified or size moved"
        return None


class HttpInput:
    """An input file at an ``https://`` or ``http://`` URI."""

    def __init__(self, uri: str):
        self.uri = uri
        self.pin: Pin | None = None  # from the run's first response

    @classmethod
    def of(cls, uri: str) -> HttpInput:
        parts = urlsplit(uri)
        if not parts.hostname or parts.path in ("", "/"):
            raise BatchError(f"the input {public_name(uri)} names no file: write https://host/path", retry=False)
        return cls(uri)

    @property
    def name(self) -> str:
        return public_name(self.uri)

    def lines(self) -> Iterator[str]:
        with _client() as client, _Reading(self, client) as data:
            yield from io.TextIOWrapper(data, encoding="utf-8")

    def digest(self) -> str:
        digest = hashlib.sha256()
        with _client() as client, _Reading(self, client) as data:
            while block := data.read(BLOCK):
                digest.update(block)
        return digest.hexdigest()

    @contextmanager
    def ranges(self) -> Iterator[_Ranges]:
        """The file read at random, a ranged GET a read (``parquet``); refused where the server takes no Range."""
        with _client() as client:
            yield _Ranges(self, client)

    def get(self, client: httpx.Client, start: int = 0, end: int | None = None, stream: bool = True) -> httpx.Response:
        """A GET of the file (from ``start``, to ``end`` inclusive where given), its status checked and its
        validators held to the run's pin; tried ``ATTEMPTS`` times while the server is away or failing."""
        headers = {"Accept-Encoding": "identity"}  # the file's own bytes: its sha256, and byte ranges of it
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        last = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                response = client.send(client.build_request("GET", self.uri, headers=headers), stream=stream)
            except httpx.TransportError as error:
                if _tls_failed(error):
                    raise self.failure(f"TLS with {self.origin} failed: {error}", retry=False) from None
                last = f"{self.origin} did not answer: {error}"
                continue
            status = response.status_code
            if status >= 500 or status in (408, 429):
                response.close()
                last = f"{self.origin} answered {status} {response.reason_phrase}"
                continue
            if status >= 400:
                response.close()
                cause = CAUSES.get(status, "refused")
                raise self.failure(f"{cause} ({self.origin} answered {status} {response.reason_phrase})", retry=False)
            self.hold(response)
            return response
        raise self.failure(f"{last} ({ATTEMPTS} tries)", retry=True)

    def hold(self, response: httpx.Response) -> None:
        """Pins the run to the first response's validators; a later response that says another file stops it."""
        seen = Pin.of(response)
        if self.pin is None:
            self.pin = seen
        elif moved := self.pin.moved(seen):
            response.close()
            raise self.failure(f"the file was replaced while this run read it ({moved}): the input changed", False)

    @property
    def origin(self) -> str:
        parts = urlsplit(self.uri)
        return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], "", "", ""))

    def failure(self, cause: str, retry: bool) -> BatchError:
        return BatchError(self.blank(f"cannot read the input {self.name}: {cause}"), retry)

    def blank(self, text: str) -> str:
        """``text`` without the URI's secrets (an error may quote the URL it was sent to)."""
        parts = urlsplit(self.uri)
        text = text.replace(self.uri, self.name)
        for secret in (parts.query, parts.password, unquote(parts.password or "")):
            if secret:
                text = text.replace(secret, "***")
        return text


def _client() -> httpx.Client:
    return httpx.Client(timeout=TIMEOUT, follow_redirects=True)


def _tls_failed(error: BaseException) -> bool:
    """Whether a transport error is a TLS failure (a certificate refused): another try would fail alike."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class _Reading:
    """One pass over the file as a buffered binary file; a file that is not UTF-8 text leaves as ``BatchError``."""

    def __init__(self, source: HttpInput, client: httpx.Client):
        self.source, self.client = source, client

    def __enter__(self) -> io.BufferedReader:
        self.file = io.BufferedReader(_Stream(self.source, self.client), buffer_size=1 << 16)
        return self.file

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        self.file.close()
        if isinstance(error, UnicodeDecodeError):
            raise self.source.failure(f"it is not UTF-8 text: {error}", retry=False) from None
        if isinstance(error, httpx.HTTPError):  # a body that could not be decoded, a stream cut short
            raise self.source.failure(str(error), retry=True) from None


class _Stream(io.RawIOBase):
    """The body of one GET as a raw file; a connection lost mid-way goes on with a ranged GET from where it was,
    where the server takes Range requests (``ATTEMPTS`` times in a row), and ends the run otherwise."""

    def __init__(self, source: HttpInput, client: httpx.Client):
        self.source, self.client = source, client
        self.offset = 0  # bytes of the file read so far
        self.held, self.at = b"", 0  # the piece of the body read last, and how much of it was handed on
        self.lost = 0  # connections lost in a row
        self.response = source.get(client)
        self.body = self.response.iter_bytes(BLOCK)
        self.resumable = (
            self.response.headers.get("accept-ranges", "").lower() == "bytes"
            and self.response.headers.get("content-encoding", "identity").lower() == "identity"
        )

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.at == len(self.held):
            try:
                self.held, self.at = next(self.body, b""), 0
            except httpx.TransportError as error:
                self._resume(error)
                continue
            if not self.held:
                return 0
            self.lost = 0
        count = min(len(buffer), len(self.held) - self.at)
        buffer[:count] = self.held[self.at : self.at + count]
        self.at += count
        self.offset += count
        return count

    def _resume(self, error: httpx.TransportError) -> None:
        self.response.close()
        self.lost += 1
        if not self.resumable or self.lost >= ATTEMPTS:
            lost = f"the connection was lost at byte {self.offset}: {error}"
            raise self.source.failure(lost, retry=True) from None
        self.response = self.source.get(self.client, start=self.offset)
        if self.response.status_code != (206 if self.offset else 200):  # from the first byte: no Range sent
            self.response.close()
            raise self.source.failure(f"the connection was lost at byte {self.offset}: {error}", retry=True)
        self.body = self.response.iter_bytes(BLOCK)

    def close(self) -> None:
        if not self.closed:
            self.response.close()
        super().close()


class _Ranges:
    """The file read at random: its size, and any range of it, one ranged GET each."""

    def __init__(self, source: HttpInput, client: httpx.Client):
        self.source, self.client = source, client
        first = source.get(client, 0, 0, stream=False)
        total = first.headers.get("content-range", "").rpartition("/")[2]
        if first.status_code != 206 or not total.isdigit():
            raise source.failure(
                f"{source.origin} does not answer Range requests (it sent the whole file to a ranged GET), which a "
                "Parquet file needs (its footer is read first): serve it from a server that does, or copy it to a "
                "local path or s3://",
                retry=False,
            )
        self.size = int(total)

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (inclusive) of the file the run's first response served."""
        data = self.source.get(self.client, start, end, stream=False).content
        if len(data) != end - start + 1:
            raise self.source.failure(f"a ranged GET of bytes {start}-{end} brought {len(data)} bytes", retry=True)
        return data
