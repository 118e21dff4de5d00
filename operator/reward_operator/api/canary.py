"""A rollout's identity, as render derives it from the candidate and policy reads it against the status."""

from __future__ import annotations

from typing import NamedTuple


class CanaryIdentity(NamedTuple):
    """Who is rolled out, and which rollout of it."""

    candidate: str  # the candidate's name in the gateways' metrics and GET /canary
    revision: str  # the rollout's revision (status.canary.revision): a change starts the rollout over
