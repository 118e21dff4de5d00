"""Reads what policy needs to decide, in as few API calls as it takes."""

from __future__ import annotations

from ..api.kserve import CLUSTER_SERVING_RUNTIME_KIND, RUNTIME_API_VERSION, SERVING_RUNTIME_KIND
from ..policy.dependencies import Observed, References
from .client import apps, core
from .objects import get, or_none


def secret_keys(namespace: str, name: str) -> set[str] | None:
    """The keys of a Secret (never its values), or None when it does not exist."""
    secret = or_none(lambda: core().read_namespaced_secret(name, namespace))
    if secret is None:
        return None
    return set((secret.data or {}).keys()) | set((secret.string_data or {}).keys())


def runtime_exists(namespace: str, runtime: str) -> bool:
    """A ClusterServingRuntime, or a ServingRuntime in the namespace, of that name."""
    return (
        get(RUNTIME_API_VERSION, CLUSTER_SERVING_RUNTIME_KIND, runtime) is not None
        or get(RUNTIME_API_VERSION, SERVING_RUNTIME_KIND, runtime, namespace) is not None
    )


def observe(namespace: str, wanted: References) -> Observed:
    """Look up what the spec references; each Secret is read once, however often it is named."""
    observed = Observed(runtime_found=runtime_exists(namespace, wanted.runtime))
    if not observed.runtime_found:
        return observed  # the first gap is the one reported
    observed.secret_keys = {name: secret_keys(namespace, name) for name in sorted(wanted.secret_names)}
    if wanted.service_account:
        account = wanted.service_account
        observed.service_account_found = (
            or_none(lambda: core().read_namespaced_service_account(account, namespace)) is not None
        )
    return observed


def ready_replicas(namespace: str, deployment: str) -> int | None:
    found = or_none(lambda: apps().read_namespaced_deployment(deployment, namespace))
    if found is None:
        return None
    return (found.status.ready_replicas or 0) if found.status else 0
