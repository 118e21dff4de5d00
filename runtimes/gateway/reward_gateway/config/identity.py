"""Who is asking, and which model answered: the two identities every scoring request carries.

The client: the name of the bearer token presented (reward_gateway.http.auth), else the
X-Reward-Client header (the header a rollout's sticky split reads), else ``default``.
An authenticated name wins over the header, so a trainer cannot take another's weight
in the fair share by naming it. Metrics label at most MAX_CLIENT_LABELS distinct
clients (those with a weight first); the rest count as ``other``.

The model: its served name, its revision (the storage URI it was loaded from, and a
content digest where the storage path names one), the RewardModel's generation that
rendered the gateway, and its role (stable, or candidate during a rollout). In the
answer's JSON (``identity``) where the wire format has room, and in headers on every
answer, failures included, so a trainer can log which model scored each step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The header a client names itself in (REWARD_GATEWAY_CANARY_CLIENT_HEADER may name another).
CLIENT_HEADER = "X-Reward-Client"
DEFAULT_CLIENT = "default"
OTHER_CLIENTS = "other"
MAX_CLIENT_LABELS = 32
MAX_CLIENT_CHARS = 128
HEADER_PREFIX = "X-Reward-Model-"


def client_identity(token_name: str | None, header: str | None) -> str:
    if token_name:
        return token_name
    if header and header.strip():
        return header.strip()[:MAX_CLIENT_CHARS]
    return DEFAULT_CLIENT


class ClientLabels:
    """A bounded set of client names for metric labels."""

    def __init__(self, known: Iterable[str] = ()):
        self.seen: set[str] = {DEFAULT_CLIENT, *known}

    def label(self, client: str) -> str:
        if client in self.seen:
            return client
        if len(self.seen) < MAX_CLIENT_LABELS:
            self.seen.add(client)
            return client
        return OTHER_CLIENTS


@dataclass(frozen=True)
class ModelIdentity:
    """What an answer says about the model that scored it (read by reward_gateway.config.gateway)."""

    revision: str | None = None  # the storage URI it was loaded from
    digest: str | None = None  # a content digest, where the storage path names one
    generation: int | None = None  # the RewardModel's metadata.generation that rendered this gateway
    # Where the generation is followed from instead, while the gateway runs (reward_gateway.config.generation).
    generation_file: Path | None = None
    judge: str | None = None  # a judge's: the digest of its prompt template and verdict (reward_gateway.config.judge)


def model_identity(name: str, role: str, identity: ModelIdentity) -> dict[str, Any]:
    """The ``identity`` object of an answer (null where unknown); a judge's also names its prompt and verdict
    (``judge``: their digest), which change what it answers as much as its weights do."""
    answer: dict[str, Any] = {
        "model": name,
        "revision": identity.revision,
        "digest": identity.digest,
        "generation": identity.generation,
        "role": role,
    }
    if identity.judge is not None:
        answer["judge"] = identity.judge
    return answer


def identity_headers(identity: dict[str, Any]) -> dict[str, str]:
    """The same as headers: X-Reward-Model-Name, -Revision, -Digest, -Generation, -Role, -Judge (those known)."""
    headers = {HEADER_PREFIX + "Name": identity["model"], HEADER_PREFIX + "Role": identity["role"]}
    for key in ("revision", "digest", "generation", "judge"):
        if identity.get(key) is not None:
            headers[HEADER_PREFIX + key.capitalize()] = str(identity[key])
    # Header values travel as latin-1; a name outside it is left out of the headers (it is in the JSON).
    return {key: value for key, value in headers.items() if _latin1(value)}


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return "\r" not in value and "\n" not in value
