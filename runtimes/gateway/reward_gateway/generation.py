"""The RewardModel's generation in every answer's identity, followed from a file without a restart.

The generation moves with every edit of the RewardModel's spec, and most edits change no pod (the
replicas, a rollout's start, its gates). Rendered as an environment variable it would roll every
gateway on each of them, dropping connections mid-training. So the operator writes it into a ConfigMap
the gateway's pods mount (REWARD_GATEWAY_MODEL_GENERATION_FILE); the kubelet projects a new value into
the running pods within its sync period (about a minute), as it does the rollout's share
(reward_gateway.share), and the gateway reads the file at start and then about every second. An answer
may so carry the previous generation for that minute; the revision and digest, which come with the pod,
never lag.

An empty file is an unknown generation (null in answers): what an offline render writes for a
RewardModel not stored yet. Content that is not a positive integer, or a file that cannot be read,
never stops the gateway and never becomes a generation: the last good one stays, with one warning per
bad content.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger("reward_gateway")

POLL_SECONDS = 1.0
# metadata.generation is an int64: at most 19 digits and a newline; anything longer is not one.
_MAX_BYTES = 32


def parse_generation(text: str) -> int | None:
    """The generation ``text`` holds (None: empty, unknown); ValueError saying why it is none."""
    value = text.strip()
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise ValueError(f"{value[:16]!r} is not a positive integer")
    return int(value)


class Generation:
    """Keeps the ``generation`` of each identity (reward_gateway.identity) equal to the file's."""

    def __init__(self, path: str, identities: Iterable[dict[str, Any]]):
        self.path = path
        self.identities = list(identities)
        self._seen: bytes | str | None = None  # the last content (or read error) looked at
        self._task: asyncio.Task[None] | None = None

    @property
    def value(self) -> int | None:
        return self.identities[0]["generation"] if self.identities else None

    def refresh(self) -> None:
        """Looks at the file once and takes up a new good generation; bad content keeps the last good one."""
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
            generation = parse_generation(seen.decode("ascii", errors="replace"))
        except ValueError as problem:
            logger.warning("generation file %s: %s; keeping %s", self.path, problem, self.value)
            return
        if generation != self.value:
            logger.info("RewardModel generation: %s (was %s), from %s", generation, self.value, self.path)
            for identity in self.identities:
                identity["generation"] = generation

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            self.refresh()

    def start(self) -> None:
        """Follows the file in the background (from within the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(), name="model-generation")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def followed(path: str, identities: Iterable[dict[str, Any]]) -> Generation:
    """The generation followed from ``path`` into ``identities``, read once now."""
    generation = Generation(path, identities)
    generation.refresh()
    return generation
