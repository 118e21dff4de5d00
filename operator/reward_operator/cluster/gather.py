"""Reads what policy needs to decide, in as few API calls as it takes."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client import ApiClient

from ..api import API_VERSION, REWARD_MODEL_KIND
from ..api.keda import SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND
from ..api.kserve import (
    CLUSTER_SERVING_RUNTIME_KIND,
    COMPONENT_LABEL,
    ISVC_LABEL,
    LOCAL_MODEL_API_VERSION,
    LOCAL_MODEL_NODE_GROUP_KIND,
    RUNTIME_API_VERSION,
    SERVING_RUNTIME_KIND,
    canary_predictor_name,
)
from ..policy.dependencies import Observed, References
from ..policy.scaling import PredictorReplicas
from .client import apps, core, translated
from .objects import get, or_none


def secret_keys(namespace: str, name: str) -> set[str] | None:
    """The keys of a Secret (never its values), or None when it does not exist."""
    secret = or_none(lambda: core().read_namespaced_secret(name, namespace))
    if secret is None:
        return None
    return set((secret.data or {}).keys()) | set((secret.string_data or {}).keys())


def reward_models(namespace: str, names: list[str]) -> dict[str, dict | None]:
    """The RewardModels an RLHFPipeline names, as stored (None: not found), in the order given."""
    return {name: get(API_VERSION, REWARD_MODEL_KIND, name, namespace) for name in names}


def runtime_exists(namespace: str, runtime: str) -> bool:
    """A ClusterServingRuntime, or a ServingRuntime in the namespace, of that name."""
    return (
        get(RUNTIME_API_VERSION, CLUSTER_SERVING_RUNTIME_KIND, runtime) is not None
        or get(RUNTIME_API_VERSION, SERVING_RUNTIME_KIND, runtime, namespace) is not None
    )


def lookup(
    namespace: str,
    wanted: References,
    runtime_found: Callable[[str, str], bool],
    serves: Callable[[str, str], bool],
) -> Observed:
    """Look up what the spec references; each Secret is read once, however often it is named.
    ``runtime_found`` and ``serves``: the cluster's (which may remember them a while)."""
    observed = Observed(runtime_found=runtime_found(namespace, wanted.runtime))
    if not observed.runtime_found:
        return observed  # the first gap is the one reported
    if wanted.candidate_runtime:
        observed.candidate_runtime_found = runtime_found(namespace, wanted.candidate_runtime)
        if not observed.candidate_runtime_found:
            return observed
    observed.secret_keys = {name: secret_keys(namespace, name) for name in sorted(wanted.secret_names)}
    if wanted.keda:
        observed.keda_served = serves(SCALED_OBJECT_API_VERSION, SCALED_OBJECT_KIND)
    for group in wanted.node_groups:
        found = get(LOCAL_MODEL_API_VERSION, LOCAL_MODEL_NODE_GROUP_KIND, group)
        observed.node_groups[group] = None if found is None else _required_terms(found)
    if wanted.service_account:
        account = wanted.service_account
        observed.service_account_found = (
            or_none(lambda: core().read_namespaced_service_account(account, namespace)) is not None
        )
    return observed


def _required_terms(node_group: dict) -> list[dict]:
    """The required node affinity terms of a LocalModelNodeGroup's volume (where it caches)."""
    affinity = ((node_group.get("spec") or {}).get("persistentVolumeSpec") or {}).get("nodeAffinity") or {}
    return list((affinity.get("required") or {}).get("nodeSelectorTerms") or [])


def predictor_replicas(namespace: str, isvc: str) -> PredictorReplicas | None:
    """Ready and wanted pods of the predictor KServe made for ``isvc``, in either mode, or None when it made
    none yet.

    Standard mode has one Deployment ``<isvc>-predictor``; Knative one per
    revision. KServe labels all of them, so one list by label covers both. A
    rollout's candidate (``<isvc>-canary-predictor``, labelled alike) is not counted."""
    selector = f"{ISVC_LABEL}={isvc},{COMPONENT_LABEL}=predictor"
    with translated():
        listed = apps().list_namespaced_deployment(namespace, label_selector=selector).items
    deployments = [d for d in listed if d.metadata.name != canary_predictor_name(isvc)]
    if not deployments:
        return None
    return PredictorReplicas(
        ready=sum((d.status.ready_replicas or 0) if d.status else 0 for d in deployments),
        # the API server defaults an unset spec.replicas to 1
        wanted=sum(d.spec.replicas if d.spec and d.spec.replicas is not None else 1 for d in deployments),
    )


# Turns the client's models into the plain dicts policy reads (camelCase, as the API serves them).
_SERIALIZER = ApiClient()


def pods(namespace: str, labels: dict[str, str]) -> list[dict]:
    """The pods with all of ``labels``, as plain dicts: one list by label."""
    selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    with translated():
        listed = core().list_namespaced_pod(namespace, label_selector=selector).items
    return [_SERIALIZER.sanitize_for_serialization(pod) for pod in listed]


def inference_service_pods(namespace: str, isvc: str) -> list[dict]:
    """The pods KServe made for ``isvc`` (every component: its label tells predictor from transformer), as
    plain dicts: one list by label, read only while the InferenceService is not Ready
    (``policy.readiness.pod_components``)."""
    return pods(namespace, {ISVC_LABEL: isvc})
