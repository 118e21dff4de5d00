"""Kubernetes' reason for the InferenceService's pods when KServe gives none (policy/pods.py and its use in
policy/readiness.py): each reason, the precedence, no flapping through a crash loop, KServe's own reason kept."""

from __future__ import annotations

import pytest

from reward_operator.api import conditions
from reward_operator.policy import status
from reward_operator.policy.pods import TAIL_CHARS, reason_kept, tail, worst_container
from reward_operator.policy.readiness import pod_components, ready_from_inference_service, ready_with_pods

ISVC = "rm"
BOTH = ("predictor", "transformer")
TRACEBACK = (
    "Traceback (most recent call last):\n  File vllm/engine.py\nRuntimeError: Engine core initialization failed\n"
)


def container(name="kserve-container", ready=False, restarts=0, state=None, last=None) -> dict:
    found = {"name": name, "ready": ready, "restartCount": restarts, "state": state or {}}
    if last is not None:
        found["lastState"] = {"terminated": last}
    return found


def waiting(reason, message=None) -> dict:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


RUNNING = {"running": {"startedAt": "2026-12-01T22:00:00Z"}}
ERROR_1 = {"reason": "Error", "exitCode": 1, "message": TRACEBACK}
OOM = {"reason": "OOMKilled", "exitCode": 137}


def pod(*containers, component="predictor", name=None, init=(), deleting=False) -> dict:
    name = name or f"{ISVC}-{component}-7d9f-abcde"
    metadata = {"name": name, "labels": {"serving.kserve.io/inferenceservice": ISVC, "component": component}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T22:00:00Z"
    return {
        "metadata": metadata,
        "status": {"containerStatuses": list(containers), "initContainerStatuses": list(init)},
    }


REASONS = {
    "crash loop, waiting": (container(restarts=3, state=waiting("CrashLoopBackOff"), last=ERROR_1), "CrashLoopBackOff"),
    "crash loop, running again (not ready)": (container(restarts=3, state=RUNNING, last=ERROR_1), "CrashLoopBackOff"),
    "crash loop, just terminated": (
        container(restarts=3, state={"terminated": ERROR_1}, last=ERROR_1),
        "CrashLoopBackOff",
    ),
    "memory limit, waiting": (container(restarts=2, state=waiting("CrashLoopBackOff"), last=OOM), "OOMKilled"),
    "memory limit, running again": (container(restarts=2, state=RUNNING, last=OOM), "OOMKilled"),
    "memory limit, first kill": (container(state={"terminated": OOM}), "OOMKilled"),
    "first exit, restarted at once (one transition)": (container(state={"terminated": ERROR_1}), "CrashLoopBackOff"),
    "exited 0, not restarted yet": (
        container(state={"terminated": {"reason": "Completed", "exitCode": 0}}),
        "CrashLoopBackOff",
    ),
    "image pull back-off": (
        container(state=waiting("ImagePullBackOff", 'Back-off pulling image "vllm:nope"')),
        "ImagePullBackOff",
    ),
    "image pull failing": (container(state=waiting("ErrImagePull", "manifest unknown")), "ErrImagePull"),
    "missing Secret key": (
        container(state=waiting("CreateContainerConfigError", "couldn't find key HF_TOKEN in Secret rlhf/hf")),
        "CreateContainerConfigError",
    ),
}


@pytest.mark.parametrize("case", REASONS, ids=list(REASONS))
def test_kubernetes_reason_verbatim(case):
    found, reason = REASONS[case]
    failure = worst_container([pod(found)], ISVC, BOTH)
    assert failure is not None and failure.reason == reason
    assert reason in conditions.POD_FAILURE_REASONS and reason in conditions.DEGRADED_REASONS


NOT_FAILURES = {
    "ready": pod(container(ready=True, restarts=4, state=RUNNING, last=ERROR_1)),
    "creating": pod(container(state=waiting("ContainerCreating"))),
    "initializing": pod(container(state=waiting("PodInitializing"))),
    "starting (running, not ready, never terminated)": pod(container(state=RUNNING)),
    "init container done": pod(
        container(state=waiting("PodInitializing")),
        init=[container("storage-initializer", state={"terminated": {"reason": "Completed", "exitCode": 0}})],
    ),
    "a pod being deleted": pod(container(restarts=3, state=waiting("CrashLoopBackOff"), last=ERROR_1), deleting=True),
    "an evicted pod": {
        **pod(container(state={"terminated": ERROR_1})),
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "containerStatuses": [container(state={"terminated": ERROR_1})],
        },
    },
    "a rollout's candidate": pod(
        container(restarts=3, state=waiting("CrashLoopBackOff"), last=ERROR_1), name=f"{ISVC}-canary-predictor-5c-x1"
    ),
    "a component KServe reports Ready": pod(
        container(restarts=3, state=waiting("CrashLoopBackOff"), last=ERROR_1), component="transformer"
    ),
}


@pytest.mark.parametrize("case", NOT_FAILURES, ids=list(NOT_FAILURES))
def test_no_failure(case):
    assert worst_container([NOT_FAILURES[case]], ISVC, ("predictor",)) is None


def test_an_exit_in_a_pod_that_does_not_restart_it_keeps_its_own_reason():
    never = {**pod(container(state={"terminated": ERROR_1})), "spec": {"restartPolicy": "Never"}}
    failure = worst_container([never], ISVC, BOTH)
    assert failure is not None and failure.reason == "Error" and "exit code 1" in failure.message()
    done = {
        **pod(container(state={"terminated": {"reason": "Completed", "exitCode": 0}})),
        "spec": {"restartPolicy": "Never"},
    }
    assert worst_container([done], ISVC, BOTH) is None


def test_the_message_names_component_pod_container_restarts_termination_and_tail():
    found = container(restarts=4, state=waiting("CrashLoopBackOff", "back-off 40s restarting"), last=ERROR_1)
    failure = worst_container([pod(found)], ISVC, BOTH)
    assert failure is not None
    assert failure.message() == (
        "predictor pod rm-predictor-7d9f-abcde, container kserve-container: CrashLoopBackOff, 4 restarts; "
        "last terminated: Error, exit code 1: RuntimeError: Engine core initialization failed"
    )


def test_an_init_container_is_named_as_one():
    init = container("storage-initializer", restarts=1, state=waiting("CrashLoopBackOff"), last=ERROR_1)
    failure = worst_container([pod(container(state=waiting("PodInitializing")), init=[init])], ISVC, BOTH)
    assert failure is not None and failure.reason == "CrashLoopBackOff"
    assert "init container storage-initializer" in failure.message() and "1 restart;" in failure.message()


def test_the_tail_is_the_last_line_cut_short():
    assert tail("first\nsecond\n\n") == "second"
    assert tail(None) == tail("") == ""
    cut = tail("x" * 1000)
    assert len(cut) == TAIL_CHARS and cut.endswith("...")


def test_precedence_oom_then_crash_then_image_then_config_and_predictor_first():
    config = pod(container(state=waiting("CreateContainerConfigError")), name="rm-predictor-a")
    image = pod(container(state=waiting("ImagePullBackOff")), name="rm-predictor-b")
    crash_gateway = pod(
        container(restarts=1, state=waiting("CrashLoopBackOff"), last=ERROR_1), component="transformer", name="rm-t"
    )
    crash = pod(container(restarts=1, state=waiting("CrashLoopBackOff"), last=ERROR_1), name="rm-predictor-z")
    oom = pod(container(restarts=1, state=RUNNING, last=OOM), component="transformer", name="rm-transformer-c")
    pods = [config, image, crash_gateway, crash, oom]
    order = []
    while (failure := worst_container(pods, ISVC, BOTH)) is not None:
        order.append((failure.reason, failure.pod))
        pods = [p for p in pods if p["metadata"]["name"] != failure.pod]
    assert order == [
        ("OOMKilled", "rm-transformer-c"),
        ("CrashLoopBackOff", "rm-predictor-z"),  # a tie goes to the predictor
        ("CrashLoopBackOff", "rm-t"),
        ("ImagePullBackOff", "rm-predictor-b"),
        ("CreateContainerConfigError", "rm-predictor-a"),
    ]


def test_the_image_pulls_two_reasons_do_not_flap():
    assert reason_kept("ErrImagePull", "ImagePullBackOff") == "ImagePullBackOff"
    assert reason_kept("ImagePullBackOff", "ErrImagePull") == "ErrImagePull"
    assert reason_kept("ImagePullBackOff", "MinimumReplicasUnavailable") == "ImagePullBackOff"
    assert reason_kept("CrashLoopBackOff", "ErrImagePull") == "CrashLoopBackOff"


# ---- with KServe's report (policy/readiness.py) --------------------------------------------------


def isvc(*conds, model_status=None) -> dict:
    body = {
        "metadata": {"name": ISVC},
        "status": {"conditions": [dict(zip(("type", "status", "reason", "message"), c, strict=False)) for c in conds]},
    }
    if model_status:
        body["status"]["modelStatus"] = model_status
    return body


MIN_AVAILABILITY = (
    ("Ready", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
    ("PredictorReady", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
    ("TransformerReady", "True", None, None),
)
CRASHING = pod(container(restarts=5, state=waiting("CrashLoopBackOff"), last=ERROR_1))


def decide(found: dict, pods: list[dict], gateway_enabled=True, previous=None):
    """What the controller does: KServe's report, then the pods only when it leaves Ready unexplained."""
    ready = ready_from_inference_service(found, gateway_enabled)
    components = pod_components(found, ready, gateway_enabled)
    if not components:
        return ready, components
    return ready_with_pods(ready, found, pods, components, previous), components


def test_minimum_availability_becomes_kubernetes_reason():
    ready, components = decide(isvc(*MIN_AVAILABILITY), [CRASHING])
    assert components == ("predictor",), "the transformer KServe reports Ready is not looked at"
    assert (ready.status, ready.reason) == ("False", "CrashLoopBackOff")
    assert ready.message.startswith("predictor pod rm-predictor-7d9f-abcde, container kserve-container")
    assert status.event_type(ready) == "Warning"


def test_without_a_pod_failure_kserves_word_stands():
    ready, _ = decide(isvc(*MIN_AVAILABILITY), [pod(container(state=RUNNING))])
    assert (ready.status, ready.reason) == ("False", "MinimumReplicasUnavailable")


def test_kserves_own_failure_reason_is_kept_and_no_pod_is_read():
    failed = {
        "transitionStatus": "BlockedByFailedLoad",
        "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "engine died", "exitCode": 1},
    }
    ready, components = decide(isvc(*MIN_AVAILABILITY, model_status=failed), [CRASHING])
    assert components == () and ready.reason == "ModelLoadFailed"
    ready, components = decide(isvc(("Ready", "False", "RevisionFailed", "Container failed")), [CRASHING])
    assert components == () and ready.reason == "RevisionFailed", "Knative's *Failed explains it too"


@pytest.mark.parametrize(
    ("found", "gateway_enabled", "components"),
    [
        (None, True, ()),
        (isvc(), True, ()),  # KServe has not reported on it: it has made no pod yet
        (isvc(("Ready", "True"), ("PredictorReady", "True"), ("TransformerReady", "True")), True, ()),
        (
            isvc(("Ready", "True"), ("PredictorReady", "True"), ("TransformerReady", "False", "X", "y")),
            True,
            ("transformer",),
        ),
        (isvc(("Ready", "Unknown")), True, BOTH),  # KServe reports no component yet
        (isvc(("Ready", "Unknown")), False, ("predictor",)),
        (isvc(*MIN_AVAILABILITY), True, ("predictor",)),
        (
            isvc(
                ("Ready", "False", "IngressNotReady", "no route"),
                ("PredictorReady", "True"),
                ("TransformerReady", "True"),
            ),
            True,
            (),
        ),
    ],
)
def test_which_pods_are_read(found, gateway_enabled, components):
    ready = ready_from_inference_service(found, gateway_enabled)
    assert pod_components(found, ready, gateway_enabled) == components


def test_a_crash_loop_keeps_its_reason_until_the_pod_is_ready():
    """The reconciles of a crash loop see each of its states: the reason never goes back to
    MinimumReplicasUnavailable (one event), and Ready=True follows once the container is ready."""
    cycle = [
        container(state=RUNNING),  # starting: KServe's word
        container(state={"terminated": ERROR_1}),  # first death
        container(restarts=1, state=waiting("CrashLoopBackOff"), last=ERROR_1),
        container(restarts=1, state=RUNNING, last=ERROR_1),
        container(restarts=2, state={"terminated": ERROR_1}, last=ERROR_1),
        container(restarts=2, state=waiting("CrashLoopBackOff"), last=ERROR_1),
        container(restarts=3, state=RUNNING, last=ERROR_1),
    ]
    reasons, previous = [], None
    for found in cycle:
        ready, _ = decide(isvc(*MIN_AVAILABILITY), [pod(found)], previous=previous)
        reasons.append(ready.reason)
        previous = ready.reason
    assert reasons == ["MinimumReplicasUnavailable"] + ["CrashLoopBackOff"] * 6
    healthy = isvc(("Ready", "True"), ("PredictorReady", "True"), ("TransformerReady", "True"))
    ready, components = decide(healthy, [pod(container(ready=True, restarts=3, state=RUNNING, last=ERROR_1))])
    assert (ready.status, ready.reason, components) == ("True", conditions.INFERENCE_SERVICE_READY, ())


def test_an_image_that_cannot_be_pulled_keeps_the_first_reason():
    reasons, previous = [], None
    for reason in ("ErrImagePull", "ImagePullBackOff", "ErrImagePull", "ImagePullBackOff"):
        ready, _ = decide(isvc(*MIN_AVAILABILITY), [pod(container(state=waiting(reason)))], previous=previous)
        reasons.append(ready.reason)
        previous = ready.reason
    assert reasons == ["ErrImagePull"] * 4


def test_pod_failures_are_rechecked_and_so_is_a_not_ready_kserve_reason():
    def body(state, reason):
        ready = {"type": "Ready", "status": state, "reason": reason}
        return {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "conditions": [ready]}}

    for reason in conditions.POD_FAILURE_REASONS:
        assert not status.settled(body("False", reason)) and status.recheck(body("False", reason))
    assert status.settled(body("False", "MinimumReplicasUnavailable")), "an InferenceService event stays cheap"
    assert status.recheck(body("False", "MinimumReplicasUnavailable")), "but its pods may start failing"
    assert status.recheck(body("Unknown", conditions.GATEWAY_NOT_READY))
    for reason in (conditions.AWAITING_KSERVE, "ModelLoadFailed", "RevisionFailed", conditions.AWAITING_MODEL_CACHE):
        assert not status.recheck(body("False", reason)), reason
    assert not status.recheck(body("True", conditions.INFERENCE_SERVICE_READY))
