"""The InferenceService around a predictor (and, optionally, a transformer).

Only fields the operator owns are rendered: server-side apply then leaves every
field KServe's webhook defaults to KServe, so defaulting never causes an update
loop.
"""

from __future__ import annotations

from typing import Any

from ..api.kserve import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    INFERENCE_SERVICE_API_VERSION,
    INFERENCE_SERVICE_KIND,
)
from ..api.types import ServingSpec


def annotations(serving: ServingSpec) -> dict[str, str]:
    """The deployment mode, always explicit (KServe's shipped default is Knative), and in Standard mode
    who scales: KServe's HPA, or KEDA for scale to zero."""
    rendered = {DEPLOYMENT_MODE: serving["mode"]}
    if serving["mode"] == "Standard":
        # external: KEDA scales the predictor (render/scaler.py), KServe makes no HPA
        rendered[AUTOSCALER_CLASS] = "external" if serving["minReplicas"] == 0 else "hpa"
    return rendered


def inference_service(
    metadata: dict[str, Any], predictor: dict[str, Any], transformer: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"predictor": predictor}
    if transformer is not None:
        spec["transformer"] = transformer
    return {
        "apiVersion": INFERENCE_SERVICE_API_VERSION,
        "kind": INFERENCE_SERVICE_KIND,
        "metadata": metadata,
        "spec": spec,
    }
