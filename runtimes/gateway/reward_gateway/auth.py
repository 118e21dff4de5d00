"""Optional bearer-token check, with the token read from a mounted Secret.

The file is re-read when it changes, so a rotated Secret takes effect without a
restart. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path


class BearerTokenCheck:
    def __init__(self, token_file: Path):
        self.token_file = token_file
        self._stamp: tuple[int, int] | None = None
        self._tokens: list[bytes] = []

    def allows(self, authorization: str | None) -> bool:
        if not authorization:
            return False
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return False
        offered = presented.strip().encode()
        # Every token is compared, so timing does not tell which one nearly matched.
        matches = [hmac.compare_digest(offered, token) for token in self._current_tokens()]
        return any(matches)

    def _current_tokens(self) -> list[bytes]:
        try:
            stat = os.stat(self.token_file)
        except OSError:
            return self._tokens  # keep the last good tokens while a Secret update swaps the file
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            lines = self.token_file.read_text(encoding="utf-8").splitlines()
            # One token per line lets a Secret hold the old and new token during a rotation.
            self._tokens = [line.strip().encode() for line in lines if line.strip()]
            self._stamp = stamp
        return self._tokens
