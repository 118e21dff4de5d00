"""A small value the operator writes into a ConfigMap the gateway's pods mount, followed without a restart.

The kubelet projects a ConfigMap's new content into the running pods within its sync period (about
a minute) by swapping a ``..data`` symlink, so a reader sees the old file or the new one, never half
of either. A follower reads its file at start and then about every second, and takes a new value up
at once: no pod restarts, so no connection drops mid-training. Content that fails the value's check,
or a file that cannot be read, never stops the gateway and never becomes a value: the last good one
stays, with one warning per bad content. reward_gateway.config.share and reward_gateway.config.generation are the
two values followed this way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

# How often the file is looked at: the kubelet's projection lags a minute anyway, a read costs microseconds.
POLL_SECONDS = 1.0


class FollowedFile:
    """Follows ``path`` (None: nothing to follow); a subclass says what its content means."""

    # Content longer than this is not a value, and is not read in full.
    max_bytes = 64
    task_name = "followed-file"

    def __init__(self, path: str | None):
        self.path = path
        self._seen: bytes | str | None = None  # the last content (or read error) looked at
        self._task: asyncio.Task[None] | None = None

    def parse(self, text: str) -> Any:
        """The value ``text`` holds; ValueError saying why it is none."""
        raise NotImplementedError

    def take(self, value: Any) -> None:
        """A good value read from the file (perhaps the one already held)."""
        raise NotImplementedError

    def refused(self, problem: ValueError) -> None:
        """The file holds no good value: one warning, the last good value kept."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Looks at the file once and takes up a new good value; bad content keeps the last good one."""
        if self.path is None:
            return
        seen: bytes | str
        try:
            with open(self.path, "rb") as file:
                seen = file.read(self.max_bytes + 1)
        except OSError as error:
            seen = f"cannot be read ({error.strerror or error.__class__.__name__})"
        if seen == self._seen:
            return  # nothing new: no parse, no second warning for the same content
        self._seen = seen
        try:
            if isinstance(seen, str):
                raise ValueError(seen)
            if len(seen) > self.max_bytes:
                raise ValueError(f"holds over {self.max_bytes} bytes")
            value = self.parse(seen.decode("ascii", errors="replace"))
        except ValueError as problem:
            self.refused(problem)
            return
        self.take(value)

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            self.refresh()

    def start(self) -> None:
        """Follows the file in the background (from within the running event loop); without one, nothing."""
        if self.path is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
