"""The one error a shard stops on (``worker``, ``store``), apart so the storage layer raises it too."""

from __future__ import annotations


class BatchError(Exception):
    """The shard cannot go on: ``retry`` says whether running it again may help (the gateway or the object
    store away) or not (the input unreadable, an output holding another batch, credentials refused)."""

    def __init__(self, message: str, retry: bool):
        super().__init__(message)
        self.retry = retry
