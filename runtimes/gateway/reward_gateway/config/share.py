"""The candidate's share of a split, as the gateway runs it now, followed from a file without a restart.

The operator writes the share its rollout decided into a ConfigMap that the
gateway's pods mount (REWARD_GATEWAY_CANARY_PERCENT_FILE); a step rewrites it, and
the gateway follows the file (reward_gateway.config.followed_file): no pod restarts, so no
connection drops mid-training and the rollout's figures keep counting.

What the file holds is checked as the environment's share is: an integer 0..100,
and 0 in shadow mode. Content that fails the check (or a file that cannot be read)
never stops the gateway and never becomes a share: the last good share stays,
with one warning per bad content. Without a file the share is the environment's
REWARD_GATEWAY_CANARY_PERCENT, fixed for the process's life.
"""

from __future__ import annotations

import logging

from reward_gateway.config.followed_file import FollowedFile

logger = logging.getLogger("reward_gateway")


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


class Share(FollowedFile):
    """The candidate's share of requests: fixed, or followed from ``path``."""

    max_bytes = 64  # a share is at most "100" and a newline
    task_name = "candidate-share"

    def __init__(self, percent: int, path: str | None = None, mode: str = "split"):
        super().__init__(path)
        self.percent = percent
        self._mode = mode

    def parse(self, text: str) -> int:
        return parse_share(text, self._mode)

    def take(self, value: int) -> None:
        if value != self.percent:
            logger.info("candidate share: %d %% (was %d %%), from %s", value, self.percent, self.path)
            self.percent = value

    def refused(self, problem: ValueError) -> None:
        logger.warning("candidate share file %s: %s; keeping %d %%", self.path, problem, self.percent)


def followed(path: str, mode: str) -> Share:
    """A share followed from ``path``, read once now: 0 until the file holds a good share."""
    share = Share(0, path, mode)
    share.refresh()
    return share
