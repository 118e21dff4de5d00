"""The RLHFPipeline controller: one reconcile in the RewardModel's five stages (ARCHITECTURE.md has them
as a table).

1. **observe** (:func:`first_gap`, :func:`observe`): what each role names, looked up (a runtime,
   Secret keys, a ServiceAccount; what two roles name alike, once), and the RewardModels the
   pipeline names, as stored;
2. **decide** (:func:`reward_operator.policy.pipeline.unusable_rewards`): the graph is held
   while a RewardModel it calls is missing or has no gateway (its steps call the gateways);
3. **render** (:func:`reward_operator.render.rendered_rlhf_pipeline`): the roles'
   InferenceServices and, unless held, the graph, with the sets of children it owns;
4. **apply** (:func:`apply_children`): every child in order (server-side apply leaves an
   unchanged object unwritten), then the pruning (the critic's InferenceService once
   spec.critic goes); a held graph is left as it was;
5. **report** (:func:`report`): a condition per role, RewardsReady, GraphReady and Ready.

Every trigger (create, update, resume, a change to one of its InferenceServices or its
InferenceGraph, a change to a RewardModel it names, the re-check and drift timers) runs
the same idempotent reconcile; a child's event that changes nothing a reconcile reads
(the watch's echo of our own apply, most often) runs none (controllers/seen.py). A
RewardModel's own lifecycle is its controller's: the pipeline only reads them.
"""

from __future__ import annotations

from typing import Any

from ..api import conditions
from ..api.naming import ACTOR, CRITIC, REFERENCE, role_isvc_name
from ..cluster import Cluster, Logger
from ..policy import dependencies
from ..policy import pipeline as pipeline_policy
from ..policy.status import not_ready
from ..render import Rendered, rendered_rlhf_pipeline
from ..render.inferencegraph import graph_url
from ..render.rlhfpipeline import reference_role, role_runtime
from ..settings import Settings
from .apply import Rejected, apply, prune
from .runner import Outcome
from .seen import SeenChildren

# ---- 1. observe ----------------------------------------------------------------------------------


def first_gap(rlhf_pipeline: dict[str, Any], cluster: Cluster) -> str | None:
    """:func:`reward_operator.policy.pipeline.invalid_spec` on what each role names, as the cluster has it.
    The reference takes the actor's runtime and credentials unless it names its own: what two roles name
    alike is looked up once."""
    spec, namespace = rlhf_pipeline["spec"], rlhf_pipeline["metadata"]["namespace"]
    role_specs = {ACTOR: spec["actor"], REFERENCE: reference_role(rlhf_pipeline)}  # type: ignore[arg-type]
    if "critic" in spec:
        role_specs[CRITIC] = spec["critic"]
    wanted = {
        role: dependencies.role_references(f"spec.{role}", role_spec, role_runtime(role, role_spec))
        for role, role_spec in role_specs.items()
    }
    found: dict[tuple[str, frozenset[str], str | None], dependencies.Observed] = {}

    def lookup(references: dependencies.References) -> dependencies.Observed:
        key = (references.runtime, frozenset(references.secret_names), references.service_account)
        if key not in found:
            found[key] = cluster.lookup(namespace, references)
        return found[key]

    return pipeline_policy.invalid_spec(rlhf_pipeline, wanted, lookup)


def observe(rlhf_pipeline: dict[str, Any], cluster: Cluster) -> dict[str, dict[str, Any] | None]:
    """The RewardModels spec.rewards names, as stored (None: not found), in its order."""
    namespace = rlhf_pipeline["metadata"]["namespace"]
    return cluster.reward_models(namespace, [reward["name"] for reward in rlhf_pipeline["spec"]["rewards"]])


# ---- 4. apply ----------------------------------------------------------------------------------------


def apply_children(
    rlhf_pipeline: dict[str, Any], rendered: Rendered, cluster: Cluster, logger: Logger
) -> dict[str, dict[str, Any]]:
    """Each child in order, as stored after its apply, by name; then the pruning. Raises :class:`Rejected`."""
    applied = {child["metadata"]["name"]: apply(child, cluster) for child in rendered.children}
    prune(rlhf_pipeline, rendered, cluster, logger)
    return applied


# ---- 5. report -----------------------------------------------------------------------------------------


def report(
    rlhf_pipeline: dict[str, Any],
    found: dict[str, dict[str, Any] | None],
    held: bool,
    applied: dict[str, dict[str, Any]],
) -> Outcome:
    """Each role's condition from KServe's report on its InferenceService as applied, RewardsReady from the
    RewardModels as found, GraphReady (held, or KServe's report on it), and Ready from all of them."""
    metadata, spec = rlhf_pipeline["metadata"], rlhf_pipeline["spec"]
    namespace, name = metadata["namespace"], metadata["name"]
    roles = pipeline_policy.roles(spec)
    found_conditions = [
        pipeline_policy.role_ready(pipeline_policy.ROLE_CONDITIONS[role], applied.get(role_isvc_name(name, role)))
        for role in roles
    ]
    found_conditions.append(pipeline_policy.rewards_ready(namespace, found))
    found_conditions.append(pipeline_policy.graph_ready(None if held else applied.get(name), held))
    ready = pipeline_policy.pipeline_ready(found_conditions)
    services = {role: role_isvc_name(name, role) for role in roles}
    fields = pipeline_policy.status_fields(
        None if held else graph_url(name, namespace), None if held else name, services
    )
    if held:
        fields = {**_kept_fields(rlhf_pipeline), **fields}  # a graph applied before still serves there
    return Outcome(
        ready,
        fields,
        "ready" if ready.status == "True" else "progressing",
        conditions=tuple(found_conditions),
        removed_conditions=() if "critic" in spec else (conditions.CRITIC_READY,),
    )


# ---- the reconcile ----------------------------------------------------------------------------------------


def sync(
    rlhf_pipeline: dict[str, Any],
    settings: Settings,
    logger: Logger,
    seen: SeenChildren | None = None,
    *,
    cluster: Cluster,
) -> Outcome:
    """``seen``: where each child this reconcile applies is recorded as acted on, so the watch's echo of
    that apply costs no reconcile of its own."""
    problem = first_gap(rlhf_pipeline, cluster)
    if problem is not None:
        # the children stay as they were: nothing already serving is lost
        return Outcome(
            not_ready(conditions.INVALID_SPEC, problem), _kept_fields(rlhf_pipeline), "invalid", scope="none"
        )
    found = observe(rlhf_pipeline, cluster)
    held = pipeline_policy.unusable_rewards(rlhf_pipeline["metadata"]["namespace"], found) is not None
    rendered = rendered_rlhf_pipeline(
        rlhf_pipeline, settings.gateway_image, with_graph=not held, pull_secrets=settings.image_pull_secrets
    )
    try:
        applied = apply_children(rlhf_pipeline, rendered, cluster, logger)
    except Rejected as rejected:
        return Outcome(not_ready(conditions.APPLY_FAILED, str(rejected)), _kept_fields(rlhf_pipeline), "apply_failed")
    if seen is not None:
        for stored in applied.values():
            seen.record(stored)
    return report(rlhf_pipeline, found, held, applied)


def _kept_fields(rlhf_pipeline: dict[str, Any]) -> dict[str, Any]:
    """The status fields as they were, for outcomes that decide nothing about the children."""
    status = rlhf_pipeline.get("status") or {}
    return {key: status[key] for key in ("url", "inferenceGraph", "inferenceServices") if key in status}


def names_reward_model(rlhf_pipeline: dict[str, Any], reward_model: str) -> bool:
    return any(reward.get("name") == reward_model for reward in (rlhf_pipeline.get("spec") or {}).get("rewards", []))
