"""The canary comparison in Prometheus: counters since start and the decayed window's gauges.

`CanaryTracker` is what the canary path (reward_gateway.rollout.canary) calls for one stable/candidate pair:
it feeds the statistics of reward_gateway.rollout.agreement (`compare`, `CanaryWindow`) and counts the same
request in the families below.

Prometheus (labels `model`: the stable model's name, as in `reward_gateway.signals.metrics`;
`candidate`: the candidate's name; `role`: `stable` or `candidate`):

- counters, since the process started: `reward_gateway_canary_concordant_pairs_total`,
  `..._discordant_pairs_total`, `..._candidate_tied_pairs_total`,
  `..._stable_tied_pairs_total`, `..._both_tied_pairs_total`, `..._items_total`,
  `..._invalid_scores_total{role}`, `..._requests_total{role,result}` (result `ok` or
  `error`), `..._answers_total{role}` and the histogram `..._request_duration_seconds{role}`. Agreement and tau-b
  are exported as counters of pairs, not as a ratio, because only counters add up:
  across gateway replicas (sum the rates by model and candidate, then divide),
  across restarts (rate handles resets), and over any window the query picks. A
  ratio gauge per pod could only be averaged, which weighs a replica with no traffic
  like a busy one. Agreement over the last hour:

      (sum by (model, candidate) (rate(reward_gateway_canary_concordant_pairs_total[1h]))
        + 0.5 * sum by (model, candidate) (rate(reward_gateway_canary_candidate_tied_pairs_total[1h])))
      / (sum by (model, candidate) (rate(reward_gateway_canary_concordant_pairs_total[1h]))
        + sum by (model, candidate) (rate(reward_gateway_canary_discordant_pairs_total[1h]))
        + sum by (model, candidate) (rate(reward_gateway_canary_candidate_tied_pairs_total[1h])))

- gauges of the decayed window, computed at scrape time, for readers without
  Prometheus (the operator asking the gateway directly): `..._agreement_ratio`,
  `..._kendall_tau_b`, `..._window_pairs` (the decayed weight of the pairs the stable
  model orders: how much the two figures rest on), `..._window_items`,
  `..._score_mean{role}`, `..._score_stddev{role}`, `..._score_difference_mean`,
  `..._score_difference_stddev` (y - x) and `..._error_ratio{role}`. An undefined
  figure has no sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from functools import partial

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from reward_gateway.rollout.agreement import DEFAULT_HALF_LIFE_S, ROLES, CanaryWindow, Comparison, compare
from reward_gateway.signals.metrics import LATENCY_BUCKETS

PAIR_KINDS = ("concordant", "discordant", "candidate_tied", "stable_tied", "both_tied")
PAIR_HELP = {
    "concordant": "Pairs of items in one group that the stable model and the candidate order the same way.",
    "discordant": "Pairs of items in one group that the stable model and the candidate order opposite ways.",
    "candidate_tied": "Pairs of items in one group that the stable model orders and the candidate scores equal.",
    "stable_tied": "Pairs of items in one group that the stable model scores equal and the candidate orders.",
    "both_tied": "Pairs of items in one group that both models score equal.",
}


class CanaryTracker:
    """What the shadow path calls for one stable/candidate pair: its counters bound once."""

    def __init__(self, metrics: CanaryMetrics, model: str, candidate: str, window: CanaryWindow):
        self.window = window
        labels = (model, candidate)
        self._pairs = [(kind, metrics.pairs[kind].labels(*labels)) for kind in PAIR_KINDS]
        self._items = metrics.items.labels(*labels)
        self._invalid = {role: metrics.invalid_scores.labels(*labels, role) for role in ROLES}
        self._requests = {
            (role, ok): metrics.requests.labels(*labels, role, "ok" if ok else "error")
            for role in ROLES
            for ok in (True, False)
        }
        self._durations = {role: metrics.duration.labels(*labels, role) for role in ROLES}
        self._answers = {role: metrics.answers.labels(*labels, role) for role in ROLES}

    def observe(
        self, stable: Sequence[object], candidate: Sequence[object], groups: Sequence[Hashable | None] | None = None
    ) -> Comparison:
        """Counts one request whose items both models scored."""
        comparison = compare(stable, candidate, groups)
        for kind, counter in self._pairs:
            count = getattr(comparison.pairs, kind)
            if count:
                counter.inc(count)
        if comparison.scores:
            self._items.inc(len(comparison.scores))
        for role, count in comparison.invalid.items():
            if count:
                self._invalid[role].inc(count)
        self.window.add(comparison)
        return comparison

    def record_request(self, role: str, ok: bool, seconds: float) -> None:
        """One model's answer to one request: whether it scored every item, and how long it took."""
        self._requests[role, ok].inc()
        self._durations[role].observe(seconds)
        self.window.add_request(role, ok, seconds)

    def record_answer(self, role: str) -> None:
        """The trainer got this model's scores for one request."""
        self._answers[role].inc()
        self.window.add_answer(role)


class CanaryMetrics:
    """The canary families on one registry, and a tracker per stable/candidate pair."""

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        half_life_s: float | None = DEFAULT_HALF_LIFE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.registry, self.half_life_s, self._clock = registry, half_life_s, clock
        counter = partial(Counter, registry=registry)
        pair = ["model", "candidate"]
        self.pairs = {
            kind: counter(f"reward_gateway_canary_{kind}_pairs", PAIR_HELP[kind], pair) for kind in PAIR_KINDS
        }
        self.items = counter("reward_gateway_canary_items", "Items both models scored with finite numbers.", pair)
        self.invalid_scores = counter(
            "reward_gateway_canary_invalid_scores",
            "Scores left out of the comparison as not finite numbers (None, NaN, infinite), by model.",
            [*pair, "role"],
        )
        self.requests = counter(
            "reward_gateway_canary_requests",
            "Requests each model was asked to score during a rollout, by result (ok, error).",
            [*pair, "role", "result"],
        )
        self.answers = counter(
            "reward_gateway_canary_answers",
            "Requests answered with each model's scores during a rollout (a split's share).",
            [*pair, "role"],
        )
        self.duration = Histogram(
            "reward_gateway_canary_request_duration_seconds",
            "Time each model took to score a request's items.",
            [*pair, "role"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.trackers: dict[tuple[str, str], CanaryTracker] = {}
        registry.register(_WindowCollector(self.trackers))

    def tracker(self, model: str, candidate: str) -> CanaryTracker:
        key = (model, candidate)
        if key not in self.trackers:
            self.trackers[key] = CanaryTracker(self, model, candidate, CanaryWindow(self.half_life_s, self._clock))
        return self.trackers[key]

    def forget(self, model: str, candidate: str) -> None:
        """Drops a pair's series once its candidate is gone, so none lingers at its last value."""
        if self.trackers.pop((model, candidate), None) is None:
            return
        for family in self.pairs.values():
            family.remove(model, candidate)
        self.items.remove(model, candidate)
        for role in ROLES:
            self.invalid_scores.remove(model, candidate, role)
            self.duration.remove(model, candidate, role)
            self.answers.remove(model, candidate, role)
            for result in ("ok", "error"):
                self.requests.remove(model, candidate, role, result)


class _WindowCollector:
    """Gauges of each pair's decayed window, computed at scrape time."""

    def __init__(self, trackers: dict[tuple[str, str], CanaryTracker]):
        self._trackers = trackers

    def describe(self) -> Iterator[Metric]:
        return iter(self._families().values())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        for (model, candidate), tracker in self._trackers.items():
            now = tracker.window.snapshot()
            pair = [model, candidate]
            _add(families["agreement_ratio"], pair, now.agreement)
            _add(families["kendall_tau_b"], pair, now.tau_b)
            _add(families["window_pairs"], pair, now.pairs.ordered_by_stable)
            _add(families["window_items"], pair, now.items)
            _add(families["score_difference_mean"], pair, now.difference_mean)
            _add(families["score_difference_stddev"], pair, now.difference_stddev)
            for role in ROLES:
                _add(families["score_mean"], [*pair, role], now.mean[role])
                _add(families["score_stddev"], [*pair, role], now.stddev[role])
                _add(families["error_ratio"], [*pair, role], now.error_ratio[role])
        return iter(families.values())

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        pair, role = ["model", "candidate"], ["model", "candidate", "role"]
        window = "in the decayed window"
        helps = {
            "agreement_ratio": (
                f"Share of the pairs the stable model orders that the candidate orders alike {window}"
                " (a candidate tie counts half).",
                pair,
            ),
            "kendall_tau_b": (f"Kendall's tau-b between the two models within groups, pooled, {window}.", pair),
            "window_pairs": (f"Decayed weight of the pairs the stable model orders {window}.", pair),
            "window_items": (f"Decayed weight of the items both models scored {window}.", pair),
            "score_mean": (f"Mean score of each model {window}.", role),
            "score_stddev": (f"Standard deviation of each model's scores {window}.", role),
            "score_difference_mean": (f"Mean of candidate minus stable score {window}.", pair),
            "score_difference_stddev": (f"Standard deviation of candidate minus stable score {window}.", pair),
            "error_ratio": (f"Share of requests each model failed to score {window}.", role),
        }
        return {
            name: GaugeMetricFamily(f"reward_gateway_canary_{name}", help_text, labels=labels)
            for name, (help_text, labels) in helps.items()
        }


def _add(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)
