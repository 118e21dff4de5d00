"""The RewardModel controller: one reconcile in five stages (ARCHITECTURE.md has them as a table).

1. **observe** (:func:`first_gap`, :func:`observe`): one read of everything the decision
   needs: what the spec references, the InferenceService as stored (only when a decision
   reads it), Knative mode's candidate InferenceService, the shared model cache (made or
   brought to the spec here: KServe binds it at the InferenceService's admission, so it
   exists before anything is decided), the gateways' rollout figures;
2. **decide** (:func:`reward_operator.policy.rewardmodel.decide`): pure policy on that
   observation (the cache binding, the rollout's next share, what is applied and pruned);
3. **render** (:func:`reward_operator.render.rendered_reward_model`): every child, once,
   with the decided share, and the sets of children it owns; the canary's candidate is
   rendered once before the decision, which reads its identity;
4. **apply** (:func:`apply_children`): one pass over the children in order, then the
   pruning of what is owned and no longer rendered (:func:`.apply.prune`);
5. **report** (:func:`report`): one :class:`Outcome` (Ready, the status fields, the
   conditions and events, the versions of the InferenceServices it decided from), which
   the runner writes; the predictor's replicas and its pods are read here, only once
   KServe has reported on the InferenceService as applied (before, it has made neither).

Every trigger (create, update, resume, a change to its InferenceService or its
predictor's replicas, the re-check, drift and rollout timers) runs the same
idempotent reconcile, so a child deleted or edited by hand is restored by the code
path that created it. A reconcile for a change of the InferenceService alone (KServe
writing its status, most often) while the spec is the one last reconciled re-applies
only the InferenceService, and only if it lost a field of ours: most of the
operator's API calls saved at a thousand objects (make bench-operator).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..api import conditions, kserve
from ..api.names import GENERATION_ANNOTATION, SHARE_ANNOTATION
from ..api.naming import candidate_isvc_name, identity_config_map_name, rollout_config_map_name
from ..cluster import Cluster, Logger, Refused
from ..policy import cache as cache_policy
from ..policy import children as child_policy
from ..policy import dependencies, names, readiness, scaling
from ..policy.rewardmodel import Decision, Observation, candidate_ready, decide
from ..policy.status import not_ready, settled
from ..render import Rendered, rendered_reward_model, reward_model_candidate
from ..render.cache import local_model_cache
from ..render.rewardmodel import candidate_runtime, model_runtime
from ..settings import Settings
from .apply import Rejected, apply, prune
from .runner import ChildKey, Outcome, child_version
from .seen import SeenChildren

DEPLOYMENT_KIND = "Deployment"
CACHE_KINDS = (kserve.LOCAL_MODEL_CACHE_KIND, kserve.LOCAL_MODEL_NAMESPACE_CACHE_KIND)
ISVC = (kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND)


# ---- 1. observe ----------------------------------------------------------------------------------


def first_gap(reward_model: dict[str, Any], cluster: Cluster) -> str | None:
    """What the schema cannot see: a host name KServe cannot derive, or the first thing the spec names
    that the cluster lacks (runtime, Secret key, ServiceAccount, KEDA, a node group)."""
    metadata, spec = reward_model["metadata"], reward_model["spec"]
    namespace = metadata["namespace"]
    problem = names.host_label_problem(metadata["name"], namespace, spec["serving"]["mode"], spec["gateway"]["enabled"])
    if problem is not None:
        return problem
    wanted = dependencies.references(
        reward_model,  # type: ignore[arg-type]
        model_runtime(reward_model),  # type: ignore[arg-type]
        candidate_runtime(reward_model),  # type: ignore[arg-type]
    )
    return dependencies.missing(namespace, wanted, cluster.lookup(namespace, wanted))


def _changed(changed_child: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The InferenceService ``name`` when it is the changed child (the watch's copy saves a read)."""
    return changed_child if changed_child is not None and changed_child["metadata"]["name"] == name else None


def observe(reward_model: dict[str, Any], changed_child: dict[str, Any] | None, cluster: Cluster) -> Observation:
    """Everything the decision reads. Raises :class:`Rejected` when KServe refuses the shared cache."""
    metadata, spec = reward_model["metadata"], reward_model["spec"]
    namespace, name = metadata["namespace"], metadata["name"]
    cache, conflict = None, None
    if "cache" in spec:
        manifest = local_model_cache(reward_model)  # type: ignore[arg-type]
        try:
            cache, conflict = cluster.ensure_cache(manifest, reward_model)
        except Refused as error:  # e.g. a node group KServe's webhook does not find
            raise Rejected(manifest, error) from error
    stored = _changed(changed_child, name)
    # the stored InferenceService is read only for what decides from it: the cache it is bound to, and
    # KServe's word on a Standard-mode candidate (its status.canaryStatuses)
    knative = spec["serving"]["mode"] == "Knative"
    released = cache_policy.released(reward_model)
    needs_stored = cache is not None or released is not None
    needs_stored = needs_stored or ("canary" in spec and not knative)
    if stored is None and needs_stored:
        stored = cluster.get(*ISVC, name, namespace)
    candidate = None
    if "canary" in spec and knative:
        candidate_name = candidate_isvc_name(name)
        candidate = _changed(changed_child, candidate_name) or cluster.get(*ISVC, candidate_name, namespace)
    figures = None
    if "canary" in spec and candidate_ready(reward_model, stored, candidate):
        figures = cluster.rollout_figures(namespace, name)
    return Observation(stored, candidate, cache, conflict, figures, released)


# ---- 4. apply ----------------------------------------------------------------------------------------


def apply_children(
    reward_model: dict[str, Any],
    rendered: Rendered,
    decision: Decision,
    changed_child: dict[str, Any] | None,
    cluster: Cluster,
    logger: Logger,
) -> list[dict[str, Any]]:
    """The cache's bookkeeping, then each child in order, as stored after its apply (one skipped: the
    InferenceService held back for the cache; with ``child_only``, the other children, and an
    InferenceService that still holds our fields); then the pruning. Raises :class:`Rejected`."""
    metadata = reward_model["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    cache = decision.cache
    if cache.unbind:
        cluster.opt_out_of_cache(name, namespace)  # KServe unbinds it at this admission
    if cache.release is not None:
        cluster.sweep_cache(*cache.release, logger)  # out of the old cache, which goes with its last user
    if cache.rebind:
        cluster.opt_into_cache(name, namespace)
    applied = []
    for child in rendered.children:
        kind = child["kind"]
        if kind in CACHE_KINDS or (cache.hold and kind == kserve.INFERENCE_SERVICE_KIND):
            continue  # the cache: made while observing; the InferenceService: waits for it
        if decision.child_only:
            if kind != kserve.INFERENCE_SERVICE_KIND:
                if decision.share_moved and _is_config_map(child, rollout_config_map_name(name)):
                    applied.append(cluster.apply(child))  # KServe's word on the candidate moved the share
                continue
            # Knative mode's rollout has two InferenceServices: the other one as stored
            stored = _changed(changed_child, child["metadata"]["name"]) or cluster.get(
                *ISVC, child["metadata"]["name"], namespace
            )
            if stored is not None and child_policy.holds(stored, child):
                applied.append(stored)
                continue
        applied.append(apply(child, cluster))
    _nudge_gateways(reward_model, applied, decision, cluster, logger)
    if decision.prune:
        prune(reward_model, rendered, cluster, logger)
    return applied


def _nudge_gateways(
    reward_model: dict[str, Any], applied: list[dict[str, Any]], decision: Decision, cluster: Cluster, logger: Logger
) -> None:
    """The values the gateways follow from ConfigMaps their pods mount (the rollout's share, the model's
    generation), set as annotations on the gateway pods when one of them moved in this apply: the kubelet
    projects a ConfigMap into a pod when it syncs that pod, which a change of the pod makes it do now, not
    at its periodic sync a minute on (a rolled-back candidate answering meanwhile, or answers naming the
    last generation)."""
    metadata = reward_model["metadata"]
    name = metadata["name"]
    told: dict[str, str] = {}
    if decision.share_moved and any(_is_config_map(child, rollout_config_map_name(name)) for child in applied):
        told[SHARE_ANNOTATION] = str(decision.percent)
    generation = metadata.get("generation")
    observed = (reward_model.get("status") or {}).get("observedGeneration")
    # not on the first reconcile (nothing observed yet): no gateway pod has mounted an older generation,
    # so no pod list for each RewardModel created
    moved = observed is not None and generation != observed
    if moved and any(_is_config_map(child, identity_config_map_name(name)) for child in applied):
        told[GENERATION_ANNOTATION] = str(generation)
    if told:
        nudged = cluster.nudge_gateways(metadata["namespace"], name, told)
        logger.info("%s told to %d gateway pod(s)", ", ".join(f"{k}={v}" for k, v in told.items()), len(nudged))


def _is_config_map(child: dict[str, Any], name: str) -> bool:
    """``child`` is the ConfigMap ``name`` (the rollout's share, the identity: the gateways follow them)."""
    return child["kind"] == "ConfigMap" and child["metadata"]["name"] == name


# ---- 5. report -----------------------------------------------------------------------------------------


def report(
    reward_model: dict[str, Any],
    applied: list[dict[str, Any]],
    decision: Decision,
    cluster: Cluster,
) -> Outcome:
    """Ready from KServe's report on the InferenceService as applied (and, when KServe says not Ready
    without a reason, Kubernetes' reason from its pods: one list, only then), the predictor's replicas
    (one list, once KServe has reported: it makes the predictor in the reconcile that first writes its
    status, and that write's event brings the next reconcile here), and every other condition."""
    metadata, spec = reward_model["metadata"], reward_model["spec"]
    namespace, name = metadata["namespace"], metadata["name"]
    cache, rollout = decision.cache, decision.rollout
    cache_conditions = (cache.cached,) if cache.cached is not None else ()
    removed = () if cache.cached is not None else (conditions.MODEL_CACHED,)
    no_rollout = conditions.CANARY_CONDITIONS if "canary" not in spec else ()
    if cache.hold:
        assert cache.cached is not None
        fields = {**_kept_rollout(reward_model), **cache.fields}
        held = cache_policy.held(cache.cached)
        return Outcome(
            held, fields, "progressing", conditions=cache_conditions, removed_conditions=no_rollout, scope="held"
        )
    isvc = _inference_service(applied, name)
    fields = {**readiness.inference_service_fields(isvc), **cache.fields}
    replicas = cluster.predictor_replicas(namespace, name) if readiness.kserve_reported(isvc) else None
    if replicas is not None:
        fields["replicas"] = replicas.ready
    asleep = scaling.scaled_to_zero(spec["serving"], replicas)
    scale_conditions = (asleep,) if asleep is not None else ()
    unscaled = () if asleep is not None else (conditions.SCALED_TO_ZERO,)
    gateway_enabled = spec["gateway"]["enabled"]
    ready = readiness.ready_from_inference_service(isvc, gateway_enabled)
    if isvc is not None and (components := readiness.pod_components(isvc, ready, gateway_enabled)):
        pods = cluster.inference_service_pods(namespace, name)
        ready = readiness.ready_with_pods(ready, isvc, pods, components, _ready_reason(reward_model))
    result = "ready" if ready.status == "True" else "progressing"
    scope = "child" if decision.child_only else "full"
    if rollout is None:
        return Outcome(
            ready,
            fields,
            result,
            conditions=scale_conditions + cache_conditions,
            removed_conditions=no_rollout + unscaled + removed,
            scope=scope,
        )
    fields["canary"] = rollout.status
    return Outcome(
        ready,
        fields,
        result,
        conditions=(rollout.ready, rollout.progressing, *scale_conditions, *cache_conditions),
        removed_conditions=unscaled + removed,
        events=tuple((event.type, event.reason, event.message) for event in rollout.events),
        scope=scope,
    )


# ---- the reconcile ----------------------------------------------------------------------------------------


def sync(
    reward_model: dict[str, Any],
    settings: Settings,
    logger: Logger,
    changed_child: dict[str, Any] | None = None,
    seen: SeenChildren | None = None,
    *,
    cluster: Cluster,
) -> Outcome:
    """``changed_child``: the InferenceService (or the predictor's Deployment) whose change triggered
    this reconcile, as the watch delivered it. ``seen``: where the InferenceService this reconcile
    applies is recorded as acted on, so the watch's echo of that apply costs no reconcile of its own."""
    metadata = reward_model["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    if changed_child is not None and changed_child.get("kind") == DEPLOYMENT_KIND:
        # the predictor's replicas moved (KEDA, an HPA, Knative): with the spec as last reconciled only the
        # status can follow, so this is the InferenceService's path with the InferenceService as stored
        changed_child = cluster.get(*ISVC, name, namespace) if settled(reward_model) else None

    problem = first_gap(reward_model, cluster)
    if problem is not None:
        # the children stay as they were: nothing already serving is lost
        existing = _changed(changed_child, name) or cluster.get(*ISVC, name, namespace)
        fields = {**readiness.inference_service_fields(existing), **_kept_rollout(reward_model)}
        return Outcome(
            not_ready(conditions.INVALID_SPEC, problem),
            fields,
            "invalid",
            scope="none",
            decided_from=_decided_from(existing),
        )
    candidate = reward_model_candidate(reward_model)  # rendered once: decided from, then rendered with
    try:
        observed = observe(reward_model, changed_child, cluster)
        identity = None if candidate is None else candidate.identity
        decision = decide(reward_model, observed, identity, changed_child, cluster.now())
        rendered = rendered_reward_model(
            reward_model,
            candidate,
            settings.gateway_image,
            decision.percent,
            settings.operator_namespace,
            settings.keda_namespace,
            decision.cache.bound,
            settings.image_pull_secrets,
        )
        applied = apply_children(reward_model, rendered, decision, changed_child, cluster, logger)
    except Rejected as rejected:
        return Outcome(not_ready(conditions.APPLY_FAILED, str(rejected)), _kept_rollout(reward_model), "apply_failed")
    isvc = _inference_service(applied, name)
    if seen is not None and isvc is not None and not decision.child_only:
        seen.record(isvc)  # the handler records a changed_child itself
    outcome = report(reward_model, applied, decision, cluster)
    return replace(outcome, decided_from=_decided_from(observed.stored, observed.candidate, *applied))


def _decided_from(*read: dict[str, Any] | None) -> tuple[tuple[ChildKey, str], ...]:
    """The InferenceServices among ``read`` with their versions (for the runner: a copy of one that may be
    older is read again); of one read twice, the later (an apply's answer after the read it decided from)."""
    versions: dict[ChildKey, str] = {}
    for child in read:
        if child is not None and child.get("kind") == kserve.INFERENCE_SERVICE_KIND:
            entry = child_version(child)
            if entry is not None:
                versions[entry[0]] = entry[1]
    return tuple(versions.items())


def _inference_service(applied: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The InferenceService ``name`` among the applied children (Knative mode's rollout has a second one)."""
    return next(
        (c for c in applied if c["kind"] == kserve.INFERENCE_SERVICE_KIND and c["metadata"]["name"] == name), None
    )


def _ready_reason(reward_model: dict[str, Any]) -> str | None:
    """Ready's reason as stored."""
    found = (reward_model.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in found if c.get("type") == conditions.READY), None)


def _kept_rollout(reward_model: dict[str, Any]) -> dict[str, Any]:
    """The rollout's status as it was (and the cache in use), for outcomes that decide nothing about them."""
    status = reward_model.get("status") or {}
    kept = {"modelCache": status["modelCache"]} if status.get("modelCache") else {}
    if status.get("canary") and "canary" in reward_model["spec"]:
        kept["canary"] = status["canary"]
    return kept
