"""The gateway's routes as plain async functions from request bytes to answers.

Kept free of the web framework (reward_gateway.http.asgi calls them ahead of it);
`answer` does the bookkeeping every route shares. The scoring routes are the rows
of reward_gateway.http.formats, served alike, plus verl's /classify passed through;
each scores through `_run`: the stable model alone, or, during a rollout, the
model(s) reward_gateway.rollout.canary picks for the whole request. A gateway in an
RLHFPipeline role (REWARD_GATEWAY_PIPELINE_ROLE) has its role's routes instead
(reward_gateway.pipeline.routes), with the same bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.config.generation import Generation
from reward_gateway.config.generation import followed as followed_generation
from reward_gateway.config.identity import (
    DEFAULT_CLIENT,
    ClientLabels,
    client_identity,
    identity_headers,
    model_identity,
)
from reward_gateway.http.auth import BearerTokenCheck
from reward_gateway.http.formats import FORMATS, Scored, WireFormat
from reward_gateway.items.errors import BadRequest, GatewayError, NotFound, Unauthorized, forget
from reward_gateway.items.extract import Score
from reward_gateway.items.kinds import CLASSIFY_KINDS, CLASSIFY_PATH
from reward_gateway.items.outcomes import REASONS, Outcome, failure_of, reward, whole_failure
from reward_gateway.items.wire import ClassifyRequest, ScoringItem, parse, parse_json, validate
from reward_gateway.pipeline.routes import PipelineRole, Route
from reward_gateway.rollout.canary import Backend, Caller, Canary
from reward_gateway.scoring.coalesce import MetricsObserver
from reward_gateway.scoring.scorer import ItemScorer, make_scorer
from reward_gateway.signals.load import CURRENT, Held, Load
from reward_gateway.signals.metrics import GatewayMetrics
from reward_gateway.upstream.client import VllmClient

logger = logging.getLogger("reward_gateway")

# The answer's header naming the model whose scores it carries (stable or candidate), during a rollout.
MODEL_HEADER = "X-Reward-Model"

T = TypeVar("T")


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Tally:
    """What a route learnt about its request, for the metrics and the answer's headers;
    and who sent it, for a rollout's sticky key."""

    caller: Caller
    client: str = DEFAULT_CLIENT  # who asks, for the fair share (reward_gateway.config.identity)
    items: int = 0
    backend: Backend | None = None  # the model whose scores (or failure) the answer carries
    failed: str | None = None  # where the whole request failed after its items were admitted: their reason


Handler = Callable[[bytes, _Tally], Awaitable[dict[str, Any]]]


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None):
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        # Requests and items in flight and the requests held for the predictor:
        # what the autoscaler reads (reward_gateway.scale.scaler, where it is on).
        self.load = Load(config.max_held_requests)
        self.scaler: Any = None  # reward_gateway.scale.scaler.Scaler, started with the app where configured
        self.client = VllmClient(config, self.metrics, load=self.load)
        model = config.model_name
        labels = ClientLabels(config.coalesce.weights)
        self.scorer = make_scorer(config, self.client, MetricsObserver(self.metrics, model, labels), self.metrics)
        identity = model_identity(model, "stable", config.identity)
        scores = self.metrics.score_recorder(model)
        self.stable = Backend("stable", model, config, self.client, self.scorer, scores, identity)
        self.canary = Canary.build(config, self.metrics, self.stable) if config.canary is not None else None
        self.generation = self._followed_generation()
        # The header naming the client: its fair share, and a sticky split's key where the rollout says so.
        self.client_header = config.client_header.encode("latin-1")
        self.sticky_client = config.canary is not None and config.canary.sticky == "client"
        self.auth = BearerTokenCheck(config.auth_token_file) if config.auth_token_file else None
        # What vLLM's answers add to a request's memory charge per byte (reward_gateway.http.asgi).
        self.answer_cost_per_byte = self.scorer.kind.answer_cost_per_byte
        self.routes: dict[str, Handler]
        if config.pipeline_role is not None:
            # A role's gateway (reward_gateway.pipeline.routes) serves its role's routes, nothing to score.
            role = PipelineRole(config, self.client)
            self.answer_cost_per_byte = role.answer_cost_per_byte
            self.routes = {label: self._pipeline_route(route) for label, route in role.routes.items()}
            self.paths = dict(role.paths)
        else:
            self.routes = {wire.label: self._format_route(wire) for wire in FORMATS}
            self.routes["classify"] = self.classify
            # The paths the scoring routes answer on (reward_gateway.http.asgi serves them).
            self.paths = {path: wire.label for wire in FORMATS for path in wire.paths(config)}
            self.paths["/classify"] = "classify"
        # Metric children bound once: prometheus-client's labels() validates and
        # looks its labels up under a lock on every call, several times a request.
        self._inflight = self.metrics.inflight.labels(model)
        self._durations = {route: self.metrics.duration.labels(model, route) for route in self.routes}
        self._requests: dict[tuple[str, int], Any] = {}
        self._scored = {route: self.metrics.items.labels(model, route, "ok") for route in self.routes}
        self._unscored = {route: self.metrics.items.labels(model, route, "error") for route in self.routes}
        # Every reason's series exists from the start at 0, so rate() and the failure-ratio alert see the
        # first failure as an increase, not a new series.
        self._failures = {
            (route, reason): self.metrics.item_failures.labels(model, route, reason)
            for route in self.routes
            for reason in REASONS
        }

    def scorers(self) -> list[ItemScorer]:
        """Every model's scorer: the stable model's, and the candidate's during a rollout."""
        scorers = [self.stable.scorer]
        if self.canary is not None:
            scorers.append(self.canary.backends["candidate"].scorer)
        return scorers

    async def refusal(self) -> str:
        """Why one of its scorers refuses its settings (a judge's labels: reward_gateway.judge.scorer), once one
        does; what that means for the process is the server's to say (reward_gateway.http.server)."""
        waits = [asyncio.ensure_future(scorer.refusal()) for scorer in self.scorers()]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for wait in waits:
                wait.cancel()

    @property
    def models_per_request(self) -> int:
        """How many models may score one request at once (the ASGI front charges its memory as many times)."""
        return 1 if self.canary is None else 2

    def _followed_generation(self) -> Generation | None:
        """The RewardModel's generation followed from its file, where one gives it: in the stable model's
        answers, and in the candidate's unless it has its own (reward_gateway.config.generation)."""
        path = self.config.identity.generation_file
        if path is None:
            return None
        identities = [self.stable.identity]
        if (
            self.canary is not None
            and self.config.canary is not None
            and self.config.canary.identity.generation is None
        ):
            identities.append(self.canary.backends["candidate"].identity)
        return followed_generation(str(path), identities)

    async def close(self) -> None:
        if self.generation is not None:
            await self.generation.stop()
        await self.client.close()
        if self.canary is not None:
            await self.canary.close()

    def authorized(self, authorization: str | None) -> bool:
        return self.auth is None or self.auth.allows(authorization)

    async def answer(self, route: str, body: bytes, authorization: str | None, client: str | None = None) -> Answer:
        """Run one route and record requests, items, latency and in-flight count.

        `client`: the value of the client header (X-Reward-Client, or the rollout's own)."""
        tally = _Tally(Caller(client if self.sticky_client else None, authorization, body))
        started = time.perf_counter()
        self._inflight.inc()
        request = CURRENT.set(Held())  # its calls held for the predictor count as one request
        counted = False
        try:
            token_name = None
            if self.auth is not None:
                token_name = self.auth.name_of(authorization)
                if token_name is None:
                    raise Unauthorized()
            tally.client = client_identity(token_name, client)
            # Counted for the autoscaler once authorized: a stranger's request never wakes the GPU.
            self.load.begin()
            counted = True
            answer = Answer(200, await self.routes[route](body, tally))
        except GatewayError as error:
            answer = Answer(error.status, error.body(), error.headers)
            tally.failed = failure_of(error).reason
            forget(error)
        except Exception as error:  # a bug: the client gets a message, never a stack trace
            logger.exception("unexpected error on route %s", route)
            answer = Answer(500, {"error": "internal error in the reward gateway"})
            tally.failed = "internal"
            forget(error)
        finally:
            CURRENT.reset(request)
            if counted:
                self.load.end(tally.items)
            self._inflight.dec()
        if tally.backend is not None:
            answer.headers = {**answer.headers, **identity_headers(tally.backend.identity)}
            if self.canary is not None:
                answer.headers[MODEL_HEADER] = tally.backend.role
        self._durations[route].observe(time.perf_counter() - started)
        self.count(route, answer.status)
        if tally.items:
            self._count_items(route, answer, tally)
        return answer

    def count(self, route: str, status: int) -> None:
        """Count an answer (also one given without running the route: the ASGI front's refusals)."""
        key = (route, status)
        requests = self._requests.get(key)
        if requests is None:
            requests = self._requests[key] = self.metrics.requests.labels(self.config.model_name, route, str(status))
        requests.inc()

    def _count_items(self, route: str, answer: Answer, tally: _Tally) -> None:
        """The request's items, scored or failed, and each failure's reason."""
        if answer.status != 200:
            reasons = [tally.failed or "internal"] * tally.items
        else:
            reasons = [failure["reason"] for failure in answer.body.get("failures", ())]
        if len(reasons) < tally.items:
            self._scored[route].inc(tally.items - len(reasons))
        if reasons:
            self._unscored[route].inc(len(reasons))
            for reason, count in Counter(reasons).items():
                # a reason not of REASONS would be a bug of ours: counted as one, the labels stay bounded
                self._failures.get((route, reason), self._failures[route, "internal"]).inc(count)

    def _format_route(self, wire: WireFormat[Any]) -> Handler:
        """A wire format's route: its request parsed, its items scored, its answer shaped
        (reward_gateway.http.formats)."""

        async def handler(body: bytes, tally: _Tally) -> dict[str, Any]:
            request = parse(wire.request, body, self.config.max_items)
            asked = wire.items(request, self.config)
            outcomes = await self._score(asked.items, tally, asked.groups)
            return wire.answer(request, Scored(outcomes, self.config, _identity(tally)))

        return handler

    def _pipeline_route(self, route: Route) -> Handler:
        async def handler(body: bytes, tally: _Tally) -> dict[str, Any]:
            return await route(body, lambda count: self._admit(count, tally))

        return handler

    async def classify(self, body: bytes, tally: _Tally) -> dict[str, Any]:
        kind = self.scorer.kind
        if kind.path != CLASSIFY_PATH:
            raise NotFound(
                f"/classify serves {' and '.join(CLASSIFY_KINDS)} reward models; {self.config.model_name!r} is a "
                f"{kind.name} reward model: use /v1/rewards"
            )
        forwarded = parse_json(body, self.config.max_items)
        request = validate(ClassifyRequest, forwarded)
        # The kind's own settings unless the caller chose otherwise: the raw
        # logit, as vLLM's default sigmoid would squash rewards silently.
        for name, value in kind.request_fields().items():
            forwarded.setdefault(name, value)
        count = 1 if isinstance(request.input, str) else len(request.input)
        self._admit(count, tally)
        if count == 0:
            raise BadRequest("input is empty")

        async def classify(backend: Backend) -> tuple[Any, list[Score]]:
            # One model answers per backend, whatever name the trainer was configured with.
            response = await backend.client.post(kind.path, {**forwarded, "model": backend.config.model_name})
            return response, kind.extract(response, count, self.config.step_aggregate)

        response, scores = await self._run(classify, lambda result: _rewards(result[1]), None, tally)
        self._observe(scores, tally)
        return response

    async def _score(
        self, items: list[ScoringItem], tally: _Tally, groups: Sequence[str | None] | None = None
    ) -> list[Outcome]:
        """Each item's score or failure, from one model; `groups` (default: the items' own) key the
        comparison of two. Where no item was scored, for vLLM's reasons alone, the request fails whole."""
        self._admit(len(items), tally)
        if not items:
            tally.backend = self.stable  # nobody scored: the answer still names the model asked
            return []

        async def score(backend: Backend) -> list[Outcome]:
            outcomes = await backend.scorer.score(items, tally.client)
            whole = whole_failure(outcomes)
            if whole is not None:
                raise whole
            return outcomes

        if self.canary is None:  # the common case, kept as lean as before rollouts existed
            tally.backend = self.stable
            outcomes = await score(self.stable)
        else:
            if groups is None:
                groups = [item.group for item in items]
            outcomes = await self._run(score, _rewards, groups, tally)
        self._observe(outcomes, tally)
        return outcomes

    async def _run(
        self,
        call: Callable[[Backend], Awaitable[T]],
        rewards: Callable[[T], Sequence[object]],
        groups: Sequence[str | None] | None,
        tally: _Tally,
    ) -> T:
        """Scores one request: with the stable model, or as the rollout says."""
        if self.canary is None:
            tally.backend = self.stable
            return await call(self.stable)

        answering = await self.canary.run(call, rewards, groups, tally.caller)
        tally.backend = answering.backend  # the model whose result, or failure, the trainer gets
        return answering.value()

    def _admit(self, count: int, tally: _Tally) -> None:
        if count > self.config.max_items:
            raise BadRequest(f"{count} items in one request; at most {self.config.max_items} are allowed")
        tally.items = count
        self.load.admit(count)

    def _observe(self, outcomes: Sequence[Outcome], tally: _Tally) -> None:
        # Each model's scores under its own name: a split must not blur the drift alert's histogram and sums.
        recorder = tally.backend.scores if tally.backend is not None else self.stable.scores
        for outcome in outcomes:
            if isinstance(outcome, Score):
                recorder.observe(outcome.reward)


def _identity(tally: _Tally) -> dict[str, Any]:
    """The identity of the model whose scores the answer carries."""
    return tally.backend.identity if tally.backend is not None else {}


def _rewards(outcomes: Sequence[Outcome]) -> list[float | None]:
    return [reward(outcome) for outcome in outcomes]
