"""The gateway's Prometheus metrics.

The names and labels are a contract with the Grafana dashboards and alert rules
in manifests/; change them only together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

UPSTREAM_ERROR_REASONS = ("timeout", "connect", "status_5xx", "status_4xx", "bad_response")

# Raw logits of reward heads mostly lie within a few units of zero; the tails
# matter for drift alerts, so the buckets reach +-20 and are finest near zero.
SCORE_BUCKETS = (-20, -10, -7.5, -5, -4, -3, -2, -1.5, -1, -0.5, -0.25, 0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 20)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180)
# A hold lasts from a retry (0.5 s) to a cold start: scheduling, image, weights, vLLM's load.
HOLD_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 150, 180, 300)
# A queued call waits a few ms while vLLM is busy (the merge's wait), seconds when a client floods.
QUEUE_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_ITEM_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# A judge that follows its format puts nearly all of its next token's probability on its labels; the
# buckets are finest near 1, where a judge drifting off its format first shows.
LABEL_SHARE_BUCKETS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.registry = registry
        counter, gauge = partial(Counter, registry=registry), partial(Gauge, registry=registry)
        histogram = partial(Histogram, registry=registry)
        self.requests = counter(
            "reward_gateway_requests_total",
            "HTTP requests answered, by route and status code.",
            ["model", "route", "code"],
        )
        self.items = counter(
            "reward_gateway_items_total",
            "Items answered with a reward (ok) or a failure (error), by route.",
            ["model", "route", "result"],
        )
        self.item_failures = counter(
            "reward_gateway_item_failures_total",
            "Items answered with a failure instead of a reward, by route and reason (reward_gateway.items.outcomes).",
            ["model", "route", "reason"],
        )
        self.duration = histogram(
            "reward_gateway_request_duration_seconds",
            "Time from a request's arrival to its answer.",
            ["model", "route"],
            buckets=LATENCY_BUCKETS,
        )
        self.upstream_errors = counter(
            "reward_gateway_upstream_errors_total", "Failed calls to vLLM, by reason.", ["model", "reason"]
        )
        self.scores = histogram(
            "reward_gateway_score", "Rewards returned, for drift alerts.", ["model"], buckets=SCORE_BUCKETS
        )
        # prometheus-client exports no _sum for a histogram whose buckets go below zero (a sum that can fall is
        # not a counter, and rate() would read each fall as a reset). The mean score is read from two sums that
        # only grow instead: (rate(positive) - rate(negative)) / rate(reward_gateway_score_count).
        self.score_positive_sum = counter(
            "reward_gateway_score_positive_sum",
            "Sum of the positive rewards returned (the mean's numerator).",
            ["model"],
        )
        self.score_negative_sum = counter(
            "reward_gateway_score_negative_sum",
            "Sum of the magnitudes of the negative rewards returned (subtracted in the mean's numerator).",
            ["model"],
        )
        self.inflight = gauge("reward_gateway_inflight_requests", "Requests being answered now.", ["model"])
        self.held = gauge(
            "reward_gateway_held_requests",
            "Requests held now for a predictor that is scaled to zero or starting.",
            ["model"],
        )
        self.hold_refused = counter(
            "reward_gateway_hold_refused_total",
            "Requests answered 503 at once because the gateway already held as many as it may.",
            ["model"],
        )
        self.hold_duration = histogram(
            "reward_gateway_hold_duration_seconds",
            "How long a held request waited for the predictor (answered or given up).",
            ["model"],
            buckets=HOLD_BUCKETS,
        )
        self.client_queue_items = gauge(
            "reward_gateway_client_queue_items",
            "Items queued in the gateway for vLLM now, by client (reward_gateway.scoring.coalesce).",
            ["model", "client"],
        )
        self.client_queue_wait = histogram(
            "reward_gateway_client_queue_wait_seconds",
            "How long a call waited in the gateway's queue before it went to vLLM, by client.",
            ["model", "client"],
            buckets=QUEUE_WAIT_BUCKETS,
        )
        self.batch_items = histogram(
            "reward_gateway_upstream_batch_items",
            "Texts per merged call to vLLM (reward_gateway.scoring.coalesce).",
            ["model"],
            buckets=BATCH_ITEM_BUCKETS,
        )

        self.judge_label_share = histogram(
            "reward_gateway_judge_label_share",
            "A judge's label probabilities: the share of its next token's probability its labels hold, per item.",
            ["model"],
            buckets=LABEL_SHARE_BUCKETS,
        )
        self.judge_verdicts = counter(
            "reward_gateway_judge_verdicts_total",
            "A judge's verdicts, by outcome: ok, or why none (cut_short, unparsed, out_of_range, "
            "no_label_probability).",
            ["model", "outcome"],
        )

    def score_recorder(self, model: str) -> ScoreRecorder:
        """Where one model's rewards are counted: its histogram and the two sums its mean is read from."""
        return ScoreRecorder(
            self.scores.labels(model), self.score_positive_sum.labels(model), self.score_negative_sum.labels(model)
        )


@dataclass(frozen=True)
class ScoreRecorder:
    histogram: Any
    positive_sum: Any
    negative_sum: Any

    def observe(self, reward: float) -> None:
        self.histogram.observe(reward)
        if not math.isfinite(reward):
            return  # in the histogram's count only: a sum with an inf or a nan in it would stay so for good
        if reward > 0:
            self.positive_sum.inc(reward)
        elif reward < 0:
            self.negative_sum.inc(-reward)
