"""How far a candidate reward model agrees with the stable one on the same items, in a canary rollout.

The shadow path scores a request's items with both models; `CanaryTracker.observe`
(reward_gateway.rollout.canary_metrics, which also exports these figures to Prometheus)
takes the two lists of scores and the items' group keys and keeps the figures
below. Everything here is pure Python and O(n log n) per group (groups of up to
`DIRECT_MAX_ITEMS` are compared pair by pair, which is faster there): it runs on
the gateway's one CPU, per request.

Definitions (x: the stable model's score of an item, y: the candidate's):

- **Items.** An item counts only when both scores are finite numbers. A None, NaN
  or infinite score (or a non-number) leaves the item out of every statistic and is
  counted per model in `reward_gateway_canary_invalid_scores_total`: one bad score
  must not turn a running mean into NaN for good, NaN has no order to compare, and
  refusing the request would hurt the trainer, who gets the stable scores anyway.
- **Pairs.** Two items form a pair when they carry the same group key (a GRPO group:
  completions of one prompt) in the same `observe` call; items without a group key
  (None) form no pairs, and a key means nothing across requests. Each pair is one of:
  concordant (x and y order it the same way strictly), discordant (strictly opposite
  ways), candidate-tied (x orders it, y ties), stable-tied (x ties, y orders it),
  both-tied. Ties are exact equality of the floats (a tolerance would make ties
  intransitive and rule out counting by sorting); duplicate completions in a group
  tie in both models, as they should.
- **Agreement** = (C + Tc/2) / (C + D + Tc), with C, D, Tc the concordant,
  discordant and candidate-tied pairs: over the pairs the stable model orders, the
  share the candidate orders the same way, a candidate tie counting half (a fair
  coin). Pairs the stable model ties are left out: it states no preference to agree
  with. A candidate tie counts half rather than being left out so that a collapsed
  candidate (every score equal: no signal for GRPO's advantages) scores 0.5,
  chance, instead of undefined or perfect on its few ordered pairs. This is Harrell's
  concordance index of y against the order of x, and equals (1 + Somers' d(y|x)) / 2;
  without ties it is (1 + tau) / 2. Undefined (None, no sample exported) when no
  pair is ordered by the stable model.
- **Rank correlation: Kendall's tau-b** = (C - D) / sqrt((C + D + Tc) (C + D + Ts)),
  Ts the stable-tied pairs (the textbook (n0 - n1)(n0 - n2) denominator, with n0 all
  pairs, n1 and n2 the pairs tied in x and in y). Kendall rather than Spearman because
  it is a function of the same pair counts as agreement: no second pass, and it pools
  exactly, both across groups and across requests, replicas and time windows, which
  Spearman's per-group ranks do not. tau-b rather than tau-a because groups have ties.
  Undefined when either factor of the denominator is 0.
- **Pooling.** Pair counts are summed over every group (and request) before any
  ratio, so every pair weighs the same; per-group ratios of groups of 4 to 16 items
  would be noisy, often undefined, and cannot be carried by counters.
- **Score shift.** Mean and standard deviation of x, of y and of the difference
  y - x over the counted items, grouped or not. Standard deviations are population
  ones (divided by the total weight): defined for a single item, and for weighted
  data without choosing a weighting convention; over a window of hundreds of items
  the difference from n - 1 is negligible.
- **Errors and latency.** The canary path (reward_gateway.rollout.canary) calls
  `CanaryTracker.record_request(role, ok, seconds)` once per model asked to score a
  request: `ok` False when that model failed to score it (any answer but scores, or
  given up on); the error ratio is errors / requests. `record_answer(role)` counts
  whose scores the trainer got: in a split, the share each model answers.
- **Window.** The gateway keeps, per stable/candidate pair, an exponentially decayed
  window: every count and every item's weight halves each `half_life_s` seconds
  (default 600), so the figures describe the last several minutes of a rollout step
  without storing a score. Moments use Welford's update with weights (West, 1979),
  a request's items merged at once by Chan's pairwise formula (both stable where
  running sums of squares lose a large mean's digits); decay multiplies the
  weights, which leaves the mean and variance of the existing data unchanged.
  `half_life_s=None` keeps everything since start.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

ROLES = ("stable", "candidate")
DEFAULT_HALF_LIFE_S = 600.0

# Up to this many items a group is compared pair by pair: CPython runs the plain
# double loop faster than sorting and merging up to about 50 items (measured: 8 us
# against 73 us for 8 items, 271 against 407 for 48, 452 against 321 for 64), and
# GRPO's groups are mostly 4 to 16 completions.
DIRECT_MAX_ITEMS = 48


@dataclass(frozen=True, slots=True)
class PairCounts:
    """Pairs by how the two models order them; floats once decayed."""

    concordant: float = 0
    discordant: float = 0
    candidate_tied: float = 0  # the stable model orders the pair, the candidate ties it
    stable_tied: float = 0  # the stable model ties the pair, the candidate orders it
    both_tied: float = 0

    def __add__(self, other: PairCounts) -> PairCounts:
        return PairCounts(
            self.concordant + other.concordant,
            self.discordant + other.discordant,
            self.candidate_tied + other.candidate_tied,
            self.stable_tied + other.stable_tied,
            self.both_tied + other.both_tied,
        )

    def scaled(self, factor: float) -> PairCounts:
        return PairCounts(
            self.concordant * factor,
            self.discordant * factor,
            self.candidate_tied * factor,
            self.stable_tied * factor,
            self.both_tied * factor,
        )

    @property
    def ordered_by_stable(self) -> float:
        return self.concordant + self.discordant + self.candidate_tied

    @property
    def agreement(self) -> float | None:
        ordered = self.ordered_by_stable
        return (self.concordant + self.candidate_tied / 2) / ordered if ordered else None

    @property
    def tau_b(self) -> float | None:
        untied = self.concordant + self.discordant
        denominator = math.sqrt((untied + self.candidate_tied) * (untied + self.stable_tied))
        return (self.concordant - self.discordant) / denominator if denominator else None


NO_PAIRS = PairCounts()


@dataclass(frozen=True, slots=True)
class Comparison:
    """One request's items compared: its pairs, and the items both models scored."""

    pairs: PairCounts
    scores: list[tuple[float, float]]  # (stable, candidate) of every counted item, grouped or not
    invalid: dict[str, int]  # role -> scores left out as not finite numbers


def _finite(score: object) -> bool:
    if isinstance(score, bool) or not isinstance(score, int | float):
        return False
    try:
        return math.isfinite(score)
    except OverflowError:  # an int past float's range
        return False


def compare(
    stable: Sequence[object], candidate: Sequence[object], groups: Sequence[Hashable | None] | None = None
) -> Comparison:
    """Compares one request's scores; `groups[i]` is item i's group key (None: no group)."""
    if len(stable) != len(candidate) or (groups is not None and len(groups) != len(stable)):
        raise ValueError(
            f"scores and groups differ in length: {len(stable)} stable, {len(candidate)} candidate, "
            f"{'no' if groups is None else len(groups)} group keys"
        )
    invalid = dict.fromkeys(ROLES, 0)
    scores: list[tuple[float, float]] = []
    by_group: dict[Hashable, list[tuple[float, float]]] = {}
    for index, (x, y) in enumerate(zip(stable, candidate, strict=True)):
        # The common case first: two finite floats (x - x is 0 unless x is infinite or NaN).
        if not (type(x) is float and type(y) is float and x - x == 0 and y - y == 0):
            x_ok, y_ok = _finite(x), _finite(y)
            if not (x_ok and y_ok):
                invalid["stable"] += not x_ok
                invalid["candidate"] += not y_ok
                continue
        item = (float(x), float(y))  # both checked finite numbers above
        scores.append(item)
        key = None if groups is None else groups[index]
        if key is not None:
            by_group.setdefault(key, []).append(item)
    pairs = NO_PAIRS
    for members in by_group.values():
        if len(members) > 1:
            pairs += group_pairs(members)
    return Comparison(pairs, scores, invalid)


def group_pairs(items: list[tuple[float, float]]) -> PairCounts:
    """The pairs of one group of (stable, candidate) scores, all finite."""
    if len(items) <= DIRECT_MAX_ITEMS:
        return _pairs_directly(items)
    return _pairs_by_sorting(items)


def _pairs_directly(items: list[tuple[float, float]]) -> PairCounts:
    """Every pair looked at once: O(n^2), the definition itself."""
    concordant = discordant = candidate_tied = stable_tied = both_tied = 0
    for a, (xa, ya) in enumerate(items):
        for xb, yb in items[a + 1 :]:
            if xa == xb:
                if ya == yb:
                    both_tied += 1
                else:
                    stable_tied += 1
            elif ya == yb:
                candidate_tied += 1
            elif (xa < xb) == (ya < yb):
                concordant += 1
            else:
                discordant += 1
    return PairCounts(concordant, discordant, candidate_tied, stable_tied, both_tied)


def _pairs_by_sorting(items: list[tuple[float, float]]) -> PairCounts:
    """Knight's O(n log n) count (1966): sort by (x, y); then the pairs in which y
    falls while x rises are exactly the inversions a merge sort of y counts, and ties
    are runs of equal values in the sorted sequences."""
    n = len(items)
    ordered = sorted(items)
    tied_x = _tied_pairs(x for x, _ in ordered)
    tied_xy = _tied_pairs(ordered)
    discordant, ys = _inversions([y for _, y in ordered])
    tied_y = _tied_pairs(ys)
    concordant = n * (n - 1) // 2 - tied_x - tied_y + tied_xy - discordant
    return PairCounts(concordant, discordant, tied_y - tied_xy, tied_x - tied_xy, tied_xy)


def _tied_pairs(values: Iterable[object]) -> int:
    """Pairs of equal values in a sorted sequence: t (t - 1) / 2 for each run of t."""
    total = 0
    for _, run in groupby(values):
        t = sum(1 for _ in run)
        total += t * (t - 1) // 2
    return total


def _inversions(values: list[float]) -> tuple[int, list[float]]:
    """Pairs i < j with values[i] > values[j] (equal values are no inversion), and the
    values sorted: a bottom-up merge sort that counts what each merge jumps over."""
    n, count, width = len(values), 0, 1
    source, target = values, [0.0] * n
    while width < n:
        for low in range(0, n, 2 * width):
            middle, high = min(low + width, n), min(low + 2 * width, n)
            i, j, k = low, middle, low
            while i < middle and j < high:
                if source[j] < source[i]:  # strictly: an equal right value stays behind
                    target[k] = source[j]
                    j += 1
                    count += middle - i  # it passes every left value still waiting
                else:
                    target[k] = source[i]
                    i += 1
                k += 1
            target[k:high] = source[i:middle] + source[j:high]  # one of the two is empty
        source, target = target, source
        width *= 2
    return count, source


class RunningMoments:
    """Mean and standard deviation of a stream without storing it: Welford's update
    with weights (West, 1979), numerically stable where sums of squares are not.
    `decay` multiplies every weight so far, so older values count less."""

    __slots__ = ("_m2", "_mean", "weight")

    def __init__(self) -> None:
        self.weight = 0.0
        self._mean = 0.0
        self._m2 = 0.0  # sum of weight * (value - mean)^2

    def add(self, value: float, weight: float = 1.0) -> None:
        self.weight += weight
        delta = value - self._mean
        self._mean += delta * weight / self.weight
        self._m2 += weight * delta * (value - self._mean)

    def add_many(self, values: list[float]) -> None:
        """Adds values of weight 1 at once: their own mean and squared deviations, then
        Chan's merge of the two sets (as stable as Welford's, and one Python call per
        request instead of one per item)."""
        count = len(values)
        if not count:
            return
        mean = sum(values) / count
        m2 = sum((value - mean) ** 2 for value in values)
        delta = mean - self._mean
        total = self.weight + count
        self._mean += delta * count / total
        self._m2 += m2 + delta * delta * self.weight * count / total
        self.weight = total

    def decay(self, factor: float) -> None:
        # Mean and variance of what is kept are unchanged: only its weight shrinks.
        self.weight *= factor
        self._m2 *= factor

    @property
    def mean(self) -> float | None:
        return self._mean if self.weight > 0 else None

    @property
    def variance(self) -> float | None:
        return max(self._m2, 0.0) / self.weight if self.weight > 0 else None

    @property
    def stddev(self) -> float | None:
        variance = self.variance
        return None if variance is None else math.sqrt(variance)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The window's figures now; None where undefined."""

    pairs: PairCounts
    items: float
    agreement: float | None
    tau_b: float | None
    mean: dict[str, float | None]  # role -> mean score
    stddev: dict[str, float | None]
    difference_mean: float | None  # of candidate - stable
    difference_stddev: float | None
    error_ratio: dict[str, float | None]  # role -> errors / requests
    requests: dict[str, float]  # role -> decayed requests the model was asked to score
    errors: dict[str, float]
    answers: dict[str, float]  # role -> decayed requests answered with the model's scores
    latency_mean: dict[str, float | None]  # role -> seconds
    latency_stddev: dict[str, float | None]


class CanaryWindow:
    """One stable/candidate pair's exponentially decayed figures (half_life_s=None: no decay)."""

    def __init__(self, half_life_s: float | None = DEFAULT_HALF_LIFE_S, clock: Callable[[], float] = time.monotonic):
        if half_life_s is not None and not half_life_s > 0:
            raise ValueError(f"half_life_s must be positive or None, not {half_life_s!r}")
        self.half_life_s, self._clock = half_life_s, clock
        self._at = clock()
        self.pairs = NO_PAIRS
        self.moments = {"stable": RunningMoments(), "candidate": RunningMoments(), "difference": RunningMoments()}
        self.requests = dict.fromkeys(ROLES, 0.0)
        self.errors = dict.fromkeys(ROLES, 0.0)
        self.answers = dict.fromkeys(ROLES, 0.0)
        self.latency = {role: RunningMoments() for role in ROLES}

    def _advance(self) -> None:
        """Decays everything to now, once per update, not per item."""
        now = self._clock()
        if self.half_life_s is None or now <= self._at:
            return
        factor = 0.5 ** ((now - self._at) / self.half_life_s)
        self._at = now
        self.pairs = self.pairs.scaled(factor)
        for moments in (*self.moments.values(), *self.latency.values()):
            moments.decay(factor)
        for counts in (self.requests, self.errors, self.answers):
            for role in counts:
                counts[role] *= factor

    def add(self, comparison: Comparison) -> None:
        self._advance()
        self.pairs += comparison.pairs
        scores = comparison.scores
        if scores:
            self.moments["stable"].add_many([x for x, _ in scores])
            self.moments["candidate"].add_many([y for _, y in scores])
            self.moments["difference"].add_many([y - x for x, y in scores])

    def add_request(self, role: str, ok: bool, seconds: float | None = None) -> None:
        self._advance()
        self.requests[role] += 1
        if not ok:
            self.errors[role] += 1
        if seconds is not None:
            self.latency[role].add(seconds)

    def add_answer(self, role: str) -> None:
        self._advance()
        self.answers[role] += 1

    def snapshot(self) -> Snapshot:
        self._advance()
        m = self.moments
        return Snapshot(
            pairs=self.pairs,
            items=m["difference"].weight,
            agreement=self.pairs.agreement,
            tau_b=self.pairs.tau_b,
            mean={role: m[role].mean for role in ROLES},
            stddev={role: m[role].stddev for role in ROLES},
            difference_mean=m["difference"].mean,
            difference_stddev=m["difference"].stddev,
            error_ratio={
                role: self.errors[role] / self.requests[role] if self.requests[role] else None for role in ROLES
            },
            requests=dict(self.requests),
            errors=dict(self.errors),
            answers=dict(self.answers),
            latency_mean={role: self.latency[role].mean for role in ROLES},
            latency_stddev={role: self.latency[role].stddev for role in ROLES},
        )
