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
a step's new share rolls the gateways, and the old replicas' figures describe the
previous step. Pair and call counts are added across replicas before any ratio, as
the gateway exports them for.

A step advances once it has run ``interval`` and the figures are enough to judge
(``minPairs`` pairs, ``minRequests`` candidate calls) and pass; any failing gate
with enough figures, or the candidate's predictor no longer Ready while it has a
share, rolls the share back to 0 (CanaryProgressing=False, RolledBack) until the
rollout changes (a new candidate, mode or steps in the spec).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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

# The gateway's GET /canary pair kinds (reward_gateway.agreement.PairCounts).
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
        """(C + Tc/2) / (C + D + Tc): as reward_gateway.agreement defines it."""
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


def decide(
    canary: CanarySpec,
    candidate: str,
    revision: str,
    previous: Mapping[str, Any] | None,
    previous_conditions: Iterable[Mapping[str, Any]],
    ready: bool | None,
    figures: Figures | None,
    interval_s: float,
    now: datetime,
    deployment: str,
) -> Rollout:
    """The rollout's next state from its last (status.canary), KServe's word and the gateways' figures."""
    steps = shares(canary)
    mode = canary["mode"]
    state: dict[str, Any]
    if previous is None or previous.get("revision") != revision:
        state = {"phase": AWAITING_CANDIDATE, "step": 0, "percent": 0, "stepStartedAt": format_time(now)}
    else:
        state = {key: previous[key] for key in ("phase", "step", "percent", "stepStartedAt") if key in previous}
        state.setdefault("phase", AWAITING_CANDIDATE)
        state.setdefault("step", 0)
        state.setdefault("percent", 0)
        state.setdefault("stepStartedAt", format_time(now))
    state["step"] = min(int(state["step"]), len(steps) - 1)
    events: list[Event] = []

    def progressing(status: str, reason: str, message: str) -> Condition:
        return Condition(conditions.CANARY_PROGRESSING, status, reason, message)

    def roll_back(why: str) -> Condition:
        state.update(phase=ROLLED_BACK, percent=0, stepStartedAt=format_time(now))
        message = (
            f"rolled back to 0% from {steps[state['step']]}%: {why}; raise spec.canary.attempt (or change the "
            "candidate) to start over"
        )
        events.append(Event("Warning", conditions.ROLLED_BACK, message))
        return progressing("False", conditions.ROLLED_BACK, message)

    phase = state["phase"]
    verdict = judge(figures, canary) if figures is not None and ready else Verdict(None, False)
    if phase == ROLLED_BACK:
        previous_condition = _previous_progressing(previous_conditions) or {}
        condition = progressing(
            "False",
            conditions.ROLLED_BACK,
            previous_condition.get("message") or "rolled back; raise spec.canary.attempt to start over",
        )
    elif ready is None and state["percent"] > 0:
        # KServe has not reported on the candidate (yet, or its report is gone for a moment): the share is
        # held, neither raised nor taken away on no news
        condition = progressing(
            "Unknown", conditions.AWAITING_CANDIDATE, f"waiting for KServe to report on {deployment}; share held"
        )
    elif not ready:
        if state["percent"] > 0:
            condition = roll_back(f"the candidate's predictor {deployment} is not Ready")
        else:
            state.update(phase=AWAITING_CANDIDATE, percent=0)
            condition = progressing(
                "Unknown", conditions.AWAITING_CANDIDATE, f"waiting for the candidate's predictor {deployment}"
            )
    elif phase == AWAITING_CANDIDATE:
        state.update(phase=SHADOWING if mode == "shadow" else PROGRESSING, step=0, stepStartedAt=format_time(now))
        state["percent"] = steps[0]
        if mode == "shadow":
            condition = progressing("True", conditions.SHADOWING, "both models score every request; the trainer gets "
                                    "the stable model's scores")  # fmt: skip
        else:
            message = f"step 1 of {len(steps)}: the candidate answers {steps[0]}% of the requests"
            events.append(Event("Normal", conditions.STEP_RUNNING, message))
            condition = progressing("True", conditions.STEP_RUNNING, message)
    elif mode == "shadow":
        state.update(phase=SHADOWING, percent=0)
        if verdict.failure:
            condition = progressing("False", conditions.GATE_FAILED, f"in shadow, {verdict.failure}")
            if (_previous_progressing(previous_conditions) or {}).get("reason") != conditions.GATE_FAILED:
                events.append(Event("Warning", conditions.GATE_FAILED, condition.message))
        else:
            verdict_text = "the gates hold" if verdict.enough else "too few figures to judge yet"
            condition = progressing("True", conditions.SHADOWING, f"both models score every request; {verdict_text}")
    elif verdict.failure:
        condition = roll_back(verdict.failure)
    else:
        step = state["step"]
        started = parse_time(state["stepStartedAt"]) or now
        elapsed = (now - started).total_seconds()
        if phase == COMPLETE:
            condition = progressing(
                "False",
                conditions.ROLLOUT_COMPLETE,
                f"the candidate answers {steps[step]}% and the gates hold: promote it in Git (spec.canary.model "
                "into spec.model, spec.canary removed)",
            )
        elif elapsed < interval_s:
            condition = progressing(
                "True",
                conditions.STEP_RUNNING,
                f"step {step + 1} of {len(steps)}: the candidate answers {steps[step]}% of the requests",
            )
        elif not verdict.enough:
            condition = progressing(
                "True",
                conditions.AWAITING_EVIDENCE,
                f"step {step + 1} of {len(steps)} ({steps[step]}%) has run its interval; waiting for "
                f"{canary['minPairs']} pairs and {canary['minRequests']} candidate calls to judge it",
            )
        elif step + 1 < len(steps):
            state.update(step=step + 1, percent=steps[step + 1], stepStartedAt=format_time(now))
            message = f"step {step + 2} of {len(steps)}: the candidate answers {steps[step + 1]}% of the requests"
            events.append(Event("Normal", conditions.STEP_RUNNING, message))
            condition = progressing("True", conditions.STEP_RUNNING, message)
        else:
            state["phase"] = COMPLETE
            message = (
                f"the candidate answers {steps[step]}% and the gates hold: promote it in Git (spec.canary.model "
                "into spec.model, spec.canary removed)"
            )
            events.append(Event("Normal", conditions.ROLLOUT_COMPLETE, message))
            condition = progressing("False", conditions.ROLLOUT_COMPLETE, message)
    status = {
        "candidate": candidate,
        "revision": revision,
        "mode": mode,
        **state,
        **_figures_fields(figures if ready else None),
        "message": condition.message,
    }
    return Rollout(status, canary_ready_condition(ready, deployment), condition, tuple(events))
