"""The scoring wire formats: one row per format, from its request to its answer.

A row names the format's route (its label in the metrics) and paths, the pydantic model of its request
(reward_gateway.items.wire), how a request becomes the items to score, and how the scores become its answer.
reward_gateway.http.routes serves every row the same way (auth, load, metrics, the rollout); adding a
trainer's format is adding a row here (ARCHITECTURE.md, "Adding a wire format"). verl's /classify is
vLLM's own format, passed through rather than scored item by item (Gateway.classify); a pipeline role's
routes are its role's (reward_gateway.pipeline.routes).

A failed item (reward_gateway.items.outcomes) is answered as each format's trainer can take it, read from the
trainers' own code (docs/trainers.md): null in place of its reward beside a `failures` list, where the
client reads null as "no reward" (this gateway's client for TRL and verl; KServe's graph and the
pipeline's combine); for OpenRLHF, whose code has no missing reward but a failed request (its executor
retries, then leaves the sample without one), the request fails with the item's own status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from reward_gateway.config.gateway import GatewayConfig
from reward_gateway.items.errors import BadRequest, NotFound
from reward_gateway.items.extract import Score
from reward_gateway.items.outcomes import Failure, ItemsFailed, Outcome, failures, reward
from reward_gateway.items.wire import (
    OpenRLHFRequest,
    PipelineItems,
    PredictRequest,
    RewardItem,
    RewardsRequest,
    ScoringItem,
    judged_text,
    reference_text,
    scoring_items,
)

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class Items:
    """What a request asks to score; ``groups`` key the comparison of two models during a rollout
    (None: the items' own groups)."""

    items: list[ScoringItem]
    groups: Sequence[str | None] | None = None


@dataclass(frozen=True)
class Scored:
    """What an answer is made of: each item's score or failure, in their order, and who scored them."""

    outcomes: list[Outcome]
    config: GatewayConfig
    identity: dict[str, Any]  # the answering model's (reward_gateway.config.identity)

    def rewards(self) -> list[float | None]:
        """Each item's reward; None (null) for a failed one, never a number."""
        return [reward(outcome) for outcome in self.outcomes]

    def step_scores(self) -> list[list[float] | None]:
        return [outcome.step_scores if isinstance(outcome, Score) else None for outcome in self.outcomes]

    def with_failures(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer, with its failures listed where there are any (an answer without any is as it always was)."""
        failed = failures(self.outcomes)
        if failed:
            answer["failures"] = failed
        return answer


@dataclass(frozen=True)
class WireFormat(Generic[R]):
    label: str  # the route's label in reward_gateway_requests_total and the other route series
    paths: Callable[[GatewayConfig], Sequence[str]]
    request: type[R]
    items: Callable[[R, GatewayConfig], Items]
    answer: Callable[[R, Scored], dict[str, Any]]


def _rewards_items(request: RewardsRequest, config: GatewayConfig) -> Items:
    if request.model is not None and request.model != config.model_name:
        raise NotFound(f"model {request.model!r} is not served here; this gateway serves {config.model_name!r}")
    return Items(scoring_items(request.items, config.step_tag))


def _rewards_answer(request: RewardsRequest, scored: Scored) -> dict[str, Any]:
    answer: dict[str, Any] = {"model": scored.config.model_name, "rewards": scored.rewards()}
    if scored.config.kind.steps:
        answer["step_scores"] = scored.step_scores()
    scored.with_failures(answer)
    answer["identity"] = scored.identity
    return answer


def _predict_answer(request: PredictRequest, scored: Scored) -> dict[str, Any]:
    if scored.config.kind.steps:
        predictions: list[Any] = [
            {"reward": outcome.reward, "step_scores": outcome.step_scores} if isinstance(outcome, Score) else None
            for outcome in scored.outcomes
        ]
    else:
        predictions = scored.rewards()
    return scored.with_failures({"predictions": predictions, "identity": scored.identity})


def _openrlhf_items(request: OpenRLHFRequest, config: GatewayConfig) -> Items:
    if request.prompts is not None and len(request.prompts) != len(request.query):
        raise BadRequest(f"prompts has {len(request.prompts)} entries but query has {len(request.query)}")
    labels = request.labels
    if labels is not None and len(labels) != len(request.query):
        if config.kind.judge:  # a judge reads them: never one the wrong item's
            raise BadRequest(f"labels has {len(labels)} entries but query has {len(request.query)}")
        labels = None  # a score head never reads them
    # OpenRLHF's query is the finished text (prompt and response, already templated);
    # its prompts, where sent, tell which completions answer one prompt (a group), and where the
    # response starts, for a judge; its labels are a judge's reference answers.
    prompts = request.prompts or [None] * len(request.query)
    references = [reference_text(label) for label in labels or [None] * len(request.query)]
    items = [
        ScoringItem(text=query, judged=judged_text(query, prompt, reference))
        for query, prompt, reference in zip(request.query, prompts, references, strict=True)
    ]
    return Items(items, request.prompts)


def _openrlhf_answer(request: OpenRLHFRequest, scored: Scored) -> dict[str, Any]:
    """OpenRLHF reads ``rewards`` into a tensor (a null would break it: samples_generator.py, 0.11.2), and its
    missing reward is a failed request: an item's failure fails the request, with the item's own status (one
    item per request since 0.9.1, so no other item's reward is lost); a failure a retry cannot mend first."""
    failed = [outcome for outcome in scored.outcomes if isinstance(outcome, Failure)]
    if failed:
        first = next((failure for failure in failed if not failure.retry), failed[0])
        raise ItemsFailed(first, failures(scored.outcomes))
    rewards = scored.rewards()
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}, "identity": scored.identity}


def _pipeline_items(request: PipelineItems, config: GatewayConfig) -> Items:
    """An RLHFPipeline graph's reward step (reward_gateway.pipeline.routes): its prompts and responses
    scored as /v1/rewards items, ``groups`` their groups."""
    groups = request.groups or [None] * len(request.prompts)
    items = [
        RewardItem(prompt=prompt, response=response, group=group)
        for prompt, response, group in zip(request.prompts, request.responses, groups, strict=True)
    ]
    return Items(scoring_items(items, config.step_tag))


FORMATS: tuple[WireFormat[Any], ...] = (
    # This gateway's own: items of any shape, the step scores of a process model.
    WireFormat("rewards", lambda config: ("/v1/rewards",), RewardsRequest, _rewards_items, _rewards_answer),
    # KServe v1 predict, as KServe's InferenceGraph calls it: the same items under `instances`.
    WireFormat(
        "v1_predict",
        lambda config: tuple(f"/v1/models/{name}:predict" for name in config.v1_names),
        PredictRequest,
        lambda request, config: Items(scoring_items(request.instances, config.step_tag)),
        _predict_answer,
    ),
    # OpenRLHF's remote reward model (its --remote_rm_url).
    WireFormat("get_reward", lambda config: ("/get_reward",), OpenRLHFRequest, _openrlhf_items, _openrlhf_answer),
    # An RLHFPipeline graph's reward step.
    WireFormat(
        "pipeline_reward",
        lambda config: ("/v1/pipeline/reward",),
        PipelineItems,
        _pipeline_items,
        lambda request, scored: scored.with_failures({"rewards": scored.rewards()}),
    ),
)
