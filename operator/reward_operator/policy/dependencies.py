"""What the cluster must hold for a RewardModel's spec to be honoured.

The schema cannot see other objects: a runtime, a Secret key or a ServiceAccount
the spec names may be missing. :func:`references` says what to look up, the
cluster layer looks it up into :class:`Observed`, and :func:`missing` turns the
first gap into a message that names the field to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.keda import scales_through_keda
from ..api.types import RewardModel, RoleSpec


@dataclass(frozen=True)
class SecretReference:
    field: str  # where the spec names it, for the message
    secret: str
    key: str


@dataclass(frozen=True)
class References:
    runtime: str  # the one the model runs on: named by the spec, else picked by its GPUs (render/runtime.py)
    secrets: tuple[SecretReference, ...]
    service_account: str | None
    keda: bool = False  # KEDA scales the predictor (Standard mode): KEDA's ScaledObject must be served
    keda_reason: str = "minReplicas"  # the field that asks for KEDA: minReplicas (0) or targetConcurrency
    node_groups: tuple[str, ...] = ()  # spec.cache.nodeGroups: LocalModelNodeGroups must exist
    node_selector: dict[str, str] = field(default_factory=dict)
    prefix: str = "spec"  # where the runtime and credentials are named (spec.actor for a pipeline's actor)
    runtime_named: bool = True  # False: the spec names none, so the default for its GPUs (or the CPU) is wanted
    candidate_runtime: str | None = None  # spec.canary's, where it differs (a candidate with GPUs of its own)

    @property
    def secret_names(self) -> set[str]:
        return {reference.secret for reference in self.secrets}


@dataclass
class Observed:
    """What the cluster holds of the referenced objects (never a Secret's values)."""

    runtime_found: bool
    secret_keys: dict[str, set[str] | None] = field(default_factory=dict)  # None: no such Secret
    service_account_found: bool = True
    keda_served: bool = True
    # LocalModelNodeGroup name -> its volume's required node affinity terms (None: no such group)
    node_groups: dict[str, list[dict] | None] = field(default_factory=dict)
    candidate_runtime_found: bool = True


def references(reward_model: RewardModel, runtime: str, candidate_runtime: str | None = None) -> References:
    """What a RewardModel names. ``runtime``, ``candidate_runtime``: the runtimes its model and its
    candidate run on (render.rewardmodel.model_runtime and candidate_runtime pick them)."""
    spec = reward_model["spec"]
    credentials = spec.get("credentials", {})
    secrets = []
    if token := credentials.get("huggingFaceToken"):
        secrets.append(SecretReference("spec.credentials.huggingFaceToken", token["name"], token["key"]))
    for item in spec.get("env", []):
        if ref := item.get("valueFrom", {}).get("secretKeyRef"):
            secrets.append(SecretReference(f"spec.env[{item['name']}]", ref["name"], ref["key"]))
    if auth := spec["gateway"].get("authSecretRef"):
        secrets.append(SecretReference("spec.gateway.authSecretRef", auth["name"], auth["key"]))
    serving = spec["serving"]
    cache = spec.get("cache")
    return References(
        runtime,
        tuple(secrets),
        credentials.get("serviceAccountName"),
        scales_through_keda(serving),
        "minReplicas" if serving["minReplicas"] == 0 else "targetConcurrency",
        tuple(cache["nodeGroups"]) if cache else (),
        dict(spec.get("nodeSelector") or {}),
        runtime_named="runtime" in spec,
        candidate_runtime=candidate_runtime if candidate_runtime != runtime else None,
    )


def role_references(prefix: str, role: RoleSpec, runtime: str) -> References:
    """What an RLHFPipeline role (at ``prefix``, e.g. spec.critic) names: its runtime, its Secret keys and its
    ServiceAccount. ``runtime``: the one it runs on, its default filled in."""
    credentials = role.get("credentials", {})
    secrets = []
    if token := credentials.get("huggingFaceToken"):
        secrets.append(SecretReference(f"{prefix}.credentials.huggingFaceToken", token["name"], token["key"]))
    for item in role.get("env", []):
        if ref := item.get("valueFrom", {}).get("secretKeyRef"):
            secrets.append(SecretReference(f"{prefix}.env[{item['name']}]", ref["name"], ref["key"]))
    return References(
        runtime, tuple(secrets), credentials.get("serviceAccountName"), prefix=prefix, runtime_named="runtime" in role
    )


def runtime_missing(namespace: str, prefix: str, runtime: str, named: bool, gpus_field: str) -> str:
    """No runtime of that name: the spec's own, or the default its GPUs pick (the CPU runtime for 0)."""
    message = f"{prefix}.runtime: no ClusterServingRuntime (or ServingRuntime in {namespace}) named {runtime!r}"
    if named:
        return f"{message}; install the reward runtimes or name an existing runtime"
    return (
        f"{message}, the default for {prefix}.{gpus_field}; install the reward runtimes (the chart's "
        f"runtimes.enabled, or manifests/base) or set {prefix}.runtime to an existing one"
    )


def keda_missing(reason: str) -> str:
    """Why a spec that KEDA must scale cannot be honoured on a cluster without KEDA, and what to do."""
    if reason == "minReplicas":
        return (
            "spec.serving.minReplicas: 0 in Standard mode scales the predictor to zero through KEDA, and this "
            "cluster serves no keda.sh/v1alpha1 ScaledObject: install KEDA (v2), or set serving.minReplicas "
            "to 1 or more, or use serving.mode: Knative"
        )
    return (
        "spec.serving.targetConcurrency in Standard mode scales the predictor on the gateway's load through KEDA, "
        "and this cluster serves no keda.sh/v1alpha1 ScaledObject: install KEDA (v2), or remove "
        "serving.targetConcurrency (KServe's HPA then scales on CPU: set resources.cpu), or use serving.mode: "
        "Knative"
    )


def _term_excludes(term: dict, selector: dict[str, str]) -> bool:
    """Whether a node affinity term cannot match any node carrying ``selector``'s labels."""
    for expression in term.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if key not in selector:
            continue
        value = selector[key]
        if (operator == "In" and value not in values) or (operator == "NotIn" and value in values):
            return True
        if operator == "DoesNotExist":
            return True
    return False


def selector_contradicts(terms: list[dict], selector: dict[str, str]) -> bool:
    """Whether no node can satisfy both ``selector`` and the node affinity ``terms`` (ORed)."""
    return bool(terms) and bool(selector) and all(_term_excludes(term, selector) for term in terms)


def missing(namespace: str, wanted: References, observed: Observed) -> str | None:
    """What the cluster lacks to honour an otherwise valid spec, in words, or None."""
    if not observed.runtime_found:
        return runtime_missing(namespace, wanted.prefix, wanted.runtime, wanted.runtime_named, "resources.gpus")
    if wanted.candidate_runtime and not observed.candidate_runtime_found:
        return runtime_missing(
            namespace, wanted.prefix, wanted.candidate_runtime, wanted.runtime_named, "canary.resources.gpus"
        )
    for reference in wanted.secrets:
        keys = observed.secret_keys.get(reference.secret)
        if keys is None:
            return f"{reference.field}: Secret {reference.secret!r} not found in namespace {namespace}"
        if reference.key not in keys:
            return f"{reference.field}: Secret {reference.secret!r} has no key {reference.key!r}"
    if wanted.service_account and not observed.service_account_found:
        return (
            f"{wanted.prefix}.credentials.serviceAccountName: ServiceAccount {wanted.service_account!r} "
            f"not found in namespace {namespace}"
        )
    if wanted.keda and not observed.keda_served:
        return keda_missing(wanted.keda_reason)
    for group in wanted.node_groups:
        if observed.node_groups.get(group) is None:
            return (
                f"spec.cache.nodeGroups: LocalModelNodeGroup {group!r} not found; the cluster admin makes "
                "them (kubectl get localmodelnodegroups)"
            )
    if wanted.node_groups:
        first = wanted.node_groups[0]
        if selector_contradicts(observed.node_groups[first] or [], wanted.node_selector):
            return (
                f"spec.nodeSelector contradicts LocalModelNodeGroup {first!r} (cache.nodeGroups[0]): its volume's "
                "node affinity admits no node with these labels, so the predictor could never read the cache"
            )
    return None
