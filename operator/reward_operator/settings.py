"""Operator settings, built once from the environment by the `run` command (the chart sets them)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .api.names import DEFAULT_GATEWAY_IMAGE


class SettingsError(ValueError):
    """A variable holds a value the operator cannot use; the message names it."""


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from error
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, got {value}")
    return value


# A Secret's name: a DNS subdomain (RFC 1123).
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def _names(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of Secret names (blanks around a comma are ignored); none when unset."""
    names = tuple(item.strip() for item in environ.get(name, "").split(",") if item.strip())
    for item in names:
        if len(item) > 253 or not _SECRET_NAME.fullmatch(item):
            raise SettingsError(f"{name} must list Secret names separated by commas, got {item!r}")
    return names


@dataclass(frozen=True)
class Settings:
    # Seconds between level-based reconciles of every object: a backstop for
    # missed watch events. Long, because it wakes for every object: at 60 s and
    # a thousand objects the backstop alone kept a core busy (make bench-operator).
    drift_interval: int = 3600
    # Seconds between re-checks of the objects that are not settled (status behind
    # the spec, or Ready=False for InvalidSpec or ApplyFailed): how soon a missing
    # Secret or runtime, once made, is noticed. Settled objects have no such timer.
    recheck_interval: int = 30
    # Prometheus metrics port; 0 turns the endpoint off.
    metrics_port: int = 8080
    # Image of the reward gateway (the operator's own image carries it).
    gateway_image: str = DEFAULT_GATEWAY_IMAGE
    # Secrets, by name, that every pod the operator makes pulls its images with (the chart's
    # imagePullSecrets); each must exist in the pod's namespace, where the kubelet reads it.
    image_pull_secrets: tuple[str, ...] = ()
    # Seconds between looks at a rollout (spec.canary): the gateways' figures, the gates, the next
    # step. Only RewardModels with spec.canary have this timer.
    canary_interval: int = 30
    # The operator's own namespace, admitted to the gateways' pods for their rollout figures where
    # NetworkPolicies guard them; unknown (None) outside a cluster.
    operator_namespace: str | None = None
    # Where KEDA's operator runs: admitted to the gateways' scaler port (scale to zero in Standard
    # mode) where NetworkPolicies guard them.
    keda_namespace: str = "keda"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        return cls(
            drift_interval=_int(environ, "REWARD_OPERATOR_DRIFT_INTERVAL", cls.drift_interval, minimum=1),
            recheck_interval=_int(environ, "REWARD_OPERATOR_RECHECK_INTERVAL", cls.recheck_interval, minimum=1),
            metrics_port=_int(environ, "REWARD_OPERATOR_METRICS_PORT", cls.metrics_port),
            gateway_image=environ.get("REWARD_OPERATOR_GATEWAY_IMAGE") or cls.gateway_image,
            image_pull_secrets=_names(environ, "REWARD_OPERATOR_IMAGE_PULL_SECRETS"),
            canary_interval=_int(environ, "REWARD_OPERATOR_CANARY_INTERVAL", cls.canary_interval, minimum=1),
            operator_namespace=environ.get("REWARD_OPERATOR_NAMESPACE") or _service_account_namespace(),
            keda_namespace=environ.get("REWARD_OPERATOR_KEDA_NAMESPACE") or cls.keda_namespace,
        )


# Where a pod finds its own namespace (the service account's mount).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _service_account_namespace() -> str | None:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None
