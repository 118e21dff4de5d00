"""The canary statistics (reward_gateway.rollout.agreement), each checked against a computation by hand, and their
export to Prometheus (reward_gateway.rollout.canary_metrics)."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from itertools import combinations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from reward_gateway.rollout import agreement
from reward_gateway.rollout.agreement import (
    DIRECT_MAX_ITEMS,
    CanaryWindow,
    PairCounts,
    RunningMoments,
    compare,
    group_pairs,
)
from reward_gateway.rollout.canary_metrics import PAIR_KINDS, CanaryMetrics

NAN = float("nan")

# One request, written out item by item: (group, stable score x, candidate score y).
FIXED = [
    ("a", 1.0, 0.5),
    ("a", 2.0, 0.1),
    ("a", 3.0, 0.9),
    ("a", 3.0, 0.7),
    ("a", 4.0, NAN),  # candidate's score invalid: left out
    (None, 12.0, -4.2),  # no group: in the score shift, in no pair
    ("b", 0.0, 2.0),
    ("b", -1.0, 2.0),
    ("b", 5.0, 3.0),
    ("b", 5.0, 3.0),
    ("b", None, 1.0),  # stable's score invalid: left out
    ("c", 7.0, 1.0),
    ("c", 7.0, 2.0),
]
GROUPS = [g for g, _, _ in FIXED]
STABLE = [x for _, x, _ in FIXED]
CANDIDATE = [y for _, _, y in FIXED]

# The pairs by hand (x order, y order -> kind):
#   a: (1,2) 1<2, .5>.1 discordant      (1,3) 1<3, .5<.9 concordant   (1,3') 1<3, .5<.7 concordant
#      (2,3) 2<3, .1<.9 concordant      (2,3') 2<3, .1<.7 concordant  (3,3') 3=3, .9>.7 stable-tied
#      -> C 4, D 1, stable-tied 1
#   b: (0,-1) 0>-1, 2=2 candidate-tied  (0,5) 0<5, 2<3 concordant     (0,5') concordant
#      (-1,5) concordant                (-1,5') concordant            (5,5') 5=5, 3=3 both tied
#      -> C 4, candidate-tied 1, both tied 1
#   c: (7,7') 7=7, 1<2 stable-tied -> stable-tied 1
# Pooled: C 8, D 1, candidate-tied 1, stable-tied 2, both tied 1: 13 pairs.
HAND_PAIRS = PairCounts(concordant=8, discordant=1, candidate_tied=1, stable_tied=2, both_tied=1)
# Agreement: the stable model orders C + D + candidate-tied = 10 pairs; the candidate
# orders 8 alike and ties 1 (half): (8 + 0.5) / 10.
HAND_AGREEMENT = 0.85
# tau-b by the textbook: n0 = 13 pairs, n1 = pairs tied in x = 2 + 1 = 3, n2 = pairs tied
# in y = 1 + 1 = 2; (C - D) / sqrt((n0 - n1)(n0 - n2)) = 7 / sqrt(10 * 11).
HAND_TAU_B = 7 / math.sqrt(110)
# Score shift over the 11 counted items (the two invalid ones out, the ungrouped one in):
#   x: 1 2 3 3 12 0 -1 5 5 7 7, sum 44, mean 4; squared deviations 9 4 1 1 64 16 25 1 1 9 9 = 140
#   y: .5 .1 .9 .7 -4.2 2 2 3 3 1 2, sum 11, mean 1; squared deviations .25 .81 .01 .09 27.04 1 1 4 4 0 1 = 39.2
#   y - x: -.5 -1.9 -2.1 -2.3 -16.2 2 3 -2 -2 -6 -5, mean -3;
#          squared deviations 6.25 1.21 .81 .49 174.24 25 36 1 1 9 4 = 259
HAND_MEAN = {"stable": 4.0, "candidate": 1.0}
HAND_STDDEV = {"stable": math.sqrt(140 / 11), "candidate": math.sqrt(39.2 / 11)}
HAND_DIFFERENCE = (-3.0, math.sqrt(259 / 11))


def test_the_fixed_request_by_hand():
    comparison = compare(STABLE, CANDIDATE, GROUPS)
    assert comparison.pairs == HAND_PAIRS
    assert comparison.pairs.agreement == pytest.approx(HAND_AGREEMENT)
    assert comparison.pairs.tau_b == pytest.approx(HAND_TAU_B)
    assert len(comparison.scores) == 11
    assert comparison.invalid == {"stable": 1, "candidate": 1}


def test_each_group_by_hand():
    # a: C 4, D 1, stable-tied 1: agreement 4/5; tau-b (4 - 1) / sqrt((6 - 1)(6 - 0)).
    a = group_pairs([(1.0, 0.5), (2.0, 0.1), (3.0, 0.9), (3.0, 0.7)])
    assert a == PairCounts(4, 1, 0, 1, 0)
    assert a.agreement == pytest.approx(0.8)
    assert a.tau_b == pytest.approx(3 / math.sqrt(30))
    # b: C 4, candidate-tied 1, both 1: agreement (4 + .5) / 5; tau-b 4 / sqrt((6 - 1)(6 - 2)).
    b = group_pairs([(0.0, 2.0), (-1.0, 2.0), (5.0, 3.0), (5.0, 3.0)])
    assert b == PairCounts(4, 0, 1, 0, 1)
    assert b.agreement == pytest.approx(0.9)
    assert b.tau_b == pytest.approx(4 / math.sqrt(20))
    # c: the stable model orders nothing: no agreement to speak of, tau-b undefined (n0 - n1 = 0).
    c = group_pairs([(7.0, 1.0), (7.0, 2.0)])
    assert c == PairCounts(0, 0, 0, 1, 0)
    assert (c.agreement, c.tau_b) == (None, None)


def test_the_streaming_window_on_the_fixed_request_by_hand():
    window = CanaryWindow(half_life_s=None)
    window.add(compare(STABLE, CANDIDATE, GROUPS))
    now = window.snapshot()
    assert now.pairs == HAND_PAIRS and now.items == 11
    assert (now.agreement, now.tau_b) == (pytest.approx(HAND_AGREEMENT), pytest.approx(HAND_TAU_B))
    assert now.mean == pytest.approx(HAND_MEAN)
    assert now.stddev == pytest.approx(HAND_STDDEV)
    assert (now.difference_mean, now.difference_stddev) == pytest.approx(HAND_DIFFERENCE)


def test_perfect_reversed_and_collapsed_candidates():
    stable = [0.1, 0.4, 0.2, 0.9]
    groups = ["g"] * 4
    same_order = compare(stable, [10 * s + 3 for s in stable], groups).pairs  # another scale, same order
    assert (same_order.agreement, same_order.tau_b) == (1.0, 1.0)
    reversed_order = compare(stable, [-s for s in stable], groups).pairs
    assert (reversed_order.agreement, reversed_order.tau_b) == (0.0, -1.0)
    # Every score equal: six candidate ties count half each: chance, not undefined or perfect.
    collapsed = compare(stable, [1.5] * 4, groups).pairs
    assert collapsed == PairCounts(0, 0, 6, 0, 0)
    assert collapsed.agreement == 0.5
    assert collapsed.tau_b is None  # n0 - n2 = 0


def test_ties_in_the_stable_model_are_left_out_of_agreement_but_not_of_tau_b():
    # x: 1 1 2; y: 1 2 3. (1,1') stable-tied; (1,2) and (1',2) concordant.
    pairs = group_pairs([(1.0, 1.0), (1.0, 2.0), (2.0, 3.0)])
    assert pairs == PairCounts(2, 0, 0, 1, 0)
    assert pairs.agreement == 1.0  # 2 of the 2 pairs the stable model orders
    assert pairs.tau_b == pytest.approx(2 / math.sqrt(2 * 3))  # n0 3, n1 1, n2 0


def test_all_ties():
    pairs = compare([2.0] * 5, [2.0] * 5, ["g"] * 5).pairs
    assert pairs == PairCounts(0, 0, 0, 0, 10)
    assert (pairs.agreement, pairs.tau_b) == (None, None)


def test_positive_and_negative_zero_tie():
    assert group_pairs([(0.0, 1.0), (-0.0, 2.0)]) == PairCounts(0, 0, 0, 1, 0)


def test_items_without_a_group_and_groups_of_one_form_no_pairs():
    stable, candidate = [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]  # every pair discordant, were they paired
    assert compare(stable, candidate).pairs == PairCounts()
    assert compare(stable, candidate, [None, None, None]).pairs == PairCounts()
    assert compare(stable, candidate, ["a", "b", "c"]).pairs == PairCounts()
    assert compare(stable, candidate, ["a", None, "a"]).pairs == PairCounts(0, 1, 0, 0, 0)
    # Still in the score shift.
    assert len(compare(stable, candidate).scores) == 3


def test_one_group_and_group_keys_of_any_hashable_kind():
    assert compare([1, 2, 3], [1, 3, 2], [7, 7, 7]).pairs == PairCounts(2, 1, 0, 0, 0)
    assert compare([1, 2, 3, 4], [1, 2, 4, 3], ["7", 7, "7", 7]).pairs == PairCounts(2, 0, 0, 0, 0)


def test_nothing_at_all():
    comparison = compare([], [], [])
    assert comparison.pairs == PairCounts() and comparison.scores == []
    window = CanaryWindow(half_life_s=None)
    window.add(comparison)
    now = window.snapshot()
    assert (now.agreement, now.tau_b, now.difference_mean, now.difference_stddev) == (None, None, None, None)
    assert now.mean == {"stable": None, "candidate": None} and now.error_ratio == {"stable": None, "candidate": None}


@pytest.mark.parametrize("bad", [None, NAN, float("inf"), -float("inf"), 10**400, True, "1.0", [1.0]])
def test_scores_that_are_not_finite_numbers_are_left_out_and_counted(bad):
    # Counted items: (1, 1) (2, 2) (.5, 1.5): 1<2, 1<2 concordant; 1>.5, 1<1.5 discordant;
    # 2>.5, 2>1.5 concordant. The bad item would add pairs, were it counted.
    comparison = compare([1.0, 2.0, bad, 0.5], [1.0, 2.0, 0.0, 1.5], ["g"] * 4)
    assert comparison.pairs == PairCounts(2, 1, 0, 0, 0)
    assert comparison.invalid == {"stable": 1, "candidate": 0}
    assert comparison.scores == [(1.0, 1.0), (2.0, 2.0), (0.5, 1.5)]
    both = compare([bad, 1.0], [bad, 2.0], ["g", "g"])
    assert both.invalid == {"stable": 1, "candidate": 1} and both.scores == [(1.0, 2.0)]


def test_lengths_must_match():
    with pytest.raises(ValueError, match="differ in length"):
        compare([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="differ in length"):
        compare([1.0, 2.0], [1.0, 2.0], ["g"])


def _textbook(items):
    """Kendall's definitions, pair by pair with signs, and tau-b from n0, n1, n2 by tie runs."""

    def sign(v):
        return (v > 0) - (v < 0)

    kinds = {"C": 0, "D": 0, "Tc": 0, "Ts": 0, "Tb": 0}
    for (xa, ya), (xb, yb) in combinations(items, 2):
        s, t = sign(xa - xb), sign(ya - yb)
        kinds["Tb" if s == t == 0 else "Ts" if s == 0 else "Tc" if t == 0 else "C" if s * t > 0 else "D"] += 1
    n = len(items)
    n0 = n * (n - 1) // 2
    n1 = sum(t * (t - 1) // 2 for t in Counter(x for x, _ in items).values())  # pairs tied in x
    n2 = sum(t * (t - 1) // 2 for t in Counter(y for _, y in items).values())  # pairs tied in y
    denominator = math.sqrt((n0 - n1) * (n0 - n2))
    tau_b = (kinds["C"] - kinds["D"]) / denominator if denominator else None
    return PairCounts(kinds["C"], kinds["D"], kinds["Tc"], kinds["Ts"], kinds["Tb"]), tau_b


@pytest.mark.parametrize("size", [0, 1, 2, 3, 8, DIRECT_MAX_ITEMS, DIRECT_MAX_ITEMS + 1, 64, 257])
def test_sorting_and_direct_counts_equal_the_textbook_on_generated_groups(size):
    rng = random.Random(size)
    for levels in (3, 10, 1000):  # few levels: many ties
        items = [(float(rng.randrange(levels)), float(rng.randrange(levels))) for _ in range(size)]
        expected, tau_b = _textbook(items)
        assert agreement._pairs_by_sorting(items) == expected
        assert agreement._pairs_directly(items) == expected
        assert group_pairs(items) == expected
        assert expected.tau_b == (None if tau_b is None else pytest.approx(tau_b))


def test_inversions_are_counted_strictly():
    assert agreement._inversions([3.0, 1.0, 2.0, 1.0]) == (4, [1.0, 1.0, 2.0, 3.0])  # 3>1, 3>2, 3>1, 2>1
    assert agreement._inversions([1.0, 1.0, 1.0]) == (0, [1.0, 1.0, 1.0])
    assert agreement._inversions([]) == (0, [])


def test_running_moments_equal_the_batch_formulas():
    rng = random.Random(13)
    values = [1e6 + rng.gauss(0, 1) for _ in range(10_000)]  # a large offset: sums of squares would lose it
    moments = RunningMoments()
    for value in values:
        moments.add(value)
    assert moments.weight == len(values)
    assert moments.mean == pytest.approx(statistics.fmean(values), rel=1e-12)
    assert moments.stddev == pytest.approx(statistics.pstdev(values), rel=1e-9)


def test_decayed_moments_equal_the_weighted_batch_formulas():
    rng = random.Random(7)
    moments, weights, values = RunningMoments(), [], []
    for _ in range(2_000):
        factor = rng.choice([1.0, 0.999, 0.9, 0.5])
        moments.decay(factor)
        weights = [w * factor for w in weights]
        value = rng.gauss(3, 2)
        moments.add(value)
        weights.append(1.0)
        values.append(value)
    total, mean, variance = _weighted_moments(weights, values)
    assert moments.weight == pytest.approx(total, rel=1e-12)
    assert moments.mean == pytest.approx(mean, rel=1e-9)
    assert moments.variance == pytest.approx(variance, rel=1e-9)


def test_moments_merged_a_request_at_a_time_equal_the_weighted_batch_formulas():
    rng = random.Random(11)
    moments, weights, values = RunningMoments(), [], []
    for _ in range(500):
        factor = rng.choice([1.0, 0.99, 0.7])
        moments.decay(factor)
        weights = [w * factor for w in weights]
        batch = [1e6 + rng.gauss(0, 1) for _ in range(rng.randrange(0, 9))]
        moments.add_many(batch)
        weights += [1.0] * len(batch)
        values += batch
    total, mean, variance = _weighted_moments(weights, values)
    assert moments.weight == pytest.approx(total, rel=1e-12)
    assert moments.mean == pytest.approx(mean, rel=1e-12)
    assert moments.variance == pytest.approx(variance, rel=1e-9)
    one_by_one = RunningMoments()
    for value in values[:50]:
        one_by_one.add(value)
    at_once = RunningMoments()
    at_once.add_many(values[:50])
    assert (at_once.weight, at_once.mean) == (one_by_one.weight, pytest.approx(one_by_one.mean, rel=1e-14))
    assert at_once.variance == pytest.approx(one_by_one.variance, rel=1e-9)


def test_empty_moments_are_undefined_and_one_value_has_no_spread():
    moments = RunningMoments()
    assert (moments.mean, moments.stddev) == (None, None)
    moments.add(2.5)
    assert (moments.mean, moments.stddev) == (2.5, 0.0)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_window_halves_every_half_life():
    clock = Clock()
    window = CanaryWindow(half_life_s=10, clock=clock)
    window.add(compare([1.0, 2.0], [1.0, 2.0], ["g", "g"]))  # one concordant pair, items (1, 1), (2, 2)
    clock.now += 10  # one half-life: what came before weighs 1/2
    window.add(compare([1.0, 2.0], [2.0, 1.0], ["g", "g"]))  # one discordant pair, items (1, 2), (2, 1)
    now = window.snapshot()
    assert now.pairs == PairCounts(0.5, 1, 0, 0, 0)
    assert now.agreement == pytest.approx(0.5 / 1.5)  # without decay it would be 1/2
    # Differences y - x: 0, 0 at weight 1/2; +1, -1 at weight 1: mean 0, variance (1 + 1) / 3.
    assert now.items == pytest.approx(3)
    assert now.difference_mean == pytest.approx(0)
    assert now.difference_stddev == pytest.approx(math.sqrt(2 / 3))
    clock.now += 20  # reading later decays the weights, not the ratios
    later = window.snapshot()
    assert later.items == pytest.approx(3 / 4)
    assert later.agreement == pytest.approx(now.agreement)


def test_the_windows_error_ratio_decays_too():
    clock = Clock()
    window = CanaryWindow(half_life_s=10, clock=clock)
    for _ in range(2):
        window.add_request("candidate", ok=False)
    clock.now += 10  # the two failures now weigh 1 together; two successes weigh 2
    for _ in range(2):
        window.add_request("candidate", ok=True)
    window.add_request("stable", ok=True)
    now = window.snapshot()
    assert now.error_ratio["candidate"] == pytest.approx(1 / 3)  # without decay: 2 / 4
    assert now.error_ratio["stable"] == 0


def test_the_windows_latency_and_answers_by_hand():
    clock = Clock()
    window = CanaryWindow(half_life_s=10, clock=clock)
    window.add_request("candidate", ok=True, seconds=0.1)
    window.add_request("candidate", ok=True, seconds=0.3)
    clock.now += 10  # both weigh 1/2 now
    window.add_request("candidate", ok=False, seconds=0.6)
    window.add_request("stable", ok=True)  # no time given: counted, no latency
    window.add_answer("stable")
    window.add_answer("candidate")
    clock.now += 10
    window.add_answer("stable")
    now = window.snapshot()
    # Latency weights 1/4, 1/4, 1/2: mean .025 + .075 + .3 = .4; variance
    # (.09 + .01) / 4 + .04 / 2 = .045.
    assert now.latency_mean["candidate"] == pytest.approx(0.4)
    assert now.latency_stddev["candidate"] == pytest.approx(math.sqrt(0.045))
    assert now.latency_mean["stable"] is None
    assert now.requests == pytest.approx({"stable": 0.5, "candidate": 1.0})
    assert now.errors == pytest.approx({"stable": 0, "candidate": 0.5})
    assert now.answers == pytest.approx({"stable": 1.5, "candidate": 0.5})


def test_the_window_equals_the_weighted_batch_formula_on_a_generated_stream():
    rng = random.Random(21)
    clock, half_life = Clock(), 30.0
    window = CanaryWindow(half_life_s=half_life, clock=clock)
    seen = []  # (time, x, y)
    for _ in range(300):
        clock.now += rng.expovariate(1 / 3)
        xs = [rng.gauss(0, 1) for _ in range(4)]
        ys = [x + rng.gauss(0.2, 0.5) for x in xs]
        window.add(compare(xs, ys, ["g"] * 4))
        seen += [(clock.now, x, y) for x, y in zip(xs, ys, strict=True)]
    now = window.snapshot()
    weights = [0.5 ** ((clock.now - t) / half_life) for t, _, _ in seen]
    total = math.fsum(weights)
    for role, index in (("stable", 1), ("candidate", 2)):
        mean = math.fsum(w * item[index] for w, item in zip(weights, seen, strict=True)) / total
        variance = math.fsum(w * (item[index] - mean) ** 2 for w, item in zip(weights, seen, strict=True)) / total
        assert now.mean[role] == pytest.approx(mean, rel=1e-9)
        assert now.stddev[role] == pytest.approx(math.sqrt(variance), rel=1e-9)
    assert now.items == pytest.approx(total, rel=1e-9)


def test_the_window_keeps_everything_without_a_half_life_and_refuses_a_bad_one():
    clock = Clock()
    window = CanaryWindow(half_life_s=None, clock=clock)
    window.add(compare([1.0, 2.0], [1.0, 2.0], ["g", "g"]))
    clock.now += 1e9
    window.add(compare([1.0, 2.0], [2.0, 1.0], ["g", "g"]))
    assert window.snapshot().pairs == PairCounts(1, 1, 0, 0, 0)
    for bad in (0, -1.0, NAN):
        with pytest.raises(ValueError, match="half_life_s"):
            CanaryWindow(half_life_s=bad)


def test_a_group_key_means_nothing_across_requests():
    window = CanaryWindow(half_life_s=None)
    window.add(compare([1.0], [2.0], ["g"]))
    window.add(compare([2.0], [1.0], ["g"]))
    assert window.snapshot().pairs == PairCounts()


def test_counters_and_window_gauges_in_prometheus():
    registry, clock = CollectorRegistry(), Clock()
    metrics = CanaryMetrics(registry, half_life_s=60, clock=clock)
    tracker = metrics.tracker("rm", "rm-v2")
    assert metrics.tracker("rm", "rm-v2") is tracker
    tracker.observe(STABLE, CANDIDATE, GROUPS)
    tracker.record_request("stable", ok=True, seconds=0.02)
    tracker.record_request("candidate", ok=True, seconds=0.03)
    tracker.record_request("candidate", ok=False, seconds=2.0)
    tracker.record_answer("stable")
    pair = {"model": "rm", "candidate": "rm-v2"}

    def value(name, **labels):
        return registry.get_sample_value(f"reward_gateway_canary_{name}", {**pair, **labels})

    assert [value(f"{kind}_pairs_total") for kind in PAIR_KINDS] == [8, 1, 1, 2, 1]
    assert value("items_total") == 11
    assert value("invalid_scores_total", role="stable") == value("invalid_scores_total", role="candidate") == 1
    assert value("requests_total", role="candidate", result="error") == 1
    assert value("requests_total", role="candidate", result="ok") == 1
    assert value("requests_total", role="stable", result="error") == 0
    assert value("request_duration_seconds_count", role="candidate") == 2
    assert value("answers_total", role="stable") == 1 and value("answers_total", role="candidate") == 0
    assert value("request_duration_seconds_sum", role="candidate") == pytest.approx(2.03)
    # The documented PromQL, on the counters: (C + Tc / 2) / (C + D + Tc).
    c, d, tc = value("concordant_pairs_total"), value("discordant_pairs_total"), value("candidate_tied_pairs_total")
    assert (c + tc / 2) / (c + d + tc) == pytest.approx(HAND_AGREEMENT)
    # The window's gauges, at scrape time.
    assert value("agreement_ratio") == pytest.approx(HAND_AGREEMENT)
    assert value("kendall_tau_b") == pytest.approx(HAND_TAU_B)
    assert value("window_pairs") == 10 and value("window_items") == 11
    assert value("score_mean", role="stable") == pytest.approx(4.0)
    assert value("score_stddev", role="candidate") == pytest.approx(HAND_STDDEV["candidate"])
    assert value("score_difference_mean") == pytest.approx(-3.0)
    assert value("score_difference_stddev") == pytest.approx(HAND_DIFFERENCE[1])
    assert value("error_ratio", role="candidate") == 0.5 and value("error_ratio", role="stable") == 0
    clock.now += 60  # a half-life later the counts halve, the ratios stay
    assert value("window_pairs") == pytest.approx(5)
    assert value("agreement_ratio") == pytest.approx(HAND_AGREEMENT)
    assert value("concordant_pairs_total") == 8  # counters never decay


def test_names_and_labels_follow_the_gateways_conventions():
    registry = CollectorRegistry()
    metrics = CanaryMetrics(registry)
    metrics.tracker("rm", "rm-v2").observe([1.0, 2.0], [1.0, 2.0], ["g", "g"])
    families = list(registry.collect())
    assert len(families) == 10 + 9  # counters and the histogram; the window's gauges
    for family in families:
        assert family.name.startswith("reward_gateway_canary_")
        for sample in family.samples:
            assert list(sample.labels)[:2] == ["model", "candidate"]
            assert set(sample.labels) <= {"model", "candidate", "role", "result", "le"}
    with pytest.raises(ValueError, match="Duplicated"):  # one set of families per registry
        CanaryMetrics(registry)


def test_undefined_figures_have_no_sample():
    registry = CollectorRegistry()
    CanaryMetrics(registry).tracker("rm", "rm-v2").observe([1.0, 1.0], [1.0, 2.0], ["g", "g"])  # stable ties
    text = generate_latest(registry).decode()
    assert "reward_gateway_canary_agreement_ratio{" not in text
    assert "reward_gateway_canary_kendall_tau_b{" not in text
    assert 'reward_gateway_canary_stable_tied_pairs_total{candidate="rm-v2",model="rm"} 1.0' in text
    assert 'reward_gateway_canary_window_pairs{candidate="rm-v2",model="rm"} 0.0' in text


def test_forget_removes_every_series_of_a_pair():
    registry = CollectorRegistry()
    metrics = CanaryMetrics(registry)
    metrics.tracker("rm", "rm-v2").observe(STABLE, CANDIDATE, GROUPS)
    metrics.tracker("rm", "rm-v3").record_request("candidate", ok=True, seconds=0.1)
    metrics.forget("rm", "rm-v2")
    metrics.forget("rm", "rm-v2")  # twice is harmless
    text = generate_latest(registry).decode()
    assert 'candidate="rm-v2"' not in text
    assert 'candidate="rm-v3"' in text


def _weighted_moments(weights: list[float], values: list[float]) -> tuple[float, float, float]:
    """The weighted batch formulas: total weight, mean and population variance."""
    total = math.fsum(weights)
    mean = math.fsum(w * v for w, v in zip(weights, values, strict=True)) / total
    variance = math.fsum(w * (v - mean) ** 2 for w, v in zip(weights, values, strict=True)) / total
    return total, mean, variance
