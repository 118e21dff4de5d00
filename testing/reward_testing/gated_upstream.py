"""An HTTP pass-through between a gateway and its real vLLM that a test can close, to hold vLLM "busy"
on a signal instead of on timing.

A coalescing test needs a call in flight while other requests queue behind it. Keeping vLLM busy with
long calls and hoping the next requests arrive before they end fails on a loaded machine; here the
first call is held at the gate until the test has seen, on the gateway's own metrics, that the rest
are queued. Everything passes through unchanged (vLLM computes every score); only the timing is the
test's.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

# Headers of an answer that describe its body; the rest (hop-by-hop, the server's own) are not copied.
_BODY_HEADERS = ("content-type",)


class GatedUpstream:
    """Forwards every request to ``upstream``; while closed, POSTs wait at the gate (GETs, such as
    health checks, always pass). ``held`` counts the POSTs waiting now."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self.held = 0
        self._client = httpx.Client(base_url=upstream, timeout=600)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="gated-upstream", daemon=True)
        self._thread.start()

    def close_gate(self) -> None:
        self._open.clear()

    def open_gate(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self.open_gate()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def _forward(self, method: str, path: str, body: bytes | None, content_type: str | None) -> httpx.Response:
        if method == "POST" and not self._open.is_set():
            with self._lock:
                self.held += 1
            self._open.wait()
            with self._lock:
                self.held -= 1
        headers = {"content-type": content_type} if content_type else {}
        return self._client.request(method, path, content=body, headers=headers)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's own server speaks it

            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                answer = gate._forward(self.command, self.path, body, self.headers.get("content-type"))
                self.send_response(answer.status_code)
                for name in _BODY_HEADERS:
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = _relay  # http.server dispatches on these names

            def log_message(self, format: str, *args) -> None:  # quiet: the test reads the gateway's log
                pass

        return Handler
