"""What each item of a request came to: its score, or its failure.

One bad item fails alone. A request's answer carries, per item, its reward (or step scores), or a
`Failure`: a reason from REASONS (the `reason` label of reward_gateway_item_failures_total; what each
means: the README's "Items that fail"), a message a person can read, and whether sending the item
again can help. A failure never becomes a number: the wire formats answer it as null beside a
`failures` list, or fail the request where the trainer has no other way to take it
(reward_gateway.http.formats).

A request still fails as a whole where nothing in it could be scored for a reason that is not its
items' own (vLLM away past the hold, overloaded, failing): with the status and headers it always
had, so trainers' retry loops see what they always saw (`whole_failure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward_gateway.items.errors import GatewayError, UpstreamError
from reward_gateway.items.extract import Score

REASONS = (
    "too_long",
    "refused",
    "invalid",
    "overloaded",
    "unavailable",
    "timeout",
    "upstream_error",
    "bad_response",
    "part_failed",
    "no_verdict",
    "internal",
)
# What vLLM says when an input is longer than the model's context (vllm/renderers/params.py, 0.32).
TOO_LONG_MARK = "maximum context length"


@dataclass(frozen=True)
class Failure:
    """One item's failure. ``status`` and ``headers``: what a request of this item alone is answered."""

    reason: str
    message: str
    retry: bool
    status: int = 400
    headers: Mapping[str, str] = field(default_factory=dict)

    def answer(self, index: int) -> dict[str, Any]:
        """The item's entry in an answer's ``failures``."""
        return {"index": index, "reason": self.reason, "message": self.message, "retry": self.retry}

    def error(self) -> ItemsFailed:
        """The failure as the whole request's answer."""
        return ItemsFailed(self)


class ItemsFailed(UpstreamError):
    """A request answered as a whole for its items' failures: with ``failure``'s status, headers and message (and
    every item's in ``failures``, where given). An UpstreamError: counted as the failure of the model that
    scored it (reward_gateway.rollout.canary), as vLLM's errors are."""

    def __init__(self, failure: Failure, failed: list[dict[str, Any]] | None = None):
        message = failure.message
        if failed and len(failed) > 1:
            message = f"{len(failed)} items failed; the first: item {failed[0]['index']}: {failure.message}"
        super().__init__(failure.reason, failure.status, message, dict(failure.headers))
        self.failure = failure
        self.failed = failed

    def body(self) -> dict[str, Any]:
        body = super().body()
        if self.failed:
            body["failures"] = self.failed
        return body


Outcome = Score | Failure


def failure_of(error: GatewayError) -> Failure:
    """An item's failure from the error its call (or its own check) ended with."""
    if isinstance(error, ItemsFailed):
        return error.failure
    headers = dict(error.headers)
    if not isinstance(error, UpstreamError):  # the gateway's own refusal of the item (BadRequest)
        return Failure("invalid", error.message, False, error.status, headers)
    if error.status == 400:
        reason = "too_long" if TOO_LONG_MARK in error.message else "refused"
        return Failure(reason, error.message, False, error.status, headers)
    if error.status == 504:
        return Failure("timeout", error.message, True, error.status, headers)
    if error.status == 503:
        reason = "unavailable" if error.reason == "connect" else "overloaded"
        return Failure(reason, error.message, True, error.status, headers)
    reason = "bad_response" if error.reason == "bad_response" else "upstream_error"
    return Failure(reason, error.message, True, error.status, headers)


def whole_failure(outcomes: Sequence[Outcome]) -> ItemsFailed | None:
    """The error a request is answered with as a whole: none of its items scored, and none failed for a
    reason of its own (each would succeed sent again: vLLM was away, overloaded or failing). None
    otherwise: the answer carries each item's outcome."""
    if not outcomes or any(not isinstance(outcome, Failure) or not outcome.retry for outcome in outcomes):
        return None
    return outcomes[0].error()  # type: ignore[union-attr]


def failed_positions(rewards: Sequence[object]) -> set[int]:
    """The items of an answer's rewards that failed (None)."""
    return {index for index, reward in enumerate(rewards) if reward is None}


def failures(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """An answer's ``failures``: one entry per failed item, by its index in the request."""
    return [outcome.answer(index) for index, outcome in enumerate(outcomes) if isinstance(outcome, Failure)]


def reward(outcome: Outcome) -> float | None:
    """The item's reward in an answer: None (JSON null) for a failure, never a number."""
    return outcome.reward if isinstance(outcome, Score) else None
