"""RewardModel's status: Ready and the other conditions, where to reach the model, the rollout, the cache."""

from __future__ import annotations

from ..common import Schema, integer, obj, status_schema, string


def _number(description: str) -> Schema:
    return {"type": "number", "format": "double", "description": description}


CANARY_STATUS = obj(
    "The rollout of spec.canary, as the operator drives it (absent without spec.canary).",
    {
        "candidate": string("The candidate's name in the gateway's metrics and GET /canary (label candidate)."),
        "revision": string(
            "A digest of what makes the rollout (the candidate, its compute, mode and shares): when it "
            "changes, the rollout starts over."
        ),
        "mode": string("shadow or split, as spec.canary.mode."),
        "phase": string(
            "AwaitingCandidate (its predictor is not Ready yet), Shadowing, Progressing (a step is running), "
            "Complete (the last step holds: promote in Git) or RolledBack (a gate failed: share 0 until the "
            "rollout changes or spec.canary.attempt is raised)."
        ),
        "step": integer("Index into spec.canary.steps of the share the gateway runs now (0 for a fixed percent)."),
        "percent": integer("The candidate's share of the requests the gateway runs now (0 in shadow)."),
        "stepStartedAt": string("When the current step (or shadowing) began.", format="date-time"),
        "agreement": _number(
            "Pooled over the gateway replicas running the current step: the share of the pairs the stable model "
            "orders that the candidate orders alike."
        ),
        "kendallTauB": _number("Kendall's tau-b of the two models' scores over the same pairs."),
        "pairs": _number("Decayed count of the pairs the stable model orders, behind agreement."),
        "errorRatio": _number("The candidate's share of failed calls, pooled over the same replicas."),
        "requests": _number("Decayed count of the candidate's calls, behind errorRatio."),
        "scoreShift": _number("Mean of (candidate score - stable score) over the compared items."),
        "gateways": integer("Gateway replicas whose figures are pooled here (those running the current step)."),
        "message": string("Why the rollout is where it is."),
    },
)


STATUS = status_schema(
    "Ready summarises the service; its reason and message say what is wrong.",
    {
        "url": string(
            "Where clients in the cluster reach the reward model: the InferenceService's in-cluster address "
            "(the gateway's Service when it is enabled)."
        ),
        "externalURL": string(
            "The InferenceService's external URL, from KServe's ingress settings (reachable only where an "
            "ingress serves that host)."
        ),
        "inferenceService": string("Name of the InferenceService serving this model."),
        "replicas": integer("Ready predictor replicas, in either mode."),
        "canary": CANARY_STATUS,
        "modelCache": obj(
            "The LocalModel cache spec.cache uses (absent without it): once it changes or goes, the "
            "operator releases the previous one.",
            {
                "kind": string("LocalModelNamespaceCache or LocalModelCache."),
                "name": string("The cache's name (one per model URI)."),
                "namespace": string("Its namespace; absent for a cluster-wide LocalModelCache."),
            },
        ),
    },
)
