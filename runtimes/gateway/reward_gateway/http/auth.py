"""Optional bearer-token check, with the token read from a mounted Secret.

The file is re-read when it changes, so a rotated Secret takes effect without a
restart. Tokens are compared in constant time and never logged.

A line is a token, or a name and a token apart by whitespace (a bearer token holds
none): the name is the client's identity for fair share (reward_gateway.config.identity).
An unnamed token's name is ``token-`` and the first 8 hex digits of its SHA-256.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path


class BearerTokenCheck:
    def __init__(self, token_file: Path):
        self.token_file = token_file
        self._stamp: tuple[int, int] | None = None
        self._tokens: list[bytes] = []
        self._names: list[str] = []

    def allows(self, authorization: str | None) -> bool:
        return self.name_of(authorization) is not None

    def name_of(self, authorization: str | None) -> str | None:
        """The name of the token presented, or None where it is not one of ours."""
        if not authorization:
            return None
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        offered = presented.strip().encode()
        tokens = self._current_tokens()
        # Every token is compared, so timing does not tell which one nearly matched.
        matches = [hmac.compare_digest(offered, token) for token in tokens]
        return self._names[matches.index(True)] if any(matches) else None

    def _current_tokens(self) -> list[bytes]:
        try:
            stat = os.stat(self.token_file)
        except OSError:
            return self._tokens  # keep the last good tokens while a Secret update swaps the file
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            lines = self.token_file.read_text(encoding="utf-8").splitlines()
            # One token per line lets a Secret hold the old and new token during a rotation.
            entries = [line.split() for line in lines if line.strip()]
            self._tokens = [entry[-1].encode() for entry in entries]
            self._names = [
                entry[0] if len(entry) > 1 else "token-" + hashlib.sha256(entry[-1].encode()).hexdigest()[:8]
                for entry in entries
            ]
            self._stamp = stamp
        return self._tokens
