"""spec.gateway: the reward gateway the InferenceService runs as its transformer.

The gateway's own defaults the operator needs (for the Knative timeout rule and render's worst case) are
copied here from the gateway's config; a unit test (operator/tests/test_gateway_defaults.py) keeps
the copies equal to it, since the two programs never import each other.
"""

from __future__ import annotations

from ... import kserve
from ..common import DNS_SUBDOMAIN_PATTERN, array, defaulted_obj, integer, label_selector, obj, quantity, rule, string

# The gateway's own defaults (runtimes/gateway/README.md), for the Knative timeout rule.
# 150 s of waiting for vLLM, then 503 + Retry-After: under OpenRLHF's 180 s client
# timeout, so its retry sees the reason instead of a timeout of its own.
GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS = 150
GATEWAY_REQUEST_TIMEOUT_SECONDS = 180

# The gateway's metrics label at most this many clients, those with a weight first
# (reward_gateway.config.identity.MAX_CLIENT_LABELS): every client given a weight keeps its own series.
MAX_WEIGHTED_CLIENTS = 32
# A client's name as the gateway knows it: a bearer token's name (a word of the token file's
# `name token` line) or the X-Reward-Client header, which the gateway cuts at 128 characters.
CLIENT_NAME_MAX_LENGTH = 128
# Weights are relative; this range keeps the lightest client's share above a millionth of the heaviest's.
MIN_CLIENT_WEIGHT, MAX_CLIENT_WEIGHT = 0.001, 1000


def _weight(description: str, field: str) -> dict[str, object]:
    return {
        "type": "number",
        "format": "double",
        "minimum": MIN_CLIENT_WEIGHT,
        "maximum": MAX_CLIENT_WEIGHT,
        "description": description,
        # The API server checks an integer against minimum cut to an integer (0), so 0 would pass it alone.
        "x-kubernetes-validations": [
            rule(
                f"self >= {MIN_CLIENT_WEIGHT}",
                f"gateway.scheduling.{field} must be at least {MIN_CLIENT_WEIGHT}: a weight of 0 or less would "
                "give a client no share",
            )
        ],
    }


SCHEDULING = obj(
    "How the gateway schedules its calls to vLLM: concurrent requests coalesced into fewer vLLM calls, and the "
    "gateway's queue shared fairly between trainers (runtimes/gateway/README.md, Scheduling). Each field unset "
    "leaves the gateway's own default.",
    {
        "coalesce": {
            "type": "boolean",
            "description": "Merge concurrent calls of texts to the model into fewer vLLM calls (one per group or "
            "item otherwise), so single-sample trainers (OpenRLHF, slime, verl per sample) share vLLM's per-request "
            "cost and completions of one prompt share its prefix cache. Unset: the gateway's default, except that "
            "clients or defaultClientWeight turn it on (the queue is where the weights act).",
        },
        "maxWaitMilliseconds": integer(
            "The longest a call waits for others to merge with while a merged call is in flight (never while none "
            "is: an idle gateway sends at once). 0: merge only what arrives together.",
            minimum=0,
            maximum=1000,
        ),
        "maxItemsPerCall": integer(
            "Texts per merged vLLM call (a request's group larger than this goes alone, whole). Not gateway.maxItems, "
            "which bounds one request.",
            minimum=1,
            maximum=65536,
        ),
        "maxCallsInFlight": integer(
            "Merged vLLM calls in flight at once per gateway replica; the rest wait in the gateway's queue, where "
            "fair share orders them.",
            minimum=1,
            maximum=4096,
        ),
        "maxCallMilliseconds": integer(
            "The most of vLLM's time one merged call may take, at the pace the gateway measures on the calls "
            "vLLM answered before (the length of their texts over the time vLLM was busy with them). It bounds "
            "what vLLM has in hand from this gateway, so a light client's call waits behind at most "
            "maxCallsInFlight calls of this size, whatever a flooding client has queued. It holds while more "
            "than one client has called in the last 10 s (one trainer alone merges by count). Where vLLM answers "
            "maxItemsPerCall texts in less than this, "
            "maxItemsPerCall is the smaller bound. 0: merged calls bounded by maxItemsPerCall alone.",
            minimum=0,
            maximum=60000,
        ),
        "fairShare": {
            "type": "boolean",
            "description": "Order the gateway's queue by weighted fair share between clients (false: first come, "
            "first served). Unset: the gateway's default.",
        },
        "clients": array(
            "Weights of named clients in the fair share: under contention each busy client gets vLLM's capacity in "
            "proportion to its weight. A client is the name of its bearer token (a `name token` line in "
            "gateway.authSecretRef's file), else its X-Reward-Client header. Setting any turns coalescing on.",
            obj(
                "A client and its weight.",
                {
                    "name": string(
                        "The client's name: a bearer token's name, or the X-Reward-Client header's value.",
                        minLength=1,
                        maxLength=CLIENT_NAME_MAX_LENGTH,
                        pattern=r"^\S+$",
                    ),
                    "weight": _weight(
                        f"Its weight, relative to the others' ({MIN_CLIENT_WEIGHT} to {MAX_CLIENT_WEIGHT}).",
                        "clients[].weight",
                    ),
                },
                required=["name", "weight"],
            ),
            minItems=1,
            maxItems=MAX_WEIGHTED_CLIENTS,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
        "defaultClientWeight": _weight(
            "The weight of every client not named in clients (the gateway's default: 1). Setting it turns "
            "coalescing on.",
            "defaultClientWeight",
        ),
    },
    **{
        "x-kubernetes-validations": [
            rule(
                "!has(self.coalesce) || self.coalesce || (!has(self.maxWaitMilliseconds) "
                "&& !has(self.maxItemsPerCall) && !has(self.maxCallsInFlight) && !has(self.maxCallMilliseconds))",
                "gateway.scheduling.maxWaitMilliseconds, maxItemsPerCall, maxCallsInFlight and maxCallMilliseconds "
                "tune coalescing, "
                "which gateway.scheduling.coalesce: false turns off: remove them, or coalesce",
            ),
            rule(
                "!has(self.coalesce) || self.coalesce || (!has(self.clients) && !has(self.defaultClientWeight))",
                "gateway.scheduling.clients and defaultClientWeight weigh clients in the gateway's queue, which "
                "only coalescing has: they need gateway.scheduling.coalesce: true (or unset)",
            ),
            rule(
                "!has(self.fairShare) || self.fairShare || (!has(self.clients) && !has(self.defaultClientWeight))",
                "gateway.scheduling.clients and defaultClientWeight are fair-share weights: they need "
                "gateway.scheduling.fairShare: true (or unset)",
            ),
        ]
    },
)

GATEWAY = defaulted_obj(
    "The reward gateway, deployed as the InferenceService's transformer: trainers' wire formats "
    "(OpenRLHF /get_reward, verl /classify, /v1/rewards, KServe v1 predict), the model's chat template "
    "applied exactly once, and the right scalar per model kind.",
    {
        "enabled": {"type": "boolean", "description": "Deploy the gateway in front of vLLM.", "default": True},
        "chatTemplateMode": string(
            "Where the chat template is applied. upstream: vLLM applies the model's own template "
            "(one conversation per call). gateway: the gateway renders model.chatTemplate, so items "
            "of one group go to vLLM in one call and share its prefix cache.",
            enum=["upstream", "gateway"],
            default="upstream",
        ),
        "bosToken": string(
            "The BOS text model.chatTemplate writes as bos_token (e.g. <|begin_of_text|>) with "
            "chatTemplateMode: gateway. Unset: learnt from the served tokenizer through vLLM.",
            maxLength=64,
        ),
        "eosToken": string(
            "The EOS text model.chatTemplate writes as eos_token (e.g. </s>) with chatTemplateMode: "
            "gateway; needed when the template uses it.",
            maxLength=64,
        ),
        "stepTag": string("Step separator text for process reward models.", maxLength=64),
        "stepAggregate": string(
            "How a process reward model's step scores become one reward.",
            enum=["min", "last", "mean", "product"],
        ),
        "maxConcurrency": integer("vLLM calls in flight per gateway replica.", minimum=1, maximum=4096),
        "requestTimeoutSeconds": integer(
            "Timeout of one vLLM call. In Knative mode Knative's activator holds a call to a predictor at zero "
            "while it wakes, so a call may take scaleFromZeroTimeoutSeconds plus this.",
            minimum=1,
            maximum=3600,
        ),
        "scaleFromZeroTimeoutSeconds": integer(
            "How long a request waits for vLLM to come up (scale from zero) before a 503 (Standard mode; in "
            "Knative mode before the activator's 504, passed on as 502).",
            minimum=0,
            maximum=3600,
        ),
        "maxHeldRequests": integer(
            "Requests each gateway replica holds at once while vLLM is away (scaled to zero, starting); one "
            "more is answered 503 with Retry-After at once (default 1024).",
            minimum=1,
            maximum=1000000,
        ),
        "maxItems": integer("Items allowed in one request.", minimum=1, maximum=1000000),
        "truncatePromptTokens": integer(
            "Truncate inputs to this many tokens instead of answering 400 for over-long input.", minimum=1
        ),
        "authSecretRef": obj(
            "Secret key holding the bearer tokens trainers must send (one per line). Unset: no authentication.",
            {
                "name": string("Secret name.", maxLength=253, pattern=DNS_SUBDOMAIN_PATTERN),
                "key": string("Key within the Secret.", maxLength=253, default="token"),
            },
            required=["name"],
        ),
        "resources": obj(
            "Compute for each gateway replica.",
            {
                "cpu": quantity(
                    "CPU request and limit (default 1). The gateway is one process: past 1 CPU, more replicas"
                    " raise its throughput, more CPU does not."
                ),
                "memory": quantity("Memory request and limit, e.g. 1Gi."),
            },
        ),
        "allowedClients": array(
            "Who may reach the gateway, for trainers that cannot send a bearer token (OpenRLHF, verl). "
            "Set: the operator applies NetworkPolicies admitting only these peers to the gateway pods (and "
            "only the gateway to vLLM). Each entry is a NetworkPolicy peer: namespaceSelector alone admits "
            "every pod of the matching namespaces, podSelector alone the matching pods of this namespace, "
            "both the matching pods of the matching namespaces. Enforced only by a CNI that implements "
            "NetworkPolicy. In Knative mode Knative's activator and ingress (namespaces knative-serving and "
            "istio-system) are admitted too, and they forward any caller that reaches them. Unset: no policies.",
            obj(
                "A peer allowed to reach the gateway (a NetworkPolicyPeer without ipBlock).",
                {
                    "namespaceSelector": label_selector(
                        "Namespaces whose pods are admitted; {} selects every namespace."
                    ),
                    "podSelector": label_selector(
                        "Pods admitted (in the namespaces namespaceSelector selects, or else in this namespace)."
                    ),
                },
                **{
                    "x-kubernetes-validations": [
                        rule(
                            "has(self.namespaceSelector) || has(self.podSelector)",
                            "gateway.allowedClients[] needs namespaceSelector, podSelector or both: an entry "
                            "without either would name no clients",
                        )
                    ]
                },
            ),
            minItems=1,
            maxItems=32,
        ),
        "monitoringNamespaceSelector": label_selector(
            "Namespaces whose pods may scrape /metrics of the gateway and of vLLM (e.g. Prometheus's) when "
            "allowedClients is set; they reach the metrics ports only. Unset: scrapers must be listed in "
            "allowedClients."
        ),
        "scheduling": SCHEDULING,
    },
    **{
        "x-kubernetes-validations": [
            rule(
                "!has(self.allowedClients) || self.enabled",
                "gateway.allowedClients restricts who reaches the gateway, so it needs gateway.enabled: true",
            ),
            rule(
                "!has(self.scheduling) || self.enabled",
                "gateway.scheduling tunes how the gateway calls vLLM, so it needs gateway.enabled: true",
            ),
            rule(
                "!has(self.monitoringNamespaceSelector) || has(self.allowedClients)",
                "gateway.monitoringNamespaceSelector admits scrapers past the policies gateway.allowedClients "
                "makes: set allowedClients too",
            ),
        ]
    },
)

# Spec-level rules (self is spec): the gateway's chat template needs the model's.
CHAT_TEMPLATE_RULES = [
    rule(
        "self.gateway.chatTemplateMode != 'gateway' || has(self.model.chatTemplate)",
        "gateway.chatTemplateMode: gateway renders model.chatTemplate, so set model.chatTemplate "
        "(or use chatTemplateMode: upstream)",
    ),
    rule(
        "self.gateway.chatTemplateMode != 'gateway' || !has(self.model.chatTemplate) "
        "|| !self.model.chatTemplate.contains('eos_token') || has(self.gateway.eosToken)",
        "model.chatTemplate writes eos_token, which the gateway cannot learn from vLLM: set "
        "gateway.eosToken to the tokenizer's EOS text (e.g. </s>), or use chatTemplateMode: upstream",
    ),
]

# Spec-level: in Knative mode the gateway's worst case must fit Knative's revision timeout.
KNATIVE_TIMEOUT_RULE = rule(
    "self.serving.mode != 'Knative' || !self.gateway.enabled || "
    f"(has(self.gateway.scaleFromZeroTimeoutSeconds) ? self.gateway.scaleFromZeroTimeoutSeconds "
    f": {GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS}) + (has(self.gateway.requestTimeoutSeconds) "
    f"? self.gateway.requestTimeoutSeconds : {GATEWAY_REQUEST_TIMEOUT_SECONDS}) "
    f"<= {kserve.KNATIVE_MAX_TIMEOUT_SECONDS}",
    "gateway.scaleFromZeroTimeoutSeconds + gateway.requestTimeoutSeconds (defaults "
    f"{GATEWAY_SCALE_FROM_ZERO_TIMEOUT_SECONDS} and {GATEWAY_REQUEST_TIMEOUT_SECONDS}) must be at most "
    f"{kserve.KNATIVE_MAX_TIMEOUT_SECONDS} in Knative mode: the gateway's request timeout is at most "
    "Knative's revision timeout",
)
