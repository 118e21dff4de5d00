"""A small real HTTP file server on loopback (``http.server``, a thread per request), for the batch worker's
``https://`` input: the validators a static server or an object store sends (a strong ETag, or only
Last-Modified and Content-Length), byte ranges where asked, basic auth where set, and the ways a server fails
(a status for every request, a body cut short once).

Files are bytes under a path (``put``), replaced by putting them again; each replacement is a new version (a new ETag,
a later Last-Modified). ``served`` records every request answered (its path, Range header and status), and
``after_get``, where set, runs as each GET's body is written (before its last byte, so the client cannot have
the answer whole before it is done), with the path and how many GETs of it were answered so far: a test changes
the file between two passes of a run there, with no sleep.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EPOCH = 1_700_000_000  # the Last-Modified of a file's first version; each later version a second on


@dataclass
class FileServer:
    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    etag: bool = True  # False: Last-Modified and Content-Length only
    ranges: bool = True  # False: a Range header is ignored (the whole file, 200)
    credentials: tuple[str, str] | None = None  # basic auth, where set
    failing: int | None = None  # a status answered to every request, where set
    cut_after: int | None = None  # the next GET's body stops after this many bytes (the connection closed)
    after_get: Callable[[str, int], None] | None = None
    served: list[tuple[str, str | None, int]] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)

    def put(self, path: str, body: bytes) -> str:
        """``body`` served at ``path`` (a new version where one was there); returns its URL."""
        self.files[path] = body
        self.versions[path] = self.versions.get(path, -1) + 1
        return f"{self.url}{path}"

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of ``path`` answered so far (None: the whole file)."""
        return [sent for served, sent, _ in self.served if served == path]


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = self.path.partition("?")[0]
            sent_range = self.headers.get("Range")
            status, headers, data = self._response(path, sent_range)
            cut = None
            with lock:
                server.served.append((path, sent_range, status))
                answered = len([1 for p, _, code in server.served if p == path and code < 300])
                if body and status < 300 and server.cut_after is not None:
                    cut, server.cut_after = server.cut_after, None
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            if cut is not None:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not body:
                return
            if cut is not None:
                self.wfile.write(data[:cut])
            elif status < 300 and server.after_get is not None and data:
                # the hook runs before the body's last byte: the client cannot have this answer whole, nor send
                # its next request, before the hook is done
                self.wfile.write(data[:-1])
                self.wfile.flush()
                server.after_get(path, answered)
                self.wfile.write(data[-1:])
            else:
                self.wfile.write(data)
            self.wfile.flush()

        def _response(self, path: str, sent_range: str | None) -> tuple[int, dict[str, str], bytes]:
            if server.failing is not None:
                return server.failing, {}, b"failing\n"
            if server.credentials is not None:
                expected = base64.b64encode(":".join(server.credentials).encode()).decode()
                if self.headers.get("Authorization") != f"Basic {expected}":
                    return 401, {"WWW-Authenticate": 'Basic realm="files"'}, b"who are you?\n"
            if path not in server.files:
                return 404, {}, b"no such file\n"
            data, version = server.files[path], server.versions[path]
            headers = {"Last-Modified": formatdate(EPOCH + version, usegmt=True)}
            if server.etag:
                headers["ETag"] = f'"{hashlib.sha256(data).hexdigest()[:16]}-{version}"'
            if not server.ranges:
                return 200, headers, data
            headers["Accept-Ranges"] = "bytes"
            if sent_range is None or not sent_range.startswith("bytes="):
                return 200, headers, data
            first, _, last = sent_range.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            if start >= len(data):
                return 416, {"Content-Range": f"bytes */{len(data)}"}, b""
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return 206, headers, data[start : end + 1]

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-body (a run stopped, a pass ended early) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def file_server() -> Iterator[FileServer]:
    """A ``FileServer`` on 127.0.0.1 (a free port), stopped on leaving."""
    state = FileServer()
    httpd = _Server(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="file-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
