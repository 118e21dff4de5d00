"""An RLHFPipeline's policy: what its spec asks that the cluster lacks, its conditions (one per role), and
Ready from all of them.

Each InferenceService role (actor, reference, critic) is judged exactly as a
RewardModel's InferenceService is (policy/readiness.py: KServe's Ready, its
transformer's, and KServe's diagnosis of a failure). The reward models are the
user's own RewardModels, judged by their Ready; a name that matches none is a
clear False, and so is one whose gateway is off (the graph's reward steps call
it). The graph is KServe's word on its router.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..api import conditions
from ..api.naming import ACTOR, CRITIC, REFERENCE, role_isvc_name
from . import dependencies, names
from .readiness import awaiting_report, not_created, ready_from_inference_service
from .status import Condition

# Each role's condition.
ROLE_CONDITIONS = {
    ACTOR: conditions.ACTOR_READY,
    REFERENCE: conditions.REFERENCE_READY,
    CRITIC: conditions.CRITIC_READY,
}

# Ready's message names the role, in this order: the first failing (else waiting) one speaks.
ROLE_NAMES = {
    conditions.ACTOR_READY: "actor",
    conditions.REFERENCE_READY: "reference",
    conditions.CRITIC_READY: "critic",
    conditions.REWARDS_READY: "rewards",
    conditions.GRAPH_READY: "graph",
}


def roles(spec: Mapping[str, Any]) -> list[str]:
    """The roles the spec serves, in order: the actor and the reference always, the critic with spec.critic."""
    return [ACTOR, REFERENCE, *([CRITIC] if "critic" in spec else [])]


def invalid_spec(
    rlhf_pipeline: dict[str, Any],
    wanted: Mapping[str, dependencies.References],
    lookup: Callable[[dependencies.References], dependencies.Observed],
) -> str | None:
    """What the schema cannot see and KServe would trip on later: a host name over a DNS label (the
    namespace is not the schema's), or a runtime, Secret key or ServiceAccount a role names that the
    cluster lacks (the first gap, role by role). ``wanted``: what each role names, in role order;
    ``lookup``: the cluster's answer on one role's references, asked only until the first gap."""
    metadata = rlhf_pipeline["metadata"]
    for role in roles(rlhf_pipeline["spec"]):
        problem = names.host_label_problem(
            role_isvc_name(metadata["name"], role), metadata["namespace"], "Standard", True
        )
        if problem is not None:
            return problem
    for references in wanted.values():
        problem = dependencies.missing(metadata["namespace"], references, lookup(references))
        if problem is not None:
            return problem
    return None


def role_ready(condition_type: str, isvc: dict[str, Any] | None) -> Condition:
    """A role's condition from its InferenceService (None: not created yet)."""
    return replace(ready_from_inference_service(isvc, gateway_enabled=True), type=condition_type)


def _ready(reward_model: dict[str, Any]) -> dict[str, Any] | None:
    found = (reward_model.get("status") or {}).get("conditions") or []
    return next((c for c in found if c.get("type") == conditions.READY), None)


def unusable_rewards(namespace: str, found: dict[str, dict[str, Any] | None]) -> Condition | None:
    """RewardsReady False when a named RewardModel cannot be called at all (missing, or no gateway), in the
    order of spec.rewards; None when every one can. The graph waits for this (render's ``with_graph``)."""
    for index, (name, reward_model) in enumerate(found.items()):
        if reward_model is None:
            return Condition(
                conditions.REWARDS_READY,
                "False",
                conditions.REWARD_MODEL_NOT_FOUND,
                f"spec.rewards[{index}]: RewardModel {name} not found in namespace {namespace}; create it "
                "(or remove it from spec.rewards): the InferenceGraph is held until it exists",
            )
        if not ((reward_model.get("spec") or {}).get("gateway") or {}).get("enabled", True):
            return Condition(
                conditions.REWARDS_READY,
                "False",
                conditions.REWARD_MODEL_WITHOUT_GATEWAY,
                f"spec.rewards[{index}]: RewardModel {name} has gateway.enabled: false; the graph's reward step "
                "calls its gateway, so enable it (the InferenceGraph is held until then)",
            )
    return None


def rewards_ready(namespace: str, found: dict[str, dict[str, Any] | None]) -> Condition:
    """RewardsReady from the RewardModels spec.rewards names (name -> the stored object, or None), in order."""
    unusable = unusable_rewards(namespace, found)
    if unusable is not None:
        return unusable
    waiting = None
    for name, reward_model in found.items():
        assert reward_model is not None
        ready = _ready(reward_model) or {}
        if ready.get("status") == "True":
            continue
        status = "False" if ready.get("status") == "False" else "Unknown"
        detail = f"{ready.get('reason')}: {ready.get('message')}" if ready else "no status yet"
        condition = Condition(
            conditions.REWARDS_READY,
            status,
            conditions.REWARD_MODEL_NOT_READY,
            f"RewardModel {name} is not Ready ({detail})",
        )
        if status == "False":
            return condition
        waiting = waiting or condition
    if waiting is not None:
        return waiting
    return Condition(
        conditions.REWARDS_READY,
        "True",
        conditions.REWARD_MODELS_READY,
        f"RewardModels {', '.join(found)} are Ready",
    )


def graph_ready(graph: dict[str, Any] | None, held: bool) -> Condition:
    """GraphReady from KServe's report on the InferenceGraph; ``held``: not applied, its reward models wanting."""
    if held:
        return Condition(
            conditions.GRAPH_READY,
            "Unknown",
            conditions.AWAITING_REWARD_MODELS,
            "the InferenceGraph is created once every RewardModel in spec.rewards exists with its gateway",
        )
    if graph is None:
        return not_created(conditions.GRAPH_READY, "InferenceGraph")
    name = graph["metadata"]["name"]
    found = (graph.get("status") or {}).get("conditions") or []
    ready = next((c for c in found if c.get("type") == "Ready"), None)
    if ready is None:
        return awaiting_report(conditions.GRAPH_READY, "InferenceGraph", name)
    if ready.get("status") == "True":
        return Condition(conditions.GRAPH_READY, "True", conditions.GRAPH_SERVING, f"InferenceGraph {name} is Ready")
    status = "False" if ready.get("status") == "False" else "Unknown"
    return Condition(
        conditions.GRAPH_READY,
        status,
        ready.get("reason") or conditions.GRAPH_NOT_READY,
        ready.get("message") or f"InferenceGraph {name} is not Ready",
    )


# RewardsReady's reasons that only the user can clear (see pipeline_ready)
_USER_GAPS = frozenset({conditions.REWARD_MODEL_NOT_FOUND, conditions.REWARD_MODEL_WITHOUT_GATEWAY})


def pipeline_ready(roles: list[Condition] | tuple[Condition, ...]) -> Condition:
    """Ready: True when every role is; else a reference the user must fix (a RewardModel missing or
    without its gateway), else the first False role's reason (else the first Unknown one's), its message
    prefixed with the role, so KServe's diagnosis of a role reaches the pipeline's Ready. The user's gap
    comes first because it lasts until they act, while a role's False from KServe may be a passing state
    (an Ingress not created yet): Ready flapping between the two would post an event at every flip."""
    blocking = next((c for c in roles if c.status == "False" and c.reason in _USER_GAPS), None)
    failing = blocking or next((c for c in roles if c.status == "False"), None)
    waiting = failing or next((c for c in roles if c.status != "True"), None)
    if waiting is None:
        return Condition(conditions.READY, "True", conditions.ROLES_READY, "every role is Ready")
    role = ROLE_NAMES.get(waiting.type, waiting.type)
    return Condition(conditions.READY, waiting.status, waiting.reason, f"{role}: {waiting.message}")


def status_fields(url: str | None, graph: str | None, services: dict[str, str]) -> dict[str, Any]:
    """The status besides the conditions: the graph's in-cluster URL (once it is applied), its name, and
    the InferenceService of each role."""
    fields: dict[str, Any] = {"inferenceServices": dict(services)}
    if graph is not None:
        fields["inferenceGraph"] = graph
    if url is not None:
        fields["url"] = url
    return fields
