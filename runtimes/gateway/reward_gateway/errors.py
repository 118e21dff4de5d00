"""Errors the gateway answers with, each carrying its HTTP status.

Every failure a client can see is one of these, so no request ends in a 500
with a stack trace: the app's handlers turn them into `{"error": message}`.
"""

from __future__ import annotations


class GatewayError(Exception):
    status = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


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
