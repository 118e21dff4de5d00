"""The real node's model storage server: Python's own file server, and one way to fail on purpose.

KServe's storage initializer downloads ``http(s)://`` model URIs from it, as it would from a bucket or a
model server of the user's (the real node's add-on starts it; ``storage_url`` names a file it serves). A path
``/status/<code>/<anything>`` is answered with that HTTP status instead of a file, so a test can fail a
download the way a broken storage server does (``failing_url``: 500), beside the missing object (404).

Standalone, on the standard library alone: the node runs this file with the test bed's Python.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
from pathlib import Path

PROCESS = "model-storage"  # its recorded process's name, and its port's
STATUS_PATH = re.compile(r"^/status/(?P<code>[1-5][0-9][0-9])/")


def storage_dir(state_dir: Path) -> Path:
    """What the model storage server serves: a file ``f`` there is ``storage_url(..., f)``."""
    return state_dir / "storage"


def storage_command(python: str, directory: Path, address: str, port: int) -> list[str]:
    # Python's own file server (one path prefix answers an error on purpose): KServe's storage
    # initializer takes a .tar.gz it serves (application/gzip) and unpacks it into /mnt/models
    return [python, str(Path(__file__).resolve()), str(port), "--bind", address, "--directory", str(directory)]


def storage_url(address: str, port: int, filename: str) -> str:
    return f"http://{address}:{port}/{filename}"


def failing_url(url: str, code: int) -> str:
    """``url`` (a file of this server) answered with HTTP status ``code`` instead."""
    scheme, rest = url.split("://", 1)
    host, path = rest.split("/", 1)
    return f"{scheme}://{host}/status/{code}/{path}"


class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):  # GET and HEAD both start here
        if matched := STATUS_PATH.match(self.path):
            code = int(matched["code"])
            self.send_error(code, f"the test bed's storage server answers {code} for this path on purpose")
            return None
        return super().send_head()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--directory", required=True, help="the folder whose files it serves")
    args = parser.parse_args(argv)
    handler = functools.partial(Handler, directory=args.directory)
    with http.server.ThreadingHTTPServer((args.bind, args.port), handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
