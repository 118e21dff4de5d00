"""Ready from KServe's report: its diagnosis passed on, the gateway counted, the in-cluster URL published."""

from __future__ import annotations

import pytest

from reward_operator.api import conditions
from reward_operator.policy.readiness import inference_service_fields, ready_from_inference_service


def isvc(*conditions_, model_status=None, **status) -> dict:
    body = {"metadata": {"name": "rm"}, "status": dict(status)}
    if conditions_:
        body["status"]["conditions"] = [
            {"type": t, "status": s, **({"reason": r} if r else {}), **({"message": m} if m else {})}
            for t, s, r, m in conditions_
        ]
    if model_status is not None:
        body["status"]["modelStatus"] = model_status
    return body


READY = ("Ready", "True", None, None)
PREDICTOR_READY = ("PredictorReady", "True", None, None)
GATEWAY_READY = ("TransformerReady", "True", None, None)

CASES = {
    "not created yet": (None, True, ("False", conditions.AWAITING_KSERVE, "not created yet")),
    "KServe has not reported": (isvc(), True, ("Unknown", conditions.AWAITING_KSERVE, "waiting for KServe")),
    "Ready with the gateway": (
        isvc(READY, PREDICTOR_READY, GATEWAY_READY),
        True,
        ("True", conditions.INFERENCE_SERVICE_READY, "is Ready"),
    ),
    "Ready without a gateway": (
        isvc(READY, PREDICTOR_READY),
        False,
        ("True", conditions.INFERENCE_SERVICE_READY, "is Ready"),
    ),
    "KServe Ready, gateway not yet": (
        isvc(READY, PREDICTOR_READY),
        True,
        ("Unknown", conditions.GATEWAY_NOT_READY, "the reward gateway (transformer) is not yet"),
    ),
    "KServe Ready, gateway failing": (
        isvc(READY, ("TransformerReady", "False", "CrashLoopBackOff", "back-off restarting")),
        True,
        ("False", "CrashLoopBackOff", "TransformerReady: back-off restarting"),
    ),
    "runtime refused by KServe": (
        isvc(
            ("Ready", "Unknown", None, None),
            model_status={
                "transitionStatus": "InvalidSpec",
                "lastFailureInfo": {
                    "reason": "NoSupportingRuntime",
                    "message": "Specified runtime does not support specified protocol version",
                },
            },
        ),
        True,
        ("False", "NoSupportingRuntime", "Specified runtime does not support specified protocol version"),
    ),
    "model failed to load": (
        isvc(
            ("Ready", "False", None, None),
            model_status={
                "transitionStatus": "BlockedByFailedLoad",
                "lastFailureInfo": {
                    "reason": "ModelLoadFailed",
                    "message": "OOMKilled",
                    "exitCode": 137,
                    "location": "rm-predictor-abc",
                },
            },
        ),
        True,
        ("False", "ModelLoadFailed", "OOMKilled (in rm-predictor-abc, exit code 137)"),
    ),
    "a component says why": (
        isvc(
            ("Ready", "False", None, None), ("PredictorReady", "False", "ReconcileFailed", "must not set nodeSelector")
        ),
        True,
        ("False", "ReconcileFailed", "PredictorReady: must not set nodeSelector"),
    ),
    "nobody says why": (
        isvc(("Ready", "False", None, None), ("PredictorReady", "False", None, None)),
        True,
        ("False", conditions.INFERENCE_SERVICE_NOT_READY, "is not Ready"),
    ),
    "loading, in progress": (
        isvc(("Ready", "Unknown", None, None), model_status={"transitionStatus": "InProgress"}),
        True,
        ("Unknown", conditions.INFERENCE_SERVICE_NOT_READY, "is not Ready"),
    ),
}


@pytest.mark.parametrize(("observed", "gateway", "expected"), CASES.values(), ids=CASES.keys())
def test_ready(observed, gateway, expected):
    ready = ready_from_inference_service(observed, gateway)
    status, reason, message = expected
    assert (ready.type, ready.status, ready.reason) == ("Ready", status, reason)
    assert message in ready.message


def test_the_url_is_the_in_cluster_address_and_the_ingress_host_is_external():
    fields = inference_service_fields(
        isvc(url="http://rm-rlhf.example.com", address={"url": "http://rm-transformer.rlhf.svc.cluster.local"})
    )
    assert fields == {
        "inferenceService": "rm",
        "url": "http://rm-transformer.rlhf.svc.cluster.local",
        "externalURL": "http://rm-rlhf.example.com",
    }


def test_no_urls_before_kserve_writes_them():
    assert inference_service_fields(isvc()) == {"inferenceService": "rm"}
    assert inference_service_fields(None) == {}
