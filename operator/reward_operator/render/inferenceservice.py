"""The InferenceService around a predictor (and, optionally, a transformer).

Only fields the operator owns are rendered: server-side apply then leaves every
field KServe's webhook defaults to KServe, so defaulting never causes an update
loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.duration import interval_seconds
from ..api.keda import scales_through_keda
from ..api.kserve import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    INFERENCE_SERVICE_API_VERSION,
    INFERENCE_SERVICE_KIND,
    KNATIVE_INITIAL_SCALE,
    KNATIVE_SCALE_DOWN_DELAY,
    KNATIVE_WINDOW,
    STORAGE_SECRET_NAME,
)
from ..api.types import CredentialsSpec, ServingSpec
from .pull_secrets import image_pull_secrets


def annotations(serving: ServingSpec) -> dict[str, str]:
    """The deployment mode, always explicit (KServe's shipped default is Knative); in Standard mode who
    scales (KServe's HPA, or KEDA on the gateway's load); in Knative mode Knative's autoscaling settings."""
    rendered = {DEPLOYMENT_MODE: serving["mode"]}
    if serving["mode"] == "Standard":
        # external: KEDA scales the predictor (render/scaler.py), KServe makes no HPA
        rendered[AUTOSCALER_CLASS] = "external" if scales_through_keda(serving) else "hpa"
        return rendered
    if "initialScale" in serving:
        rendered[KNATIVE_INITIAL_SCALE] = str(serving["initialScale"])
    # Knative reads both as Go durations in whole seconds (the schema refuses anything finer); written
    # in seconds, so 1m30s and 90s render alike
    if "scaleDownDelay" in serving:
        rendered[KNATIVE_SCALE_DOWN_DELAY] = go_seconds(serving["scaleDownDelay"])
    if "scalingWindow" in serving:
        rendered[KNATIVE_WINDOW] = go_seconds(serving["scalingWindow"])
    return rendered


def storage_secret(uri: str, credentials: CredentialsSpec) -> dict[str, str]:
    """The annotation that hands spec.credentials.huggingFaceToken to KServe's storage initializer, which
    downloads hf:// models with the token of this Secret (key HF_TOKEN), not from the vLLM container's env;
    none for any other URI or without a token."""
    token = credentials.get("huggingFaceToken")
    if token and uri.startswith("hf://"):
        return {STORAGE_SECRET_NAME: token["name"]}
    return {}


def go_seconds(duration: str) -> str:
    """A Go duration the schema admits, in whole seconds as Knative reads it (1m30s -> 90s)."""
    return f"{round(interval_seconds(duration))}s"


def inference_service(
    metadata: dict[str, Any],
    predictor: dict[str, Any],
    transformer: dict[str, Any] | None = None,
    pull_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """``pull_secrets``: the Secrets every component's pods pull with (KServe takes a pod's fields inline in
    each component's spec); a Standard-mode ``spec.canary[]`` entry inherits the predictor's."""
    pulled = image_pull_secrets(pull_secrets)
    spec: dict[str, Any] = {"predictor": {**predictor, **pulled}}
    if transformer is not None:
        spec["transformer"] = {**transformer, **pulled}
    return {
        "apiVersion": INFERENCE_SERVICE_API_VERSION,
        "kind": INFERENCE_SERVICE_KIND,
        "metadata": metadata,
        "spec": spec,
    }
