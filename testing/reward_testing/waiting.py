"""Waiting on a signal, never on a sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.3) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)  # noqa: TID251 the poll interval: this is the wait on a signal
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
