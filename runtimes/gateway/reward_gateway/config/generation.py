"""The RewardModel's generation in every answer's identity, followed from a file without a restart.

The generation moves with every edit of the RewardModel's spec, and most edits change no pod (the
replicas, a rollout's start, its gates). Rendered as an environment variable it would roll every
gateway on each of them, dropping connections mid-training. So the operator writes it into a ConfigMap
the gateway's pods mount (REWARD_GATEWAY_MODEL_GENERATION_FILE), which the gateway follows as it does
the rollout's share (reward_gateway.config.followed_file): the kubelet projects a new value within about a
minute. An answer may so carry the previous generation for that minute; the revision and digest, which
come with the pod, never lag.

An empty file is an unknown generation (null in answers): what an offline render writes for a
RewardModel not stored yet. Content that is not a positive integer, or a file that cannot be read,
never stops the gateway and never becomes a generation: the last good one stays, with one warning per
bad content.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from reward_gateway.config.followed_file import FollowedFile

logger = logging.getLogger("reward_gateway")


def parse_generation(text: str) -> int | None:
    """The generation ``text`` holds (None: empty, unknown); ValueError saying why it is none."""
    value = text.strip()
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise ValueError(f"{value[:16]!r} is not a positive integer")
    return int(value)


class Generation(FollowedFile):
    """Keeps the ``generation`` of each identity (reward_gateway.config.identity) equal to the file's."""

    max_bytes = 32  # metadata.generation is an int64: at most 19 digits and a newline
    task_name = "model-generation"

    def __init__(self, path: str, identities: Iterable[dict[str, Any]]):
        super().__init__(path)
        self.identities = list(identities)

    @property
    def value(self) -> int | None:
        return self.identities[0]["generation"] if self.identities else None

    def parse(self, text: str) -> int | None:
        return parse_generation(text)

    def take(self, value: int | None) -> None:
        if value != self.value:
            logger.info("RewardModel generation: %s (was %s), from %s", value, self.value, self.path)
            for identity in self.identities:
                identity["generation"] = value

    def refused(self, problem: ValueError) -> None:
        logger.warning("generation file %s: %s; keeping %s", self.path, problem, self.value)


def followed(path: str, identities: Iterable[dict[str, Any]]) -> Generation:
    """The generation followed from ``path`` into ``identities``, read once now."""
    generation = Generation(path, identities)
    generation.refresh()
    return generation
