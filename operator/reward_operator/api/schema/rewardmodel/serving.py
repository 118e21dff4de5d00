"""spec.serving: how KServe deploys and scales the predictor (Standard with its HPA or KEDA, or Knative).

Knative's bounds on its annotations are in ``api/kserve``; the spec-level rules here tie scaling to what
it needs elsewhere in the spec (a CPU request for the HPA, the gateway for KEDA).
"""

from __future__ import annotations

from ... import kserve
from ..common import defaulted_obj, integer, rule, string

DEPLOYMENT_MODES = ("Standard", "Knative")
# Go's duration syntax, as CEL's duration() reads it: 90s, 10m, 1h30m.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
# KEDA's ScaledObject cooldownPeriod default (and the HPA's own scale-down stabilization window): idle this
# long before the predictor goes to zero, or down a replica.
DEFAULT_SCALE_DOWN_DELAY = "5m"
WHOLE_SECONDS = "duration(self.{field}).getMilliseconds() % 1000 == 0"
# serving.* is scaled by KEDA on the gateway's load (render/scaler.py, api/keda.py): Standard mode at zero, or
# with a concurrency target. Spelled once for the rules below.
_KEDA = "(self.mode == 'Standard' && (self.minReplicas == 0 || has(self.targetConcurrency)))"

SERVING = defaulted_obj(
    "How KServe deploys and scales the reward model.",
    {
        "mode": string(
            "KServe deployment mode. Standard: a Deployment scaled by KServe's HPA on CPU, or by KEDA on the "
            "gateway's load (with minReplicas 0 or targetConcurrency), down to zero between training bursts "
            "with minReplicas 0 (the gateway holds the first requests and wakes it). Knative: revisions scaled "
            "by Knative on concurrency, down to zero between training bursts. Immutable once set.",
            enum=list(DEPLOYMENT_MODES),
            default="Standard",
        ),
        "minReplicas": integer(
            "Fewest replicas. 0 scales the predictor to zero when idle: in Knative mode through Knative's "
            "activator; in Standard mode through KEDA (it must be installed), fed by the reward gateway, which "
            "stays up, holds requests while the predictor is away and wakes it.",
            minimum=0,
            maximum=1000,
            default=1,
        ),
        "maxReplicas": integer("Most replicas.", minimum=1, maximum=1000, default=1),
        "targetConcurrency": integer(
            "In-flight requests per replica the autoscaler aims for. Knative mode: Knative's concurrency target. "
            "Standard mode: KEDA scales the predictor minReplicas..maxReplicas on the gateway's count of "
            "requests in flight and held (KEDA must be installed; no CPU request needed). Unset in Standard "
            "mode: KServe's HPA on CPU with minReplicas 1 or more, KEDA on 256 scored items in flight per "
            "replica with minReplicas 0.",
            minimum=1,
            maximum=100000,
        ),
        "scaleDownDelay": string(
            "How long the load must stay lower before the predictor scales down, to zero or by a replica. "
            "Standard mode with KEDA (minReplicas 0 or targetConcurrency): KEDA's cooldownPeriod before zero, "
            "and the HPA's scale-down stabilization window (at most 1h) between replicas; default "
            f"{DEFAULT_SCALE_DOWN_DELAY}. Knative mode: Knative's scale-down-delay (at most "
            f"{kserve.KNATIVE_SCALE_DOWN_DELAY_MAX}, whole seconds); default Knative's (none). "
            "A Go duration: 90s, 10m, 1h.",
            maxLength=32,
            pattern=DURATION_PATTERN,
        ),
        "initialScale": integer(
            "Replicas a new revision starts with before Knative scales it on load (Knative's initial-scale; "
            "Knative mode only), between minReplicas and maxReplicas. 0 starts the revision at zero, which "
            "Knative allows only where its config-autoscaler sets allow-zero-initial-scale: true (elsewhere "
            "KServe drops the setting and the revision starts at Knative's default, 1).",
            minimum=0,
            maximum=1000,
        ),
        "scalingWindow": string(
            "How far back Knative's autoscaler averages the load it scales on (Knative's stable window; "
            f"Knative mode only): {kserve.KNATIVE_WINDOW_MIN} to {kserve.KNATIVE_WINDOW_MAX} in whole seconds, "
            "Knative's default 60s. Longer rides out gaps between training steps; shorter follows bursts. "
            "A Go duration.",
            maxLength=32,
            pattern=DURATION_PATTERN,
        ),
        "timeoutSeconds": integer(
            "Request timeout at the predictor, in seconds (at most 600 in Knative mode, Knative's "
            "max-revision-timeout-seconds default). In Knative mode it also bounds a wake from zero: Knative's "
            "activator holds a request only this long while the predictor starts (default: as long as the "
            "gateway waits, gateway.scaleFromZeroTimeoutSeconds + gateway.requestTimeoutSeconds).",
            minimum=1,
            maximum=3600,
        ),
    },
    **{
        "x-kubernetes-validations": [
            rule(
                "self.minReplicas <= self.maxReplicas",
                "serving.maxReplicas must be at least serving.minReplicas",
            ),
            rule(
                "!has(self.targetConcurrency) || self.mode == 'Knative' || self.minReplicas == 0 "
                "|| self.minReplicas < self.maxReplicas",
                "serving.targetConcurrency in Standard mode scales the predictor between serving.minReplicas and "
                "serving.maxReplicas through KEDA: set serving.maxReplicas above serving.minReplicas (or remove "
                "targetConcurrency for a fixed number of replicas)",
            ),
            rule(
                "!has(self.scaleDownDelay) || self.mode == 'Knative' || " + _KEDA,
                "serving.scaleDownDelay needs an autoscaler that honours it: Knative mode, or in Standard mode "
                "KEDA (serving.minReplicas: 0 or serving.targetConcurrency); KServe's HPA on CPU keeps its own "
                "5m scale-down window",
            ),
            rule(
                "!has(self.scaleDownDelay) || self.mode == 'Knative' "
                "|| duration(self.scaleDownDelay) >= duration('1s')",
                "serving.scaleDownDelay must be at least 1s (KEDA's cooldownPeriod is in whole seconds)",
            ),
            rule(
                "self.mode != 'Knative' || !has(self.scaleDownDelay) "
                f"|| (duration(self.scaleDownDelay) <= duration('{kserve.KNATIVE_SCALE_DOWN_DELAY_MAX}') && "
                + WHOLE_SECONDS.format(field="scaleDownDelay")
                + ")",
                "serving.scaleDownDelay in Knative mode must be at most "
                f"{kserve.KNATIVE_SCALE_DOWN_DELAY_MAX} in whole seconds (Knative refuses its scale-down-delay "
                "otherwise)",
            ),
            rule(
                "!has(self.initialScale) || self.mode == 'Knative'",
                "serving.initialScale is Knative's initial-scale and needs serving.mode: Knative; in Standard "
                "mode the predictor starts at serving.minReplicas (set minReplicas: 0 to start at zero through KEDA)",
            ),
            rule(
                "!has(self.initialScale) || (self.initialScale >= self.minReplicas "
                "&& self.initialScale <= self.maxReplicas)",
                "serving.initialScale must be between serving.minReplicas and serving.maxReplicas: Knative never "
                "runs a revision outside them (for a revision that starts at zero, set minReplicas: 0 too)",
            ),
            rule(
                "!has(self.scalingWindow) || self.mode == 'Knative'",
                "serving.scalingWindow is Knative's stable window and needs serving.mode: Knative; in Standard "
                "mode use serving.scaleDownDelay (KEDA) to hold replicas through gaps in the load",
            ),
            rule(
                "!has(self.scalingWindow) || (duration(self.scalingWindow) >= duration('"
                + kserve.KNATIVE_WINDOW_MIN
                + "') && duration(self.scalingWindow) <= duration('"
                + kserve.KNATIVE_WINDOW_MAX
                + "') && "
                + WHOLE_SECONDS.format(field="scalingWindow")
                + ")",
                f"serving.scalingWindow must be {kserve.KNATIVE_WINDOW_MIN} to {kserve.KNATIVE_WINDOW_MAX} in whole "
                "seconds (Knative's bounds on its stable window)",
            ),
            rule(
                "self.mode != 'Knative' || !has(self.timeoutSeconds) || self.timeoutSeconds <= "
                + str(kserve.KNATIVE_MAX_TIMEOUT_SECONDS),
                "serving.timeoutSeconds: Knative refuses revision timeouts above "
                f"{kserve.KNATIVE_MAX_TIMEOUT_SECONDS}s (max-revision-timeout-seconds)",
            ),
            rule(
                "self.mode == oldSelf.mode",
                "serving.mode is immutable: create a new RewardModel to switch deployment modes",
            ),
        ]
    },
)

# Spec-level rules (self is spec): what each way of scaling needs elsewhere in the spec.
SPEC_RULES = [
    rule(
        "self.serving.mode != 'Standard' || self.serving.minReplicas == 0 "
        "|| has(self.serving.targetConcurrency) "
        "|| self.serving.minReplicas == self.serving.maxReplicas || has(self.resources.cpu)",
        "resources.cpu is needed when serving.maxReplicas is above serving.minReplicas in Standard "
        "mode: KServe's HPA scales on CPU use, which it cannot measure without a CPU request "
        "(or set serving.targetConcurrency, or serving.minReplicas: 0, to scale on the gateway's load "
        "through KEDA)",
    ),
    rule(
        "self.serving.mode != 'Standard' || self.serving.minReplicas > 0 || self.gateway.enabled",
        "serving.minReplicas: 0 in Standard mode needs gateway.enabled: true: the gateway holds the "
        "requests that arrive while the predictor is at zero and wakes it through KEDA (or use "
        "serving.mode: Knative, whose activator does both)",
    ),
    rule(
        "self.serving.mode != 'Standard' || !has(self.serving.targetConcurrency) || self.gateway.enabled",
        "serving.targetConcurrency in Standard mode needs gateway.enabled: true: KEDA scales the predictor "
        "on the gateway's count of requests in flight (without the gateway, leave targetConcurrency unset "
        "and set resources.cpu for KServe's HPA, or use serving.mode: Knative)",
    ),
]
