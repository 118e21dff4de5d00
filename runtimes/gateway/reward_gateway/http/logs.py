"""Client-controlled text in log lines: escaped, and query strings left out.

A log line must never start with text a client chose (an encoded newline in a
path would otherwise end the access line and begin a forged one), and a token
a client put in a query string must not reach the logs.
"""

from __future__ import annotations

import logging


def escape(text: str) -> str:
    """Control characters, backslashes and non-ASCII as Python escapes: one line, always."""
    return text.encode("unicode_escape").decode("ascii")


class SafeAccessLine(logging.Filter):
    """For uvicorn's access logger: its arguments are (client, method, path with query, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            client, method, target, version, status = args
            path, query_mark, _ = str(target).partition("?")
            # The query string is left out whole: which of its parameters carry secrets is the client's to know.
            shown = escape(path) + ("?..." if query_mark else "")
            record.args = (escape(str(client)), escape(str(method)), shown, escape(str(version)), status)
        return True
