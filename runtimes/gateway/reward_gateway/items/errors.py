"""Errors the gateway answers with, each carrying its HTTP status.

Every failure a client can see is one of these, so no request ends in a 500
with a stack trace: the app's handlers turn them into `{"error": message}`.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable
from typing import Any


class GatewayError(Exception):
    status = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The answer's JSON."""
        return {"error": self.message}


class BadRequest(GatewayError):
    """The client sent something the gateway will not score."""

    status = 400


class Unauthorized(GatewayError):
    status = 401

    def __init__(self, message: str = "missing or invalid bearer token"):
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


class NotFound(GatewayError):
    status = 404


class UpstreamError(GatewayError):
    """vLLM failed; `reason` is the label of reward_gateway_upstream_errors_total."""

    def __init__(self, reason: str, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message, headers)
        self.reason = reason
        self.status = status


def upstream_unavailable(message: str, retry_after_s: int, reason: str = "connect") -> UpstreamError:
    # 503 + Retry-After tells trainers' retry loops to back off and come back,
    # which is right while a scaled-to-zero model is starting.
    return UpstreamError(reason, 503, message, {"Retry-After": str(retry_after_s)})


def forget(error: BaseException) -> None:
    """Let go of everything a caught exception holds of its request.

    An exception's traceback holds every frame it passed through, and those
    frames hold the request (its body, items, calls); a failure in a TaskGroup
    adds cycles (the group holds the error, the error's context holds the
    group, and each holds frames that hold the other). With the server's calm
    collector (reward_gateway.http.server) such cycles outlive their request for
    hours. Called where an exception has become an answer (and been logged, if
    it is logged): its frames are cleared and its chain cut, so reference
    counting frees the request at once.
    """
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)  # skips the frames still running
            current.__traceback__ = None
        pending += [linked for linked in (current.__cause__, current.__context__) if linked is not None]
        current.__cause__ = current.__context__ = None
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions


async def all_or_first_failure(calls: list[Awaitable[Any]]) -> list[Any]:
    """Run upstream calls at once and return their results in order. The first failure cancels
    the others (the request is lost anyway, and vLLM's time is better spent elsewhere) and is
    raised as itself, not as the TaskGroup's ExceptionGroup, so it becomes the answer."""
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]  # type: ignore[arg-type]
    except ExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]
