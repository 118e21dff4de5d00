"""What the cluster must hold for a RewardModel's spec to be honoured.

The schema cannot see other objects: a runtime, a Secret key or a ServiceAccount
the spec names may be missing. :func:`references` says what to look up, the
cluster layer looks it up into :class:`Observed`, and :func:`missing` turns the
first gap into a message that names the field to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.keda import scales_through_keda
from ..api.types import RewardModel


@dataclass(frozen=True)
class SecretReference:
    field: str  # where the spec names it, for the message
    secret: str
    key: str


@dataclass(frozen=True)
class References:
    runtime: str
    secrets: tuple[SecretReference, ...]
    service_account: str | None
    keda: bool = False  # KEDA scales the predictor (Standard mode): KEDA's ScaledObject must be served
    keda_reason: str = "minReplicas"  # the field that asks for KEDA: minReplicas (0) or targetConcurrency

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


def references(reward_model: RewardModel) -> References:
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
    return References(
        spec["runtime"],
        tuple(secrets),
        credentials.get("serviceAccountName"),
        scales_through_keda(serving),
        "minReplicas" if serving["minReplicas"] == 0 else "targetConcurrency",
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


def missing(namespace: str, wanted: References, observed: Observed) -> str | None:
    """What the cluster lacks to honour an otherwise valid spec, in words, or None."""
    if not observed.runtime_found:
        return (
            f"spec.runtime: no ClusterServingRuntime (or ServingRuntime in {namespace}) named {wanted.runtime!r}; "
            "install the reward runtimes or name an existing runtime"
        )
    for reference in wanted.secrets:
        keys = observed.secret_keys.get(reference.secret)
        if keys is None:
            return f"{reference.field}: Secret {reference.secret!r} not found in namespace {namespace}"
        if reference.key not in keys:
            return f"{reference.field}: Secret {reference.secret!r} has no key {reference.key!r}"
    if wanted.service_account and not observed.service_account_found:
        return (
            f"spec.credentials.serviceAccountName: ServiceAccount {wanted.service_account!r} "
            f"not found in namespace {namespace}"
        )
    if wanted.keda and not observed.keda_served:
        return keda_missing(wanted.keda_reason)
    return None
