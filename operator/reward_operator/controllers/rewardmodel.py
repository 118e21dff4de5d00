"""The RewardModel controller: one reconcile in five stages.

1. **observe**: one read of everything the decision needs: what the spec references,
   the InferenceService as stored (only when a decision reads it), Knative mode's
   candidate InferenceService, the shared model cache (made or brought to the spec
   here: KServe binds it at the InferenceService's admission, so it exists before
   anything is decided), the gateways' rollout figures;
2. **decide**: pure policy on that observation (the cache binding, the rollout's
   next share);
3. **render**: every child, once, with the decided share;
4. **apply**: one pass over the children in order, then prune;
5. **report**: one :class:`Outcome` (Ready, the status fields, the conditions and
   events, the versions of the InferenceServices it decided from), which the runner
   writes; the predictor's replicas and its pods are read here, only once KServe has
   reported on the InferenceService as applied (before, it has made neither).

Every trigger (create, update, resume, a change to its InferenceService or its
predictor's replicas, the re-check, drift and rollout timers) runs the same
idempotent reconcile, so a child deleted or edited by hand is restored by the code
path that created it. A reconcile for a change of the InferenceService alone (KServe
writing its status, most often) while the spec is the one last reconciled re-applies
only the InferenceService, and only if it lost a field of ours: most of the
operator's API calls saved at a thousand objects (make bench-operator).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..api import REWARD_MODEL_KIND, conditions, kserve
from ..api.cache import cache_identity
from ..api.duration import interval_seconds
from ..api.keda import scales_through_keda
from ..api.names import GENERATION_ANNOTATION, MANAGED_BY, SHARE_ANNOTATION, owner_label
from ..api.naming import candidate_isvc_name
from ..cluster import Cluster, KubernetesCluster, Logger, Refused
from ..policy import cache as cache_policy
from ..policy import canary as canary_policy
from ..policy import children as child_policy
from ..policy import dependencies, names, readiness, scaling
from ..policy.status import Condition, not_ready, settled
from ..render import (
    IDENTITY_PRUNE_LABELS,
    PRUNED_KINDS,
    ROLLOUT_PRUNE_LABELS,
    ROLLOUT_PRUNED_KINDS,
    SCALER_PRUNED_KINDS,
    canary_identity,
    render_reward_model,
)
from ..render.cache import local_model_cache
from ..render.canary import CanaryIdentity
from ..render.rewardmodel import candidate_runtime, model_runtime
from ..settings import Settings
from .runner import ChildKey, Outcome, child_version
from .seen import SeenChildren

KIND = REWARD_MODEL_KIND
DEPLOYMENT_KIND = "Deployment"
CACHE_KINDS = (kserve.LOCAL_MODEL_CACHE_KIND, kserve.LOCAL_MODEL_NAMESPACE_CACHE_KIND)
ISVC = (kserve.INFERENCE_SERVICE_API_VERSION, kserve.INFERENCE_SERVICE_KIND)


# ---- 1. observe ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What the cluster holds that this reconcile decides from, read once."""

    stored: dict[str, Any] | None = None  # the InferenceService, where a decision reads it
    candidate: dict[str, Any] | None = None  # Knative mode's candidate InferenceService
    cache: dict[str, Any] | None = None  # the shared cache, made or brought to the spec
    cache_conflict: str | None = None
    figures: list[dict[str, Any]] | None = None  # the gateways' GET /canary, while the candidate is Ready
    released: tuple[str, str, str | None] | None = None  # a cache this RewardModel no longer uses


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
    return dependencies.missing(namespace, wanted, cluster.observe(namespace, wanted))


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
    if "canary" in spec and _candidate_ready(reward_model, stored, candidate):
        figures = cluster.rollout_figures(namespace, name)
    return Observation(stored, candidate, cache, conflict, figures, released)


def _candidate_ready(
    reward_model: dict[str, Any], stored: dict[str, Any] | None, candidate: dict[str, Any] | None
) -> bool | None:
    """KServe's word on the candidate: Knative mode's own InferenceService, or Standard mode's canary entry."""
    if reward_model["spec"]["serving"]["mode"] == "Knative":
        return canary_policy.candidate_isvc_ready(candidate)
    return canary_policy.candidate_ready(stored)


# ---- 2. decide -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachePlan:
    """What the shared model cache asks of this reconcile."""

    cached: Condition | None = None  # ModelCached, with spec.cache
    bound: bool = True  # the InferenceService reads from the cache (rendered with it)
    hold: bool = False  # the InferenceService is not created before the cache is filled
    release: tuple[str, str, str | None] | None = None  # a cache this RewardModel left: swept
    unbind: bool = False  # KServe's opt-out set first: the left cache is still bound
    rebind: bool = False  # an opt-out of an earlier release cleared: bound at that admission
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    percent: int  # the candidate's share the gateways run from now (0 without a rollout)
    cache: CachePlan
    rollout: canary_policy.Rollout | None  # None without spec.canary, or while the cache holds it back
    child_only: bool  # only the InferenceService changed and the spec is as last reconciled
    share_moved: bool = False  # the rollout's ConfigMap tells the gateways a new share


def running_share(reward_model: dict[str, Any], identity: CanaryIdentity | None) -> int:
    """The share the gateways run now: the rollout's status, if it is this rollout's (``identity``)."""
    previous = (reward_model.get("status") or {}).get("canary") or {}
    if identity is None or previous.get("revision") != identity.revision:
        return 0
    return int(previous.get("percent") or 0)


def plan_cache(reward_model: dict[str, Any], seen: Observation) -> CachePlan:
    """ModelCached, and whether the InferenceService reads from the cache yet (see policy.cache)."""
    release = seen.released
    unbind = release is not None and cache_policy.bound_to(seen.stored) == release[1]
    if "cache" not in reward_model["spec"]:
        return CachePlan(release=release, unbind=unbind)
    cached = cache_policy.model_cached(seen.cache, seen.cache_conflict)
    bound = cache_policy.bound(cached, seen.stored, seen.cache["metadata"]["name"])  # type: ignore[index]
    return CachePlan(
        cached=cached,
        bound=bound,
        hold=not bound and seen.stored is None,  # never started on a partly filled cache
        release=release,
        unbind=unbind,
        rebind=bound and cache_policy.opted_out(seen.stored),
        fields={"modelCache": cache_policy.identity_status(cache_identity(reward_model))},  # type: ignore[arg-type]
    )


def decide(
    reward_model: dict[str, Any], seen: Observation, changed_child: dict[str, Any] | None, now: datetime
) -> Decision:
    cache = plan_cache(reward_model, seen)
    identity = canary_identity(reward_model)
    running = percent = running_share(reward_model, identity)
    rollout = None
    if identity is not None and not cache.hold:
        metadata, canary = reward_model["metadata"], reward_model["spec"]["canary"]
        knative = reward_model["spec"]["serving"]["mode"] == "Knative"
        ready = _candidate_ready(reward_model, seen.stored, seen.candidate)
        status = reward_model.get("status") or {}
        rollout = canary_policy.decide(
            canary_policy.RolloutInput(
                canary=canary,
                candidate=identity.candidate,
                revision=identity.revision,
                previous=status.get("canary"),
                previous_conditions=tuple(status.get("conditions") or ()),
                ready=ready,
                figures=None
                if seen.figures is None
                else canary_policy.pool(seen.figures, identity.candidate, canary["mode"], percent),
                interval_s=interval_seconds(canary["interval"]),
                now=now,
                deployment=f"InferenceService {candidate_isvc_name(metadata['name'])}"
                if knative
                else kserve.canary_predictor_name(metadata["name"]),
            )
        )
        percent = rollout.percent
    child_only = changed_child is not None and settled(reward_model)
    return Decision(percent, cache, rollout, child_only, share_moved=percent != running)


# ---- 4. apply ----------------------------------------------------------------------------------------


class Rejected(Exception):
    """The API server or a webhook refused an object this reconcile applies: ApplyFailed, with its message."""

    def __init__(self, manifest: dict[str, Any], error: Refused):
        super().__init__(f"{manifest['kind']} {manifest['metadata']['name']} rejected: {error.message}")


def apply_children(
    reward_model: dict[str, Any],
    children: list[dict[str, Any]],
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
    for child in children:
        kind = child["kind"]
        if kind in CACHE_KINDS or (cache.hold and kind == kserve.INFERENCE_SERVICE_KIND):
            continue  # the cache: made while observing; the InferenceService: waits for it
        if decision.child_only:
            if kind != kserve.INFERENCE_SERVICE_KIND:
                if decision.share_moved and _is_rollout_share(child):
                    applied.append(cluster.apply(child))  # KServe's word on the candidate moved the share
                continue
            # Knative mode's rollout has two InferenceServices: the other one as stored
            stored = _changed(changed_child, child["metadata"]["name"]) or cluster.get(
                *ISVC, child["metadata"]["name"], namespace
            )
            if stored is not None and child_policy.holds(stored, child):
                applied.append(stored)
                continue
        try:
            applied.append(cluster.apply(child))
        except Refused as error:
            raise Rejected(child, error) from error
    _nudge_gateways(reward_model, applied, decision, cluster, logger)
    if not decision.child_only and not _as_created(reward_model):
        _prune(reward_model, children, cluster, logger)
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
    told: dict[str, str] = {}
    if decision.share_moved and any(_is_rollout_share(child) for child in applied):
        told[SHARE_ANNOTATION] = str(decision.percent)
    generation = metadata.get("generation")
    observed = (reward_model.get("status") or {}).get("observedGeneration")
    # not on the first reconcile (nothing observed yet): no gateway pod has mounted an older generation,
    # so no pod list for each RewardModel created
    moved = observed is not None and generation != observed
    if moved and any(_labelled(child, IDENTITY_PRUNE_LABELS) for child in applied):
        told[GENERATION_ANNOTATION] = str(generation)
    if told:
        nudged = cluster.nudge_gateways(metadata["namespace"], metadata["name"], told)
        logger.info("%s told to %d gateway pod(s)", ", ".join(f"{k}={v}" for k, v in told.items()), len(nudged))


def _as_created(reward_model: dict[str, Any]) -> bool:
    """The spec is the one it was created with and no reconcile has written the status yet: nothing
    of it can be pruned (a reconcile that failed before writing applied what this one renders)."""
    observed = (reward_model.get("status") or {}).get("observedGeneration")
    return reward_model["metadata"].get("generation") == 1 and not observed


def _is_rollout_share(child: dict[str, Any]) -> bool:
    """The ConfigMap the gateways read the rollout's share from (the kubelet projects it into their pods)."""
    return _labelled(child, ROLLOUT_PRUNE_LABELS)


def _labelled(child: dict[str, Any], wanted: dict[str, str]) -> bool:
    labels = child["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


def _prune(reward_model: dict[str, Any], children: list[dict[str, Any]], cluster: Cluster, logger: Logger) -> None:
    """Delete the children of the kinds that come and go with the spec which it no longer renders
    (the NetworkPolicies once gateway.allowedClients is removed; the identity's ConfigMap while the gateway
    is disabled; the rollout's share ConfigMap, and in
    Knative mode the candidate's InferenceService, once spec.canary is, listed only while a rollout is or
    was just on; the scaler Service and ScaledObject once serving.minReplicas is above 0, listed only where
    KEDA is installed)."""
    metadata = reward_model["metadata"]
    labels = {**MANAGED_BY, owner_label(KIND): metadata["name"]}
    kinds = [(kind, labels) for kind in PRUNED_KINDS]
    if scales_through_keda(reward_model["spec"]["serving"]) or cluster.keda_served():
        kinds += [(kind, labels) for kind in SCALER_PRUNED_KINDS]
    if "canary" in reward_model["spec"] or "canary" in (reward_model.get("status") or {}):
        # by the rollout's component label too: the chat template's ConfigMaps are never listed
        kinds += [(kind, {**labels, **ROLLOUT_PRUNE_LABELS}) for kind in ROLLOUT_PRUNED_KINDS]
        if reward_model["spec"]["serving"]["mode"] == "Knative":
            kinds.append((ISVC, labels))
    if not reward_model["spec"]["gateway"]["enabled"]:
        # the identity's ConfigMap, by its component label as the rollout's (the chat template's stay)
        kinds.append((("v1", "ConfigMap"), {**labels, **IDENTITY_PRUNE_LABELS}))
    for (api_version, kind), selector in kinds:
        keep = {c["metadata"]["name"] for c in children if (c["apiVersion"], c["kind"]) == (api_version, kind)}
        for pruned in cluster.prune(api_version, kind, metadata["namespace"], selector, metadata["uid"], keep):
            logger.info("%s %s is no longer rendered; deleted", kind, pruned)


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
    cluster: Cluster | None = None,
) -> Outcome:
    """``changed_child``: the InferenceService (or the predictor's Deployment) whose change triggered
    this reconcile, as the watch delivered it. ``seen``: where the InferenceService this reconcile
    applies is recorded as acted on, so the watch's echo of that apply costs no reconcile of its own."""
    cluster = cluster or KubernetesCluster()
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
    try:
        observed = observe(reward_model, changed_child, cluster)
        decision = decide(reward_model, observed, changed_child, cluster.now())
        children = render_reward_model(
            reward_model,
            settings.gateway_image,
            decision.percent,
            settings.operator_namespace,
            settings.keda_namespace,
            decision.cache.bound,
        )
        applied = apply_children(reward_model, children, decision, changed_child, cluster, logger)
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
