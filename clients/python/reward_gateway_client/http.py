"""The one place that talks HTTP to the reward gateway's POST /v1/rewards.

Everything else in this package builds items and reads rewards; this module
owns the URL, the bearer token, timeouts, and what each answer means:

- 200: ``{"rewards": [...], "identity": {...}}``, one reward per item, in the items' order; the
  identity of the model that scored them (served name, revision, digest, the RewardModel's
  generation, stable or candidate) is kept as the client's ``last_identity``, for the trainer's logs.
  An item the gateway could not score is null there, with its reason in ``failures``: it comes
  back as an `ItemFailure` (``outcomes``) or None (``score``), never as a number, and is not sent
  again (the rest of the step is scored; a trainer decides what a missing reward means).
- 503 (a predictor waking up from zero, vLLM's queue full, the gateway's memory
  budget full), 502 (vLLM failed or cut its answer short; the gateway never sends
  such a call again itself) and 504 (vLLM timed out): retried here, a bounded
  number of times, waiting what ``Retry-After`` asks (capped), else a doubling
  back-off. Scoring has no side effects, so sending the whole request again is
  safe; that is why 502 is retried here although the gateway does not retry it.
- A refused or dropped connection: retried the same way (the gateway's pod may
  be starting or rolling).
- Any 4xx: a ``GatewayError`` carrying the gateway's ``{"error": message}`` at
  once, never retried (the same request would get the same answer).
- Anything else (500: a bug in the gateway): a ``GatewayError`` at once.

A gateway pod that vanishes mid-request without a reset (its node gone, its network torn down before its
process) sends nothing more, and a connection waiting for an answer sends nothing either: TCP keep-alive
on every connection ends it at most ``DEAD_GATEWAY_S`` after the gateway's last packet, a dropped
connection retried as above, instead of waiting out ``timeout_s``. A gateway that is there answers the
probes from its kernel however long the scoring takes. (The client's own transport: proxies named in the
environment are not used; the gateway is a cluster-local address.)
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

URL_ENV = "REWARD_GATEWAY_URL"
TOKEN_ENV = "REWARD_GATEWAY_TOKEN"
TOKEN_FILE_ENV = "REWARD_GATEWAY_TOKEN_FILE"
REWARDS_PATH = "/v1/rewards"

# The statuses worth sending the same request again for (see the module docstring).
RETRIED_STATUSES = frozenset({502, 503, 504})

# Keep-alive probes after 5 s without a packet, every 5 s, 3 unanswered: a vanished gateway noticed within 20 s.
DEAD_GATEWAY_S = 5 + 5 * 3
KEEPALIVE_OPTIONS = tuple(
    (level, getattr(socket, name), value)
    for level, name, value in (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", 5),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", 5),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
    )
    if hasattr(socket, name)  # Linux has them all; elsewhere, what the platform has
)


def http_client(timeout_s: float) -> httpx.Client:
    """The connections a ``RewardClient`` sends on (keep-alive on each, see the module docstring)."""
    return httpx.Client(timeout=timeout_s, transport=httpx.HTTPTransport(socket_options=KEEPALIVE_OPTIONS))


def async_http_client(timeout_s: float) -> httpx.AsyncClient:
    """The connections an ``AsyncRewardClient`` sends on."""
    return httpx.AsyncClient(timeout=timeout_s, transport=httpx.AsyncHTTPTransport(socket_options=KEEPALIVE_OPTIONS))


class GatewayError(Exception):
    """The gateway refused or failed a request; ``message`` is its ``{"error": ...}`` text."""

    def __init__(self, status: int | None, message: str, attempts: int = 1):
        self.status = status
        self.message = message
        self.attempts = attempts
        where = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"reward gateway: {where} after {attempts} attempt(s): {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as made, not from its text: verl's Ray workers carry a reward function's error to the driver.
        return (GatewayError, (self.status, self.message, self.attempts))


@dataclass(frozen=True)
class ItemFailure:
    """One item the gateway answered without a reward: why (``reason``, one of the gateway's
    reward_gateway.items.outcomes.REASONS), in words, and whether sending it again can help."""

    index: int
    reason: str
    message: str
    retry: bool

    def error(self) -> ItemFailed:
        return ItemFailed(self)


class ItemFailed(GatewayError):
    """An item's failure raised where a trainer has no missing reward to give it (verl)."""

    def __init__(self, failure: ItemFailure):
        self.failure = failure
        retry = "a retry may help" if failure.retry else "a retry will not help"
        self.status, self.attempts = 200, 1  # the request was answered; this item was not scored
        self.message = f"an item not scored ({failure.reason}, {retry}): {failure.message}"
        Exception.__init__(self, f"reward gateway: {self.message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ItemFailed, (self.failure,))


Outcome = float | ItemFailure


@dataclass(frozen=True)
class Answer:
    """One request's answer: each item's outcome, and the identity of the model that scored them (the
    gateway's ``identity`` object: model, revision, digest, generation, role; None where it sent none)."""

    outcomes: list[Outcome]
    identity: dict[str, Any] | None


@dataclass(frozen=True)
class GatewaySettings:
    """Where the gateway is and how hard to try. Plain, hashable data: adapters holding it pickle,
    and verl's adapter keys its batches by it.

    ``url``: the gateway's base URL (``http://<name>.<namespace>.svc.cluster.local``), or
    ``$REWARD_GATEWAY_URL``. ``token``: a bearer token, or ``$REWARD_GATEWAY_TOKEN``, or the
    first line of ``token_file`` / ``$REWARD_GATEWAY_TOKEN_FILE`` (read on every request, so a
    rotated Secret mount is picked up). ``timeout_s``: per attempt; the default outlasts the
    gateway's own 180 s upstream timeout, so the gateway answers before the client gives up.
    ``attempts``: tries in all for retried answers. ``max_backoff_s``: the longest wait between
    two tries, whatever ``Retry-After`` says.
    """

    url: str | None = None
    token: str | None = None
    token_file: str | None = None
    timeout_s: float = 200.0
    attempts: int = 8
    max_backoff_s: float = 30.0
    model: str | None = None
    client: str | None = None  # sent as X-Reward-Client: this job's name for the gateway's fair share

    def base_url(self) -> str:
        url = self.url or os.environ.get(URL_ENV)
        if not url:
            raise ValueError(f"no reward gateway URL: pass url=... or set {URL_ENV}")
        if "://" not in url:
            url = f"http://{url}"  # verl-style host:port
        return url.rstrip("/")

    def bearer(self) -> str | None:
        if self.token:
            return self.token
        if os.environ.get(TOKEN_ENV):
            return os.environ[TOKEN_ENV]
        path = self.token_file or os.environ.get(TOKEN_FILE_ENV)
        if path:
            with open(path, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle if line.strip()]
            return lines[0] if lines else None
        return None

    def request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        token = self.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.client:
            headers["X-Reward-Client"] = self.client
        return headers

    def body(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"items": list(items)}
        if self.model:
            body["model"] = self.model
        return body


def _error_text(response: httpx.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        return answer["error"]
    return str(answer)[:500]


def _retry_after(response: httpx.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to the doubling back-off


def _outcomes(response: httpx.Response, count: int) -> list[Outcome]:
    """Each item's reward, or its failure; an answer that holds anything else is refused whole."""
    answer = response.json()
    rewards, listed = answer.get("rewards"), answer.get("failures") or []
    if not isinstance(rewards, list) or len(rewards) != count:
        raise GatewayError(response.status_code, f"expected {count} rewards, got {rewards!r:.200}")
    failures: dict[int, ItemFailure] = {}
    for entry in listed if isinstance(listed, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("index"), int) and 0 <= entry["index"] < count:
            failures[entry["index"]] = ItemFailure(
                entry["index"], str(entry.get("reason")), str(entry.get("message")), entry.get("retry") is True
            )
    outcomes: list[Outcome] = []
    for index, reward in enumerate(rewards):
        if isinstance(reward, int | float) and not isinstance(reward, bool) and index not in failures:
            outcomes.append(float(reward))
        elif reward is None:  # no reward: never read as a number, whether or not the gateway said why
            outcomes.append(failures.get(index) or ItemFailure(index, "unknown", "null reward without a reason", False))
        else:
            raise GatewayError(response.status_code, f"item {index}: {reward!r:.100} is not a reward")
    return outcomes


def rewards_of(outcomes: Sequence[Outcome]) -> list[float | None]:
    """The rewards, None where an item failed."""
    return [None if isinstance(outcome, ItemFailure) else outcome for outcome in outcomes]


class _Attempts:
    """The retry rule shared by the sync and async clients: what to do after each try."""

    def __init__(self, settings: GatewaySettings):
        self.settings = settings
        self.done = 0
        self.identity: dict[str, Any] | None = None  # the answering model's, from a 200

    def after(self, response: httpx.Response | None, failure: Exception | None, count: int) -> float | list[Outcome]:
        """The outcomes, or how long to wait before the next try; raises when it is over."""
        self.done += 1
        if response is not None and response.status_code == 200:
            rewards = _outcomes(response, count)
            identity = response.json().get("identity")
            self.identity = identity if isinstance(identity, dict) else None
            return rewards
        status = None if response is None else response.status_code
        message = str(failure) if response is None else _error_text(response)
        retried = response is None or status in RETRIED_STATUSES
        if not retried or self.done >= self.settings.attempts:
            raise GatewayError(status, message, self.done)
        wait = _retry_after(response)
        if wait is None:
            wait = 2.0 ** (self.done - 1)
        return min(wait, self.settings.max_backoff_s)


class RewardClient:
    """Synchronous client: ``score(items) -> rewards``. One ``httpx.Client`` per call: a
    trainer sends one request per step, and nothing kept open has to survive forks or pickling."""

    def __init__(self, settings: GatewaySettings, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.sleep = sleep  # tests replace it to wait on a signal instead of the clock
        self.last_identity: dict[str, Any] | None = None  # which model scored the last answer

    def score(self, items: Sequence[dict[str, Any]]) -> list[float | None]:
        """Each item's reward, None where the gateway could not score it (``outcomes`` says why)."""
        return rewards_of(self.outcomes(items))

    def outcomes(self, items: Sequence[dict[str, Any]]) -> list[Outcome]:
        """Each item's reward, or its `ItemFailure`; a request that fails as a whole raises `GatewayError`."""
        if not items:
            return []
        settings, attempts = self.settings, _Attempts(self.settings)
        url = settings.base_url() + REWARDS_PATH
        with http_client(settings.timeout_s) as http:
            while True:
                response, failure = None, None
                try:
                    response = http.post(url, json=settings.body(items), headers=settings.request_headers())
                except httpx.TransportError as error:
                    failure = error
                outcome = attempts.after(response, failure, len(items))
                if isinstance(outcome, list):
                    self.last_identity = attempts.identity
                    return outcome
                self.sleep(outcome)


class AsyncRewardClient:
    """Asynchronous client, the same rule as ``RewardClient`` on ``httpx.AsyncClient``."""

    def __init__(self, settings: GatewaySettings, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.settings = settings
        self.sleep = sleep
        self.last_identity: dict[str, Any] | None = None  # which model scored the last answer

    async def score(self, items: Sequence[dict[str, Any]]) -> list[float | None]:
        """Each item's reward, None where the gateway could not score it (``outcomes`` says why)."""
        return rewards_of(await self.outcomes(items))

    async def outcomes(self, items: Sequence[dict[str, Any]]) -> list[Outcome]:
        """Each item's reward, or its `ItemFailure`; a request that fails as a whole raises `GatewayError`."""
        answer = await self.answer(items)
        self.last_identity = answer.identity
        return answer.outcomes

    async def answer(self, items: Sequence[dict[str, Any]], http: httpx.AsyncClient | None = None) -> Answer:
        """The outcomes with the identity of the model that scored them, which concurrent requests cannot mix
        up (``last_identity`` is the last answer's, whichever that was). ``http``: connections to reuse, where
        the caller keeps them open across requests (a batch); by default one client for this request."""
        if not items:
            return Answer([], None)
        if http is None:
            async with async_http_client(self.settings.timeout_s) as own:
                return await self.answer(items, own)
        settings, attempts = self.settings, _Attempts(self.settings)
        url = settings.base_url() + REWARDS_PATH
        while True:
            response, failure = None, None
            try:
                response = await http.post(url, json=settings.body(items), headers=settings.request_headers())
            except httpx.TransportError as error:
                failure = error
            outcome = attempts.after(response, failure, len(items))
            if isinstance(outcome, list):
                return Answer(outcome, attempts.identity)
            await self.sleep(outcome)
