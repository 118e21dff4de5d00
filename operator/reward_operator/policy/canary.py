"""A rollout's progress, decided from what KServe and the gateways report (spec.canary).

Pure functions: the controller gathers the candidate's readiness (KServe's
``status.canaryStatuses``) and each gateway replica's ``GET /canary``, and this
module decides the share the gateways run next, the status and conditions, and
the events. Nothing here writes the spec: promotion is a commit that moves
``spec.canary.model`` into ``spec.model`` and removes ``spec.canary``.

The gates read the gateways, not Prometheus: the gateways' figures are the
ones the trainer's requests produced at this very step, they need nothing
installed, and the operator already has to reach the gateways' pods; Prometheus'
rates would mix steps within their range and lag a scrape interval. Only the
replicas running the current step (the same candidate, mode and share) are pooled:
a new share reaches the running gateways through a projected ConfigMap, within the
kubelet's sync period, and a replica that still reports the old share is left out
until it has the new one (its decayed window then carries on, with no reset). Pair
and call counts are added across replicas before any ratio, as the gateway exports
them for.

A step advances once it has run ``interval`` and the figures are enough to judge
(``minPairs`` pairs, ``minRequests`` candidate calls) and pass; any failing gate
with enough figures, or the candidate's predictor no longer Ready while it has a
share, rolls the share back to 0 (CanaryProgressing=False, RolledBack) until the
rollout changes (a new candidate, mode or steps in the spec).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..api import conditions
from ..api.kserve import CANARY_PREDICTOR
from ..api.types import CanarySpec
from .status import Condition

# status.canary.phase
AWAITING_CANDIDATE = "AwaitingCandidate"
SHADOWING = "Shadowing"
PROGRESSING = "Progressing"
COMPLETE = "Complete"
ROLLED_BACK = "RolledBack"

# The gateway's GET /canary pair kinds (reward_gateway.rollout.agreement.PairCounts).
PAIR_KINDS = ("concordant", "discordant", "candidate_tied", "stable_tied", "both_tied")


def shares(canary: CanarySpec) -> list[int]:
    """The candidate's shares, step by step: the steps, a fixed percent, or none (shadow)."""
    if canary["mode"] != "split":
        return [0]
    return list(canary["steps"]) if "steps" in canary else [canary.get("percent", 0)]


# ---- what the gateways report -------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """The current step's figures, pooled over the gateway replicas running it."""

    gateways: int = 0
    pairs: dict[str, float] = field(default_factory=dict)
    requests: float = 0.0  # the candidate's calls (decayed)
    errors: float = 0.0
    items: float = 0.0
    score_shift: float | None = None

    @property
    def ordered_by_stable(self) -> float:
        return sum(self.pairs.get(kind, 0.0) for kind in ("concordant", "discordant", "candidate_tied"))

    @property
    def agreement(self) -> float | None:
        """(C + Tc/2) / (C + D + Tc): as reward_gateway.rollout.agreement defines it."""
        ordered = self.ordered_by_stable
        if not ordered:
            return None
        return (self.pairs.get("concordant", 0.0) + self.pairs.get("candidate_tied", 0.0) / 2) / ordered

    @property
    def kendall_tau_b(self) -> float | None:
        concordant, discordant = self.pairs.get("concordant", 0.0), self.pairs.get("discordant", 0.0)
        untied = concordant + discordant
        denominator = math.sqrt(
            (untied + self.pairs.get("candidate_tied", 0.0)) * (untied + self.pairs.get("stable_tied", 0.0))
        )
        return (concordant - discordant) / denominator if denominator else None

    @property
    def error_ratio(self) -> float | None:
        return self.errors / self.requests if self.requests else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def pool(summaries: Iterable[Mapping[str, Any]], candidate: str, mode: str, percent: int) -> Figures:
    """Adds up the GET /canary answers of the replicas that run this step (candidate, mode and share)."""
    running = [
        s
        for s in summaries
        if s.get("candidate") == candidate and s.get("mode") == mode and _number(s.get("percent")) == percent
    ]
    pairs = {kind: sum(_number((s.get("pairs") or {}).get(kind)) for s in running) for kind in PAIR_KINDS}
    candidates = [((s.get("models") or {}).get("candidate") or {}) for s in running]
    shift_weight = shift_sum = 0.0
    for s in running:
        if isinstance(s.get("score_difference_mean"), int | float) and _number(s.get("items")) > 0:
            shift_weight += _number(s["items"])
            shift_sum += _number(s["items"]) * s["score_difference_mean"]
    return Figures(
        gateways=len(running),
        pairs=pairs,
        requests=sum(_number(c.get("requests")) for c in candidates),
        errors=sum(_number(c.get("errors")) for c in candidates),
        items=sum(_number(s.get("items")) for s in running),
        score_shift=shift_sum / shift_weight if shift_weight else None,
    )


@dataclass(frozen=True)
class Verdict:
    """The gates on one step's figures."""

    failure: str | None  # the first failing gate, said for a person; None when none fails
    enough: bool  # enough pairs and calls to judge both gates


def judge(figures: Figures, canary: CanarySpec) -> Verdict:
    """A gate fails only on enough figures; too few figures fail nothing and advance nothing."""
    failure = None
    enough_calls = figures.requests >= canary["minRequests"]
    enough_pairs = figures.ordered_by_stable >= canary["minPairs"]
    ratio, agreement = figures.error_ratio, figures.agreement
    if enough_calls and ratio is not None and ratio > canary["maxErrorRatio"]:
        failure = (
            f"the candidate failed {ratio:.1%} of {figures.requests:.0f} calls, over maxErrorRatio "
            f"{canary['maxErrorRatio']:.1%}"
        )
    elif enough_pairs and agreement is not None and agreement < canary["minAgreement"]:
        failure = (
            f"the candidate orders {agreement:.1%} of {figures.ordered_by_stable:.0f} pairs as the stable model "
            f"does, under minAgreement {canary['minAgreement']:.1%}"
        )
    return Verdict(failure, enough_calls and enough_pairs)


# ---- what KServe reports on the candidate ------------------------------------------------


def candidate_ready(isvc: Mapping[str, Any] | None) -> bool | None:
    """KServe's word on the canary predictor (its Deployment available), or None before it has one."""
    found = ((isvc or {}).get("status") or {}).get("canaryStatuses") or []
    entry = next((c for c in found if c.get("name") == CANARY_PREDICTOR), None)
    return None if entry is None else bool(entry.get("ready"))


def candidate_isvc_ready(isvc: Mapping[str, Any] | None) -> bool | None:
    """Knative mode: KServe's Ready on the candidate's own InferenceService, or None before it reports."""
    found = ((isvc or {}).get("status") or {}).get("conditions") or []
    ready = next((c for c in found if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") not in ("True", "False"):
        return None
    return ready["status"] == "True"


def canary_ready_condition(ready: bool | None, deployment: str) -> Condition:
    if ready is None:
        return Condition(
            conditions.CANARY_READY,
            "Unknown",
            conditions.AWAITING_CANDIDATE,
            f"waiting for KServe to report on the candidate's predictor {deployment}",
        )
    if ready:
        return Condition(
            conditions.CANARY_READY,
            "True",
            conditions.CANDIDATE_READY,
            f"the candidate's predictor {deployment} is Ready",
        )
    return Condition(
        conditions.CANARY_READY,
        "False",
        conditions.CANDIDATE_NOT_READY,
        f"KServe reports the candidate's predictor {deployment} not available",
    )


# ---- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Rollout:
    """What one look at a rollout decided."""

    status: dict[str, Any]  # status.canary
    ready: Condition  # CanaryReady
    progressing: Condition  # CanaryProgressing
    events: tuple[Event, ...] = ()

    @property
    def percent(self) -> int:
        return int(self.status["percent"])


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _figures_fields(figures: Figures | None) -> dict[str, Any]:
    if figures is None or not figures.gateways:
        return {}
    fields: dict[str, Any] = {"gateways": figures.gateways, "pairs": round(figures.ordered_by_stable, 3)}
    fields["requests"] = round(figures.requests, 3)
    for name, value in (
        ("agreement", figures.agreement),
        ("kendallTauB", figures.kendall_tau_b),
        ("errorRatio", figures.error_ratio),
        ("scoreShift", figures.score_shift),
    ):
        if value is not None:
            fields[name] = round(value, 4)
    return fields


def _previous_progressing(current_conditions: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((c for c in current_conditions if c.get("type") == conditions.CANARY_PROGRESSING), None)


@dataclass(frozen=True)
class RolloutInput:
    """Everything one look at a rollout decides from, observed before anything is rendered."""

    canary: CanarySpec  # spec.canary, defaults applied
    candidate: str  # the candidate's name in the gateways' figures
    revision: str  # the rollout's identity: a new one starts over
    previous: Mapping[str, Any] | None  # status.canary as stored
    previous_conditions: tuple[Mapping[str, Any], ...]  # status.conditions as stored
    ready: bool | None  # KServe's word on the candidate's predictor (None: no word yet)
    figures: Figures | None  # the current step's figures, pooled (None: not read)
    interval_s: float  # spec.canary.interval
    now: datetime
    deployment: str  # the candidate's predictor, as messages name it


class _Look:
    """One decision in the making: the state it moves, the events it posts."""

    def __init__(self, given: RolloutInput):
        self.given = given
        self.steps = shares(given.canary)
        previous = given.previous or {}
        fresh = previous.get("revision") != given.revision
        kept = {} if fresh else {k: previous[k] for k in ("phase", "step", "percent", "stepStartedAt") if k in previous}
        self.state: dict[str, Any] = {
            "phase": AWAITING_CANDIDATE,
            "step": 0,
            "percent": 0,
            "stepStartedAt": format_time(given.now),
            **kept,
        }
        self.state["step"] = min(int(self.state["step"]), len(self.steps) - 1)
        self.events: list[Event] = []

    def progressing(self, status: str, reason: str, message: str) -> Condition:
        return Condition(conditions.CANARY_PROGRESSING, status, reason, message)

    def announce(self, event_type: str, condition: Condition) -> Condition:
        self.events.append(Event(event_type, condition.reason, condition.message))
        return condition

    def roll_back(self, why: str) -> Condition:
        step_share = self.steps[self.state["step"]]
        self.state.update(phase=ROLLED_BACK, percent=0, stepStartedAt=format_time(self.given.now))
        message = (
            f"rolled back to 0% from {step_share}%: {why}; raise spec.canary.attempt (or change the "
            "candidate) to start over"
        )
        return self.announce("Warning", self.progressing("False", conditions.ROLLED_BACK, message))

    def step_message(self, step: int) -> str:
        return f"step {step + 1} of {len(self.steps)}: the candidate answers {self.steps[step]}% of the requests"

    def promote_message(self) -> str:
        return (
            f"the candidate answers {self.steps[self.state['step']]}% and the gates hold: promote it in Git "
            "(spec.canary.model into spec.model, spec.canary removed)"
        )


def _stays_rolled_back(look: _Look, verdict: Verdict) -> Condition:
    """Rolled back: until the rollout changes (a new revision starts over), nothing moves."""
    before = _previous_progressing(look.given.previous_conditions) or {}
    message = before.get("message") or "rolled back; raise spec.canary.attempt to start over"
    return look.progressing("False", conditions.ROLLED_BACK, message)


def _candidate_not_serving(look: _Look, verdict: Verdict) -> Condition:
    """KServe has no word (the share is held, neither raised nor taken away on no news), or says the
    candidate is not Ready (a share it had is rolled back)."""
    deployment = look.given.deployment
    if look.given.ready is None and look.state["percent"] > 0:
        message = f"waiting for KServe to report on {deployment}; share held"
        return look.progressing("Unknown", conditions.AWAITING_CANDIDATE, message)
    if look.state["percent"] > 0:
        return look.roll_back(f"the candidate's predictor {deployment} is not Ready")
    look.state.update(phase=AWAITING_CANDIDATE, percent=0)
    return look.progressing(
        "Unknown", conditions.AWAITING_CANDIDATE, f"waiting for the candidate's predictor {deployment}"
    )


def _start(look: _Look, verdict: Verdict) -> Condition:
    """The candidate just became Ready: shadowing, or the first step."""
    shadow = look.given.canary["mode"] == "shadow"
    look.state.update(
        phase=SHADOWING if shadow else PROGRESSING,
        step=0,
        percent=look.steps[0],
        stepStartedAt=format_time(look.given.now),
    )
    if shadow:
        message = "both models score every request; the trainer gets the stable model's scores"
        return look.progressing("True", conditions.SHADOWING, message)
    return look.announce("Normal", look.progressing("True", conditions.STEP_RUNNING, look.step_message(0)))


def _shadow(look: _Look, verdict: Verdict) -> Condition:
    """Shadowing goes on; a failing gate is reported (one Warning when it starts failing), nothing moves."""
    look.state.update(phase=SHADOWING, percent=0)
    if verdict.failure:
        condition = look.progressing("False", conditions.GATE_FAILED, f"in shadow, {verdict.failure}")
        if (_previous_progressing(look.given.previous_conditions) or {}).get("reason") != conditions.GATE_FAILED:
            look.announce("Warning", condition)
        return condition
    verdict_text = "the gates hold" if verdict.enough else "too few figures to judge yet"
    return look.progressing("True", conditions.SHADOWING, f"both models score every request; {verdict_text}")


def _split(look: _Look, verdict: Verdict) -> Condition:
    """A split step: rolled back on a failing gate; held until its interval has run and the figures are
    enough to judge; then the next step, or complete at the last."""
    if verdict.failure:
        return look.roll_back(verdict.failure)
    given, state = look.given, look.state
    step = state["step"]
    if state["phase"] == COMPLETE:
        return look.progressing("False", conditions.ROLLOUT_COMPLETE, look.promote_message())
    elapsed = (given.now - (parse_time(state["stepStartedAt"]) or given.now)).total_seconds()
    if elapsed < given.interval_s:
        return look.progressing("True", conditions.STEP_RUNNING, look.step_message(step))
    if not verdict.enough:
        message = (
            f"step {step + 1} of {len(look.steps)} ({look.steps[step]}%) has run its interval; waiting for "
            f"{given.canary['minPairs']} pairs and {given.canary['minRequests']} candidate calls to judge it"
        )
        return look.progressing("True", conditions.AWAITING_EVIDENCE, message)
    if step + 1 < len(look.steps):
        state.update(step=step + 1, percent=look.steps[step + 1], stepStartedAt=format_time(given.now))
        return look.announce("Normal", look.progressing("True", conditions.STEP_RUNNING, look.step_message(step + 1)))
    state["phase"] = COMPLETE
    return look.announce("Normal", look.progressing("False", conditions.ROLLOUT_COMPLETE, look.promote_message()))


def _phase(look: _Look) -> Callable[[_Look, Verdict], Condition]:
    """Which part of the rollout this look is in: the first that applies, in this order."""
    phase, ready = look.state["phase"], look.given.ready
    if phase == ROLLED_BACK:
        return _stays_rolled_back
    if not ready:
        return _candidate_not_serving
    if phase == AWAITING_CANDIDATE:
        return _start
    return _shadow if look.given.canary["mode"] == "shadow" else _split


def decide(given: RolloutInput) -> Rollout:
    """The rollout's next state from its last (status.canary), KServe's word and the gateways' figures."""
    look = _Look(given)
    figures = given.figures if given.ready else None
    verdict = judge(figures, given.canary) if figures is not None else Verdict(None, False)
    condition = _phase(look)(look, verdict)
    status = {
        "candidate": given.candidate,
        "revision": given.revision,
        "mode": given.canary["mode"],
        **look.state,
        **_figures_fields(figures),
        "message": condition.message,
    }
    return Rollout(status, canary_ready_condition(given.ready, given.deployment), condition, tuple(look.events))
