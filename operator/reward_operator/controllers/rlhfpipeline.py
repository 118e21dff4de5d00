"""The RLHFPipeline controller: check, read the RewardModels it names, render, apply, summarise.

Every trigger (create, update, resume, a change to one of its InferenceServices or its
InferenceGraph, a change to a RewardModel it names, the re-check and drift timers) runs
the same idempotent reconcile; a child's event that changes nothing a reconcile reads
(the watch's echo of our own apply, most often) runs none (controllers/seen.py). Every
child is applied (server-side apply leaves an unchanged object unwritten), so a child
deleted or edited by hand is restored, and the critic's InferenceService is deleted once
spec.critic goes. The graph is applied only once every named RewardModel exists with its
gateway (its steps call them); until then it is left as it was. A RewardModel's own
lifecycle is its controller's: the pipeline only reads them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from ..api import (
    API_VERSION,
    GROUP,
    REWARD_MODEL_KIND,
    REWARD_MODEL_PLURAL,
    RLHF_PIPELINE_KIND,
    RLHF_PIPELINE_PLURAL,
    VERSION,
    conditions,
    kserve,
)
from ..api.defaults import apply_defaults
from ..api.names import MANAGED_BY, owner_label
from ..api.schema import RLHF_PIPELINE
from ..cluster import Cluster, KubernetesCluster, Refused
from ..metrics import OperatorMetrics
from ..policy import dependencies, names, pipeline
from ..policy.status import not_ready
from ..render import render_rlhf_pipeline
from ..render.inferencegraph import graph_url
from ..render.pipeline_gateway import ACTOR, CRITIC, REFERENCE
from ..render.rlhfpipeline import reference_role, role_isvc_name, role_runtime
from ..settings import Settings
from .runner import Logger, Outcome, Runner, register_reconcile_triggers
from .seen import SeenChildren

KIND = RLHF_PIPELINE_KIND
ROLE_CONDITIONS = {
    ACTOR: conditions.ACTOR_READY,
    REFERENCE: conditions.REFERENCE_READY,
    CRITIC: conditions.CRITIC_READY,
}


def _roles(spec: dict[str, Any]) -> list[str]:
    return [ACTOR, REFERENCE, *([CRITIC] if "critic" in spec else [])]


def invalid_spec(rlhf_pipeline: dict[str, Any], cluster: Cluster) -> str | None:
    """What the schema cannot see and KServe would trip on later: a host name over a DNS label (the
    namespace is not the schema's), or a runtime, Secret key or ServiceAccount a role names that the
    cluster lacks (the first gap, role by role)."""
    metadata, spec = rlhf_pipeline["metadata"], rlhf_pipeline["spec"]
    for role in _roles(spec):
        problem = names.host_label_problem(
            role_isvc_name(metadata["name"], role), metadata["namespace"], "Standard", True
        )
        if problem is not None:
            return problem
    role_specs = {ACTOR: spec["actor"], REFERENCE: reference_role(rlhf_pipeline)}  # type: ignore[arg-type]
    if "critic" in spec:
        role_specs[CRITIC] = spec["critic"]
    # The reference takes the actor's runtime and credentials unless it names its own: what two roles
    # name alike is read once.
    observed: dict[tuple[str, frozenset[str], str | None], dependencies.Observed] = {}
    for role, role_spec in role_specs.items():
        wanted = dependencies.role_references(f"spec.{role}", role_spec, role_runtime(role, role_spec))
        key = (wanted.runtime, frozenset(wanted.secret_names), wanted.service_account)
        if key not in observed:
            observed[key] = cluster.observe(metadata["namespace"], wanted)
        problem = dependencies.missing(metadata["namespace"], wanted, observed[key])
        if problem is not None:
            return problem
    return None


def _kept_fields(rlhf_pipeline: dict[str, Any]) -> dict[str, Any]:
    """The status fields as they were, for outcomes that decide nothing about the children."""
    status = rlhf_pipeline.get("status") or {}
    return {key: status[key] for key in ("url", "inferenceGraph", "inferenceServices") if key in status}


def _prune(rlhf_pipeline: dict[str, Any], children: list[dict[str, Any]], cluster: Cluster, logger: Logger) -> None:
    """Delete the InferenceServices of this pipeline it no longer renders (the critic's, once spec.critic goes)."""
    metadata = rlhf_pipeline["metadata"]
    labels = {**MANAGED_BY, owner_label(KIND): metadata["name"]}
    keep = {c["metadata"]["name"] for c in children if c["kind"] == kserve.INFERENCE_SERVICE_KIND}
    for name in cluster.prune(
        kserve.INFERENCE_SERVICE_API_VERSION,
        kserve.INFERENCE_SERVICE_KIND,
        metadata["namespace"],
        labels,
        metadata["uid"],
        keep,
    ):
        logger.info("InferenceService %s is no longer rendered; deleted", name)


def sync(
    rlhf_pipeline: dict[str, Any],
    settings: Settings,
    logger: Logger,
    seen: SeenChildren | None = None,
    cluster: Cluster | None = None,
) -> Outcome:
    """``seen``: where each child this reconcile applies is recorded as acted on, so the watch's echo of
    that apply costs no reconcile of its own."""
    cluster = cluster or KubernetesCluster()
    metadata, spec = rlhf_pipeline["metadata"], rlhf_pipeline["spec"]
    namespace, name = metadata["namespace"], metadata["name"]
    problem = invalid_spec(rlhf_pipeline, cluster)
    if problem is not None:
        # the children stay as they were: nothing already serving is lost
        return Outcome(
            not_ready(conditions.INVALID_SPEC, problem), _kept_fields(rlhf_pipeline), "invalid", scope="none"
        )

    found = cluster.reward_models(namespace, [reward["name"] for reward in spec["rewards"]])
    held = pipeline.unusable_rewards(namespace, found) is not None
    children = render_rlhf_pipeline(rlhf_pipeline, settings.gateway_image, with_graph=not held)
    applied: dict[str, dict[str, Any]] = {}
    for child in children:
        try:
            applied[child["metadata"]["name"]] = cluster.apply(child)
        except Refused as error:
            message = f"{child['kind']} {child['metadata']['name']} rejected: {error.message}"
            return Outcome(not_ready(conditions.APPLY_FAILED, message), _kept_fields(rlhf_pipeline), "apply_failed")
    _prune(rlhf_pipeline, children, cluster, logger)
    if seen is not None:
        for stored in applied.values():
            seen.record(stored)

    roles = [
        pipeline.role_ready(ROLE_CONDITIONS[role], applied.get(role_isvc_name(name, role))) for role in _roles(spec)
    ]
    roles.append(pipeline.rewards_ready(namespace, found))
    roles.append(pipeline.graph_ready(None if held else applied.get(name), held))
    ready = pipeline.pipeline_ready(roles)
    services = {role: role_isvc_name(name, role) for role in _roles(spec)}
    fields = pipeline.status_fields(None if held else graph_url(name, namespace), None if held else name, services)
    if held:
        fields = {**_kept_fields(rlhf_pipeline), **fields}  # a graph applied before still serves there
    return Outcome(
        ready,
        fields,
        "ready" if ready.status == "True" else "progressing",
        conditions=tuple(roles),
        removed_conditions=() if "critic" in spec else (conditions.CRITIC_READY,),
    )


def names_reward_model(rlhf_pipeline: dict[str, Any], reward_model: str) -> bool:
    return any(reward.get("name") == reward_model for reward in (rlhf_pipeline.get("spec") or {}).get("rewards", []))


def register(
    registry: kopf.OperatorRegistry, settings: Settings, runner_metrics: OperatorMetrics, cluster: Cluster
) -> Runner:
    """Wire the RLHFPipeline handlers into ``registry``; returns the runner they share."""
    seen = SeenChildren()
    runner = Runner(
        API_VERSION,
        KIND,
        lambda obj, logger, child: sync(obj, settings, logger, seen, cluster),
        lambda obj: apply_defaults(obj, RLHF_PIPELINE),
        runner_metrics,
        cluster,
    )
    resource = (GROUP, VERSION, RLHF_PIPELINE_PLURAL)

    register_reconcile_triggers(
        registry, resource, runner, settings.drift_interval, settings.recheck_interval, id_prefix="pipeline_"
    )

    @kopf.on.event(*resource, registry=registry)
    async def rlhf_pipeline_event(event: dict[str, Any], body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            await asyncio.to_thread(runner.forget, namespace, name)  # its children go with the garbage collector
        else:
            runner.observe(namespace, name, dict(body))

    def owned_child_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger
    ) -> None:
        """A child changed (KServe's report, a hand edit) or vanished: reconcile its owner, which restores
        it, unless the change is in nothing a reconcile reads (see :mod:`.seen`)."""
        if event.get("type") == "DELETED":
            seen.forget(namespace, body["metadata"]["name"])  # first: the reconcile records the one it restores
        elif seen.unchanged(dict(body)):
            return
        runner.reconcile(namespace, labels[owner_label(KIND)], logger)

    child_labels = {**MANAGED_BY, owner_label(KIND): kopf.PRESENT}

    @kopf.on.event(
        kserve.GROUP,
        kserve.INFERENCE_SERVICE_API_VERSION.rpartition("/")[2],
        kserve.INFERENCE_SERVICE_PLURAL,
        labels=child_labels,
        registry=registry,
    )
    def pipeline_inference_service_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        owned_child_event(event, body, namespace, labels, logger)

    @kopf.on.event(
        kserve.GROUP,
        kserve.INFERENCE_GRAPH_API_VERSION.rpartition("/")[2],
        kserve.INFERENCE_GRAPH_PLURAL,
        labels=child_labels,
        registry=registry,
    )
    def pipeline_inference_graph_event(
        event: dict[str, Any], body: kopf.Body, namespace: str, labels: dict[str, str], logger: Logger, **_: Any
    ) -> None:
        owned_child_event(event, body, namespace, labels, logger)

    # On the event loop: it sees every RewardModel's every event, and a sync handler would make each wait
    # for a thread of kopf's pool behind the queued reconciles (at N = 1000 RewardModels that held kopf's
    # own patches past its consistency wait, and it ran 857 create handlers twice).
    @kopf.on.event(GROUP, VERSION, REWARD_MODEL_PLURAL, registry=registry)
    async def reward_model_of_a_pipeline_event(namespace: str, name: str, logger: Logger, **_: Any) -> None:
        """A RewardModel was made, changed (its Ready) or removed: the pipelines naming it follow."""
        for known in runner.known(namespace):
            if names_reward_model(known, name):
                try:
                    await asyncio.to_thread(runner.reconcile, namespace, known["metadata"]["name"], logger)
                except kopf.TemporaryError as error:  # this event is the RewardModel's: retried by the timers
                    logger.info(
                        "%s %s not reconciled after a change of %s %s: %s",
                        KIND, known["metadata"]["name"], REWARD_MODEL_KIND, name, error,
                    )  # fmt: skip

    return runner
