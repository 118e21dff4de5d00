"""The candidate's share of a split, as the gateway runs it now, followed from a file without a restart.

The operator writes the share its rollout decided into a ConfigMap that the
gateway's pods mount (REWARD_GATEWAY_CANARY_PERCENT_FILE); a step rewrites it, and
the kubelet projects the new content into the running pods within its sync
period (about a minute) by swapping a ``..data`` symlink, so a reader sees the old
file or the new one, never half of either. The gateway reads the file at start
and then about every second, and takes a new share up at once: no pod restarts,
so no connection drops mid-training and the rollout's figures keep counting.

What the file holds is checked as the environment's share is: an integer 0..100,
and 0 in shadow mode. Content that fails the check (or a file that cannot be read)
never stops the gateway and never becomes a share: the last good share stays,
with one warning per bad content. Without a file the share is the environment's
REWARD_GATEWAY_CANARY_PERCENT, fixed for the process's life.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

logger = logging.getLogger("reward_gateway")

# How often the file is looked at: the kubelet's projection lags a minute anyway, a read costs microseconds.
POLL_SECONDS = 1.0
# A share is at most "100" and a newline: anything much longer is not one, and is not read in full.
_MAX_BYTES = 64


def parse_share(text: str, mode: str) -> int:
    """The share ``text`` holds, for a rollout in ``mode``; ValueError saying why it is none."""
    value = text.strip()
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{value[:16]!r} is not an integer 0..100")
    share = int(value)
    if share > 100:
        raise ValueError(f"{share} is not an integer 0..100")
    if mode == "shadow" and share:
        raise ValueError(f"{share} in shadow mode, where the trainer always gets the stable model's scores")
    return share


class Share:
    """The candidate's share of requests: fixed, or followed from ``path``."""

    def __init__(self, percent: int, path: str | None = None, mode: str = "split"):
        self.percent = percent
        self.path = path
        self._mode = mode
        self._seen: bytes | str | None = None  # the last content (or read error) looked at
        self._task: asyncio.Task[None] | None = None

    def refresh(self) -> None:
        """Looks at the file once and takes up a new good share; bad content keeps the last good one."""
        if self.path is None:
            return
        seen: bytes | str
        try:
            with open(self.path, "rb") as file:
                seen = file.read(_MAX_BYTES + 1)
        except OSError as error:
            seen = f"cannot be read ({error.strerror or error.__class__.__name__})"
        if seen == self._seen:
            return  # nothing new: no parse, no second warning for the same content
        self._seen = seen
        try:
            if isinstance(seen, str):
                raise ValueError(seen)
            if len(seen) > _MAX_BYTES:
                raise ValueError(f"holds over {_MAX_BYTES} bytes")
            share = parse_share(seen.decode("ascii", errors="replace"), self._mode)
        except ValueError as problem:
            logger.warning("candidate share file %s: %s; keeping %d %%", self.path, problem, self.percent)
            return
        if share != self.percent:
            logger.info("candidate share: %d %% (was %d %%), from %s", share, self.percent, self.path)
            self.percent = share

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            self.refresh()

    def start(self) -> None:
        """Follows the file in the background (from within the running event loop); without one, nothing."""
        if self.path is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(), name="candidate-share")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def followed(path: str, mode: str) -> Share:
    """A share followed from ``path``, read once now: 0 until the file holds a good share."""
    share = Share(0, path, mode)
    share.refresh()
    return share
