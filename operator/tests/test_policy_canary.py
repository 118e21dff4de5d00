"""A rollout's decisions (policy/canary.py): pooling the gateways' figures, the gates, the steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reward_operator.api import conditions
from reward_operator.api.defaults import apply_defaults
from reward_operator.policy import canary as policy

NOW = datetime(2026, 12, 1, 3, 0, 0, tzinfo=UTC)
DEPLOYMENT = "rm-canary-predictor"
CANDIDATE = "rm-candidate-0123abcd"
REVISION = "r1"
INTERVAL = 600.0


def canary(**fields) -> dict:
    spec = {"model": {"uri": "hf://org/rm"}, "canary": {"model": {"uri": "hf://org/rm-v2"}, **fields}}
    return apply_defaults({"spec": spec})["spec"]["canary"]


SPLIT = canary(mode="split", steps=[10, 25, 50, 100], minPairs=100, minRequests=20)
SHADOW = canary(minPairs=100, minRequests=20)


def summary(percent=10, mode="split", candidate=CANDIDATE, concordant=90.0, discordant=10.0, tied=0.0,
            requests=40.0, errors=0.0, items=60.0, shift=0.5) -> dict:  # fmt: skip
    """One replica's GET /canary, as reward_gateway.rollout.canary.CanaryRouter.summary answers."""
    return {
        "model": "rm",
        "candidate": candidate,
        "mode": mode,
        "percent": percent,
        "models": {
            "stable": {"name": "rm", "requests": requests, "errors": 0.0},
            "candidate": {"name": candidate, "requests": requests, "errors": errors},
        },
        "items": items,
        "pairs": {
            "concordant": concordant,
            "discordant": discordant,
            "candidate_tied": tied,
            "stable_tied": 3.0,
            "both_tied": 1.0,
            "ordered_by_stable": concordant + discordant + tied,
        },
        "score_difference_mean": shift,
    }


def test_pooling_adds_counts_across_replicas_before_any_ratio():
    # replica A agrees on 90 of 100 pairs, replica B on 10 of 20: pooled 100 / 120, not the mean 0.7 of ratios
    figures = policy.pool(
        [summary(concordant=90, discordant=10), summary(concordant=10, discordant=10, items=20, shift=-1.5)],
        CANDIDATE,
        "split",
        10,
    )
    assert figures.gateways == 2
    assert figures.ordered_by_stable == 120
    assert figures.agreement == pytest.approx(100 / 120)
    assert figures.requests == 80 and figures.error_ratio == 0
    # the score shift weighs each replica's mean by its items: (60 * 0.5 + 20 * -1.5) / 80
    assert figures.score_shift == pytest.approx(0.0)


def test_a_candidate_tie_counts_half_and_tau_b_matches_a_hand_computation():
    # C=6, D=2, Tc=2, Ts=3: agreement (6 + 1) / 10; tau-b (6 - 2) / sqrt((6 + 2 + 2) (6 + 2 + 3))
    figures = policy.pool([summary(concordant=6, discordant=2, tied=2)], CANDIDATE, "split", 10)
    assert figures.agreement == pytest.approx(0.7)
    assert figures.kendall_tau_b == pytest.approx(4 / (10 * 11) ** 0.5)


def test_only_replicas_running_the_current_step_are_pooled():
    running = summary(percent=25)
    others = [
        summary(percent=10),
        summary(percent=25, candidate="rm-candidate-old"),
        summary(percent=25, mode="shadow"),
    ]
    figures = policy.pool([running, *others, {"detail": "Not Found"}], CANDIDATE, "split", 25)
    assert figures.gateways == 1 and figures.ordered_by_stable == 100


def test_no_replica_means_no_figures():
    figures = policy.pool([], CANDIDATE, "split", 10)
    assert figures.gateways == 0 and figures.agreement is None and figures.error_ratio is None


@pytest.mark.parametrize(
    ("figures", "failure", "enough"),
    [
        (summary(), None, True),
        (summary(concordant=70, discordant=30), "orders 70.0% of 100 pairs", True),
        (summary(errors=4), "failed 10.0% of 40 calls", True),  # 4/40 over 5%
        (summary(errors=2), None, True),  # 2/40 = 5%: at the bound, not over it
        # too few pairs: disagreement judges nothing, and nothing advances
        (summary(concordant=30, discordant=30), None, False),
        # too few calls: errors judge nothing
        (summary(requests=10, errors=10), None, False),
    ],
    ids=["pass", "disagrees", "errors", "errors-at-bound", "few-pairs", "few-calls"],
)
def test_gates(figures, failure, enough):
    verdict = policy.judge(policy.pool([figures], CANDIDATE, "split", 10), SPLIT)
    assert verdict.enough is enough
    if failure is None:
        assert verdict.failure is None
    else:
        assert failure in verdict.failure


def isvc(ready: bool | None) -> dict:
    statuses = [] if ready is None else [{"name": "canary", "ready": ready, "trafficPercent": 0}]
    return {"metadata": {"name": "rm"}, "status": {"canaryStatuses": statuses}}


def test_candidate_readiness_is_kserves_canary_status():
    assert policy.candidate_ready(isvc(True)) is True
    assert policy.candidate_ready(isvc(False)) is False
    assert policy.candidate_ready(isvc(None)) is None
    assert policy.candidate_ready(None) is None


def decide(spec, previous, ready=True, figures=None, now=NOW, previous_conditions=()):
    pooled = (
        None if figures is None else policy.pool(figures, CANDIDATE, spec["mode"], (previous or {}).get("percent", 0))
    )
    return policy.decide(
        policy.RolloutInput(
            spec, CANDIDATE, REVISION, previous, tuple(previous_conditions), ready, pooled, INTERVAL, now, DEPLOYMENT
        )
    )


def state(phase, step=0, percent=0, started=NOW, revision=REVISION) -> dict:
    return {
        "revision": revision,
        "phase": phase,
        "step": step,
        "percent": percent,
        "stepStartedAt": policy.format_time(started),
    }


def test_a_new_rollout_waits_for_the_candidate_at_zero():
    rollout = decide(SPLIT, None, ready=None)
    assert rollout.percent == 0 and rollout.status["phase"] == policy.AWAITING_CANDIDATE
    assert (rollout.progressing.status, rollout.progressing.reason) == ("Unknown", conditions.AWAITING_CANDIDATE)
    assert (rollout.ready.status, rollout.ready.reason) == ("Unknown", conditions.AWAITING_CANDIDATE)
    assert rollout.events == ()


def test_the_first_step_starts_once_the_candidate_is_ready():
    rollout = decide(SPLIT, state(policy.AWAITING_CANDIDATE))
    assert rollout.percent == 10 and rollout.status["step"] == 0 and rollout.status["phase"] == policy.PROGRESSING
    assert rollout.ready.reason == conditions.CANDIDATE_READY
    assert [(e.type, e.reason) for e in rollout.events] == [("Normal", conditions.STEP_RUNNING)]


def test_a_step_holds_until_its_interval_has_run():
    running = state(policy.PROGRESSING, 0, 10, started=NOW - timedelta(seconds=INTERVAL - 1))
    rollout = decide(SPLIT, running, figures=[summary()])
    assert rollout.percent == 10 and rollout.events == ()
    assert (rollout.progressing.status, rollout.progressing.reason) == ("True", conditions.STEP_RUNNING)
    assert rollout.status["agreement"] == 0.9 and rollout.status["gateways"] == 1


def test_a_step_advances_after_its_interval_while_the_gates_hold():
    running = state(policy.PROGRESSING, 0, 10, started=NOW - timedelta(seconds=INTERVAL))
    rollout = decide(SPLIT, running, figures=[summary()])
    assert rollout.percent == 25 and rollout.status["step"] == 1
    assert rollout.status["stepStartedAt"] == policy.format_time(NOW)
    assert [(e.type, e.reason) for e in rollout.events] == [("Normal", conditions.STEP_RUNNING)]


def test_a_step_without_enough_figures_waits_instead_of_advancing():
    running = state(policy.PROGRESSING, 0, 10, started=NOW - timedelta(hours=1))
    rollout = decide(SPLIT, running, figures=[summary(concordant=20, discordant=0)])
    assert rollout.percent == 10
    assert rollout.progressing.reason == conditions.AWAITING_EVIDENCE


@pytest.mark.parametrize(
    ("ready", "figures", "why"),
    [
        (True, [summary(percent=25, concordant=50, discordant=50)], "pairs as the stable model does"),
        (True, [summary(percent=25, errors=20)], "calls, over maxErrorRatio"),
        (False, None, "is not Ready"),
    ],
    ids=["disagreement", "errors", "candidate-unready"],
)
def test_a_failing_gate_rolls_back_to_zero_with_one_warning(ready, figures, why):
    running = state(policy.PROGRESSING, 1, 25, started=NOW - timedelta(seconds=5))
    rollout = decide(SPLIT, running, ready=ready, figures=figures)
    assert rollout.percent == 0 and rollout.status["phase"] == policy.ROLLED_BACK
    assert (rollout.progressing.status, rollout.progressing.reason) == ("False", conditions.ROLLED_BACK)
    assert why in rollout.progressing.message and "from 25%" in rollout.progressing.message
    assert [(e.type, e.reason) for e in rollout.events] == [("Warning", conditions.ROLLED_BACK)]
    # the next look, from the status just written, stays rolled back and warns no more
    written = [{"type": conditions.CANARY_PROGRESSING, "reason": conditions.ROLLED_BACK,
                "message": rollout.progressing.message}]  # fmt: skip
    again = decide(SPLIT, rollout.status, ready=True, figures=[summary(percent=0)], previous_conditions=written)
    assert again.percent == 0 and again.events == () and again.progressing.message == rollout.progressing.message


def test_a_changed_rollout_starts_over_after_a_rollback():
    rolled_back = state(policy.ROLLED_BACK, 1, 0, revision="r0")
    rollout = decide(SPLIT, rolled_back)
    assert rollout.status["revision"] == REVISION and rollout.percent == 10


def test_the_last_step_completes_and_asks_for_promotion_in_git():
    last = state(policy.PROGRESSING, 3, 100, started=NOW - timedelta(seconds=INTERVAL))
    rollout = decide(SPLIT, last, figures=[summary(percent=100)])
    assert rollout.percent == 100 and rollout.status["phase"] == policy.COMPLETE
    assert (rollout.progressing.status, rollout.progressing.reason) == ("False", conditions.ROLLOUT_COMPLETE)
    assert "promote it in Git" in rollout.progressing.message
    # a gate failing even then rolls back
    later = decide(SPLIT, rollout.status, figures=[summary(percent=100, errors=40)])
    assert later.percent == 0 and later.progressing.reason == conditions.ROLLED_BACK


def test_a_fixed_percent_is_one_step():
    fixed = canary(mode="split", percent=30, minPairs=100, minRequests=20)
    assert policy.shares(fixed) == [30]
    started = decide(fixed, state(policy.AWAITING_CANDIDATE))
    assert started.percent == 30


def test_shadow_never_gives_the_candidate_a_share_and_warns_once_on_a_failing_gate():
    shadowing = decide(SHADOW, state(policy.AWAITING_CANDIDATE))
    assert shadowing.percent == 0 and shadowing.progressing.reason == conditions.SHADOWING
    failing = decide(
        SHADOW, shadowing.status, figures=[summary(percent=0, mode="shadow", concordant=50, discordant=50)]
    )
    assert failing.percent == 0
    assert (failing.progressing.status, failing.progressing.reason) == ("False", conditions.GATE_FAILED)
    assert [(e.type, e.reason) for e in failing.events] == [("Warning", conditions.GATE_FAILED)]
    written = [{"type": conditions.CANARY_PROGRESSING, "reason": conditions.GATE_FAILED}]
    again = decide(SHADOW, failing.status, figures=[summary(percent=0, mode="shadow", concordant=50, discordant=50)],
                   previous_conditions=written)  # fmt: skip
    assert again.events == ()
    recovered = decide(SHADOW, again.status, figures=[summary(percent=0, mode="shadow")], previous_conditions=written)
    assert recovered.progressing.reason == conditions.SHADOWING and "the gates hold" in recovered.progressing.message


def test_shadow_waits_for_the_candidate_without_rolling_anything_back():
    rollout = decide(SHADOW, state(policy.SHADOWING), ready=False)
    assert rollout.percent == 0 and rollout.events == ()
    assert rollout.progressing.reason == conditions.AWAITING_CANDIDATE
    assert (rollout.ready.status, rollout.ready.reason) == ("False", conditions.CANDIDATE_NOT_READY)


@pytest.mark.parametrize(("status", "expected"), [("True", True), ("False", False), ("Unknown", None), (None, None)])
def test_knatives_candidate_readiness_is_its_inference_services_ready(status, expected):
    conditions_found = [] if status is None else [{"type": "Ready", "status": status}]
    assert policy.candidate_isvc_ready({"status": {"conditions": conditions_found}}) is expected


def test_no_word_from_kserve_holds_the_share_instead_of_rolling_back():
    running = state(policy.PROGRESSING, 1, 25, started=NOW - timedelta(hours=1))
    rollout = decide(SPLIT, running, ready=None)
    assert rollout.percent == 25 and rollout.status["phase"] == policy.PROGRESSING and rollout.events == ()
    assert (rollout.progressing.status, rollout.progressing.reason) == ("Unknown", conditions.AWAITING_CANDIDATE)
