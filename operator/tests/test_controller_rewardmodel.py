"""The RewardModel sync with the cluster layer replaced: what each trigger applies, prunes and reads
(the API calls saved at a thousand objects; measured by make bench-operator)."""

from __future__ import annotations

import copy
import logging

import kopf
import pytest
from prometheus_client import CollectorRegistry

from reward_operator.api import REWARD_MODEL_KIND as KIND
from reward_operator.api import conditions, kserve
from reward_operator.api.defaults import apply_defaults
from reward_operator.cluster import events, gather, objects
from reward_operator.controllers import rewardmodel as controller
from reward_operator.metrics import OperatorMetrics
from reward_operator.policy.dependencies import Observed
from reward_operator.policy.scaling import PredictorReplicas
from reward_operator.render import render_reward_model
from reward_operator.settings import Settings
from reward_testing.paths import golden_input

LOG = logging.getLogger("test")
SETTINGS = Settings()


class Calls:
    def __init__(self) -> None:
        self.applied: list[str] = []
        self.pruned = 0
        self.pod_lists: list[tuple[str, str]] = []
        self.pods: list[dict] = []


@pytest.fixture
def calls(monkeypatch) -> Calls:
    record = Calls()

    def apply(manifest, dry_run=False):
        record.applied.append(manifest["kind"])
        return copy.deepcopy(manifest)

    def prune(*args, **kwargs):
        record.pruned += 1
        return []

    monkeypatch.setattr(objects, "apply", apply)
    monkeypatch.setattr(objects, "prune", prune)
    monkeypatch.setattr(gather, "observe", lambda namespace, wanted: Observed(runtime_found=True))
    monkeypatch.setattr(gather, "predictor_replicas", lambda namespace, name: PredictorReplicas(ready=1, wanted=1))
    monkeypatch.setattr(gather, "keda_served", lambda: False)

    def inference_service_pods(namespace, name):
        record.pod_lists.append((namespace, name))
        return copy.deepcopy(record.pods)

    monkeypatch.setattr(gather, "inference_service_pods", inference_service_pods)
    return record


def reward_model(settled: bool) -> dict:
    """A RewardModel with a chat template and allowedClients (three kinds of children), generation 2."""
    body = apply_defaults(golden_input("sequence-allowed-clients"))
    body["spec"]["model"]["chatTemplate"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    body["metadata"]["generation"] = 2
    ready = {"type": conditions.READY, "status": "False", "reason": conditions.AWAITING_KSERVE}
    body["status"] = {"observedGeneration": 2 if settled else 1, "conditions": [ready]}
    return body


def stored_inference_service(body: dict) -> dict:
    (isvc,) = [c for c in render_reward_model(body, SETTINGS.gateway_image) if c["kind"] == "InferenceService"]
    stored = copy.deepcopy(isvc)
    stored["metadata"].update(uid="u1", resourceVersion="7", annotations={**isvc["metadata"].get("annotations", {})})
    stored["spec"]["predictor"]["extraDefaultedByKServe"] = True  # a webhook's default: not ours, not a change
    stored["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    return stored


def test_a_change_of_the_inference_service_alone_applies_nothing_when_it_holds_our_fields(calls):
    body = reward_model(settled=True)
    outcome = controller.sync(body, SETTINGS, LOG, stored_inference_service(body))
    assert calls.applied == [] and calls.pruned == 0
    assert outcome.result == "progressing"


def test_a_field_of_ours_lost_from_the_inference_service_is_applied_again_alone(calls):
    body = reward_model(settled=True)
    edited = stored_inference_service(body)
    edited["spec"]["predictor"]["minReplicas"] = 7  # a hand edit
    controller.sync(body, SETTINGS, LOG, edited)
    assert calls.applied == [kserve.INFERENCE_SERVICE_KIND] and calls.pruned == 0


@pytest.mark.parametrize(
    "why",
    ["the RewardModel's own trigger", "a spec not reconciled yet", "a status waiting on something outside the spec"],
)
def test_every_child_is_applied_and_pruned_otherwise(calls, why):
    body = reward_model(settled=why != "a spec not reconciled yet")
    child = None if why == "the RewardModel's own trigger" else stored_inference_service(body)
    if why == "a status waiting on something outside the spec":
        body["status"]["conditions"][0]["reason"] = conditions.APPLY_FAILED
    controller.sync(body, SETTINGS, LOG, child)
    assert calls.applied == ["ConfigMap", "NetworkPolicy", "NetworkPolicy", kserve.INFERENCE_SERVICE_KIND]
    assert calls.pruned == 1


def test_a_cpu_model_asks_for_the_cpu_runtime_and_its_gap_is_invalid_spec(calls, monkeypatch):
    asked = []

    def observe(namespace, wanted):
        asked.append(wanted.runtime)
        return Observed(runtime_found=wanted.runtime == "vllm-reward")

    monkeypatch.setattr(gather, "observe", observe)
    monkeypatch.setattr(objects, "get", lambda *args, **kwargs: None)
    body = apply_defaults(golden_input("sequence-cpu"))
    outcome = controller.sync(body, SETTINGS, LOG)
    assert asked == ["vllm-reward-cpu"] and calls.applied == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert "named 'vllm-reward-cpu', the default for spec.resources.gpus" in outcome.ready.message


def test_the_runtime_is_read_once_while_it_exists(monkeypatch):
    reads = []

    def get(api_version, kind, name, namespace=None):
        reads.append(kind)
        return {"kind": kind} if (kind, name) == (kserve.CLUSTER_SERVING_RUNTIME_KIND, "vllm-reward") else None

    monkeypatch.setattr(gather, "get", get)
    monkeypatch.setattr(gather, "_runtimes_seen", {})
    assert gather.runtime_exists("ns", "vllm-reward") and gather.runtime_exists("ns", "vllm-reward")
    assert reads == [kserve.CLUSTER_SERVING_RUNTIME_KIND]
    assert not gather.runtime_exists("ns", "missing") and not gather.runtime_exists("ns", "missing")
    assert len(reads) == 1 + 4, "a runtime not found is read again each time (made later, noticed soon)"


class Handled:
    """The RewardModel controller as registered, over the fake cluster: its InferenceService event
    handler, and how many syncs ran."""

    def __init__(self, monkeypatch, body: dict) -> None:
        self.syncs = 0
        sync = controller.sync

        def counted(*args, **kwargs):
            self.syncs += 1
            return sync(*args, **kwargs)

        monkeypatch.setattr(controller, "sync", counted)
        monkeypatch.setattr(objects, "get", lambda *args, **kwargs: copy.deepcopy(body))
        monkeypatch.setattr(objects, "patch_status", lambda *args: {"status": {}})
        monkeypatch.setattr(events, "post_event", lambda *args: None)
        registry = kopf.OperatorRegistry()
        self.runner = controller.register(registry, SETTINGS, OperatorMetrics([KIND], CollectorRegistry()))
        (self.handler,) = [
            h.fn for h in registry._watching.get_all_handlers() if h.id.endswith("inference_service_event")
        ]

    def event(self, kind: str, isvc: dict) -> None:
        metadata = isvc["metadata"]
        self.handler(event={"type": kind}, body=isvc, namespace=metadata["namespace"],
                     labels=metadata["labels"], logger=LOG)  # fmt: skip


def test_an_inference_service_event_with_no_news_costs_no_reconcile(calls, monkeypatch):
    """KServe's finalizer and its status rewrites whose only change is a timestamp were about half of
    all reconciles at a thousand objects (make bench-operator)."""
    body = reward_model(settled=True)
    handled = Handled(monkeypatch, body)
    handled.runner.reconcile(body["metadata"]["namespace"], body["metadata"]["name"], LOG)  # applies the child
    (applied,) = [c for c in render_reward_model(body, SETTINGS.gateway_image) if c["kind"] == "InferenceService"]
    assert handled.syncs == 1

    echo = copy.deepcopy(applied)
    echo["metadata"].update(resourceVersion="8", finalizers=["inferenceservice.finalizers"])
    handled.event("MODIFIED", echo)
    assert handled.syncs == 1, "the watch's copy of our own apply, and KServe's finalizer, are no news"

    reported = copy.deepcopy(echo)
    reported["status"] = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t1"}]}
    handled.event("MODIFIED", reported)
    assert handled.syncs == 2, "KServe's report is"
    reported["status"]["conditions"][0]["lastTransitionTime"] = "t2"
    handled.event("MODIFIED", reported)
    assert handled.syncs == 2

    handled.event("DELETED", reported)
    assert handled.syncs == 3 and calls.applied[-1] == kserve.INFERENCE_SERVICE_KIND, "restored"
    handled.event("ADDED", copy.deepcopy(applied))
    assert handled.syncs == 3, "the restored one's echo is no news either"


def scale_to_zero_model() -> dict:
    body = apply_defaults(golden_input("sequence-standard-scale-to-zero"))
    body["metadata"]["generation"] = 2
    ready = {"type": conditions.READY, "status": "True", "reason": conditions.INFERENCE_SERVICE_READY}
    body["status"] = {"observedGeneration": 2, "conditions": [ready], "replicas": 1}
    return body


def predictor_deployment(replicas: int) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {"name": "skywork-rm-predictor", "namespace": "rlhf", "uid": "d1"},
        "spec": {"replicas": replicas},
        "status": {},
    }


def test_a_predictor_scaled_by_its_autoscaler_refreshes_the_status_alone(calls, monkeypatch):
    """KEDA took the predictor to zero: the InferenceService is read as stored, nothing is applied or
    pruned, and the status says zero replicas, asleep, still Ready."""
    body = scale_to_zero_model()
    stored = stored_inference_service(body)
    stored["status"] = {
        "conditions": [{"type": t, "status": "True"} for t in ("Ready", "PredictorReady", "TransformerReady")]
    }
    reads = []

    def get(api_version, kind, name, namespace=None):
        reads.append((kind, name))
        return stored

    monkeypatch.setattr(objects, "get", get)
    monkeypatch.setattr(gather, "predictor_replicas", lambda namespace, name: PredictorReplicas(ready=0, wanted=0))
    outcome = controller.sync(body, SETTINGS, LOG, predictor_deployment(0))
    assert reads == [(kserve.INFERENCE_SERVICE_KIND, "skywork-rm")]
    assert calls.applied == [] and calls.pruned == 0
    assert outcome.fields["replicas"] == 0
    assert outcome.ready.status == "True"
    (asleep,) = outcome.conditions
    assert (asleep.type, asleep.status, asleep.reason) == (conditions.SCALED_TO_ZERO, "True", conditions.IDLE)
    assert conditions.SCALED_TO_ZERO not in outcome.removed_conditions


def test_scaled_to_zero_goes_with_a_minimum_above_zero(calls):
    body = reward_model(settled=False)  # minReplicas 1
    outcome = controller.sync(body, SETTINGS, LOG)
    assert conditions.SCALED_TO_ZERO in outcome.removed_conditions
    assert all(condition.type != conditions.SCALED_TO_ZERO for condition in outcome.conditions)
    assert outcome.fields["replicas"] == 1


def test_a_predictor_change_before_the_spec_is_reconciled_is_a_full_reconcile(calls):
    body = scale_to_zero_model()
    body["status"]["observedGeneration"] = 1
    controller.sync(body, SETTINGS, LOG, predictor_deployment(0))
    assert calls.applied == ["Service", kserve.INFERENCE_SERVICE_KIND, "ScaledObject"] and calls.pruned > 0


def cached_reward_model(copies: dict) -> tuple[dict, dict]:
    body = apply_defaults(golden_input("sequence-standard-cache"))
    cache = {**render_reward_model(body)[0], "status": {"copies": copies}}
    return body, cache


@pytest.fixture
def cache_calls(calls, monkeypatch):
    """``calls``, with the shared cache as ``ensure`` returns it and no InferenceService stored yet."""
    from reward_operator.cluster import caches

    state = {"cache": None, "opt_out": []}
    monkeypatch.setattr(caches, "ensure", lambda manifest, body: (state["cache"], None))
    monkeypatch.setattr(caches, "opt_out", lambda name, namespace, out: state["opt_out"].append(out))
    monkeypatch.setattr(objects, "get", lambda *args, **kwargs: None)
    groups = {"gpu-h100": [], "gpu-a100": []}
    monkeypatch.setattr(gather, "observe", lambda namespace, wanted: Observed(runtime_found=True, node_groups=groups))
    calls.state = state
    return calls


def test_a_new_inference_service_waits_for_a_filled_cache(cache_calls):
    body, cache = cached_reward_model({"total": 2, "available": 1})
    cache_calls.state["cache"] = cache
    outcome = controller.sync(body, SETTINGS, LOG)
    assert kserve.INFERENCE_SERVICE_KIND not in cache_calls.applied
    assert (outcome.ready.status, outcome.ready.reason) == ("Unknown", conditions.AWAITING_MODEL_CACHE)
    (cached,) = outcome.conditions
    assert (cached.type, cached.status) == (conditions.MODEL_CACHED, "Unknown")
    assert outcome.fields["modelCache"]["kind"] == "LocalModelNamespaceCache"

    cache["status"]["copies"]["available"] = 2
    outcome = controller.sync(body, SETTINGS, LOG)
    assert cache_calls.applied[-1] == kserve.INFERENCE_SERVICE_KIND
    assert outcome.conditions[0].status == "True"


def test_a_serving_inference_service_keeps_serving_opted_out_until_the_cache_is_filled(cache_calls, monkeypatch):
    body, cache = cached_reward_model({"total": 2, "available": 0})
    cache_calls.state["cache"] = cache
    applied = []
    monkeypatch.setattr(objects, "apply", lambda manifest, dry_run=False: applied.append(manifest) or manifest)
    serving = stored_inference_service(body)
    controller.sync(body, SETTINGS, LOG, serving)
    (isvc,) = [m for m in applied if m["kind"] == kserve.INFERENCE_SERVICE_KIND]
    assert isvc["metadata"]["annotations"][kserve.DISABLE_LOCAL_MODEL] == "true"


def test_removing_spec_cache_opts_the_bound_inference_service_out_and_sweeps_the_cache(cache_calls, monkeypatch):
    from reward_operator.cluster import caches

    body, cache = cached_reward_model({"total": 1, "available": 1})
    body["status"] = {"modelCache": {"kind": "LocalModelNamespaceCache", "name": cache["metadata"]["name"],
                                     "namespace": "rlhf"}}  # fmt: skip
    del body["spec"]["cache"]
    bound = stored_inference_service(body)
    bound["metadata"]["labels"][kserve.LOCAL_MODEL_LABEL] = cache["metadata"]["name"]
    swept = []
    monkeypatch.setattr(caches, "sweep_quietly", lambda *args: swept.append(args[:3]))
    monkeypatch.setattr(objects, "get", lambda *args, **kwargs: bound)
    outcome = controller.sync(body, SETTINGS, LOG)
    assert cache_calls.state["opt_out"] == [True]
    assert swept == [("LocalModelNamespaceCache", cache["metadata"]["name"], "rlhf")]
    assert "modelCache" not in outcome.fields
    assert conditions.MODEL_CACHED in outcome.removed_conditions


# ---- Kubernetes' reason from the pods when KServe gives none -----------------------------------------

NOT_AVAILABLE = {
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "MinimumReplicasUnavailable",
         "message": "Deployment does not have minimum availability."},
        {"type": "PredictorReady", "status": "False", "reason": "MinimumReplicasUnavailable",
         "message": "Deployment does not have minimum availability."},
        {"type": "TransformerReady", "status": "True"},
    ]
}  # fmt: skip
ALL_READY = {"conditions": [{"type": t, "status": "True"} for t in ("Ready", "PredictorReady", "TransformerReady")]}


def vllm_pod(state: dict, restarts: int, ready: bool = False) -> dict:
    last = {
        "terminated": {"reason": "Error", "exitCode": 1, "message": "RuntimeError: Engine core initialization failed"}
    }
    return {
        "metadata": {"name": "skywork-rm-predictor-6b-x", "labels": {kserve.COMPONENT_LABEL: "predictor"}},
        "status": {
            "containerStatuses": [
                {"name": "kserve-container", "ready": ready, "restartCount": restarts, "state": state,
                 **({"lastState": last} if restarts else {})}
            ]
        },
    }  # fmt: skip


def test_a_ready_inference_service_costs_no_pod_list(calls):
    body = reward_model(settled=True)
    stored = stored_inference_service(body)
    stored["status"] = ALL_READY
    outcome = controller.sync(body, SETTINGS, LOG, stored)
    assert outcome.ready.status == "True" and calls.pod_lists == []


def test_a_crash_looping_predictor_gives_kubernetes_reason_from_one_pod_list(calls):
    body = reward_model(settled=True)
    stored = stored_inference_service(body)
    stored["status"] = NOT_AVAILABLE
    calls.pods = [vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=3)]
    outcome = controller.sync(body, SETTINGS, LOG, stored)
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    assert calls.pod_lists == [(namespace, name)]
    assert (outcome.ready.status, outcome.ready.reason) == ("False", "CrashLoopBackOff")
    assert "exit code 1: RuntimeError: Engine core initialization failed" in outcome.ready.message


def test_a_crash_loop_posts_one_warning_until_the_pod_is_ready(calls, monkeypatch):
    """Reconciles through a crash loop's states (the re-check timer's): one Warning event for it, the
    status written when the message changes, then one Normal event once vLLM is ready."""
    body = reward_model(settled=True)
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    stored = {"obj": copy.deepcopy(body), "writes": 0}
    posted = []
    isvc_status = {"status": NOT_AVAILABLE}

    def apply(manifest, dry_run=False):
        applied = copy.deepcopy(manifest)
        if manifest["kind"] == kserve.INFERENCE_SERVICE_KIND:
            applied["status"] = copy.deepcopy(isvc_status["status"])
        return applied

    def patch_status(api_version, kind, ns, nm, patch):
        stored["writes"] += 1
        current = stored["obj"].get("status") or {}
        stored["obj"]["status"] = {k: v for k, v in {**current, **patch}.items() if v is not None}
        return copy.deepcopy(stored["obj"])

    monkeypatch.setattr(objects, "apply", apply)
    monkeypatch.setattr(objects, "get", lambda *args, **kwargs: copy.deepcopy(stored["obj"]))
    monkeypatch.setattr(objects, "patch_status", patch_status)
    monkeypatch.setattr(events, "post_event", lambda owner, kind, reason, message: posted.append((kind, reason)))
    runner = controller.register(kopf.OperatorRegistry(), SETTINGS, OperatorMetrics([KIND], CollectorRegistry()))

    cycle = [
        vllm_pod({"terminated": {"reason": "Error", "exitCode": 1}}, restarts=0),  # the first exit
        vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=1),
        vllm_pod({"running": {}}, restarts=1),
        vllm_pod({"terminated": {"reason": "Error", "exitCode": 1}}, restarts=2),
        vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=2),
        vllm_pod({"running": {}}, restarts=2),
    ]
    for found in cycle:
        calls.pods = [found]
        runner.reconcile(namespace, name, LOG)
    assert posted == [("Warning", "CrashLoopBackOff")]
    ready = next(c for c in stored["obj"]["status"]["conditions"] if c["type"] == conditions.READY)
    assert (ready["status"], ready["reason"]) == ("False", "CrashLoopBackOff")
    assert ready["message"].startswith("predictor pod skywork-rm-predictor-6b-x, container kserve-container")

    calls.pods, isvc_status["status"] = [vllm_pod({"running": {}}, restarts=2, ready=True)], ALL_READY
    lists = len(calls.pod_lists)
    runner.reconcile(namespace, name, LOG)
    assert posted == [("Warning", "CrashLoopBackOff"), ("Normal", conditions.INFERENCE_SERVICE_READY)]
    assert len(calls.pod_lists) == lists, "Ready: no pod list"


def test_the_recheck_timer_runs_while_pods_may_fail_unseen():
    """No watch follows pods: a RewardModel not Ready on KServe's MinimumReplicasUnavailable (or on a pod
    failure, to refresh it) is re-checked, a Ready one is not."""
    registry = kopf.OperatorRegistry()
    controller.register(registry, SETTINGS, OperatorMetrics([KIND], CollectorRegistry()))
    (timer,) = [h for h in registry._spawning.get_all_handlers() if h.id.endswith("recheck")]
    body = reward_model(settled=True)
    ready = body["status"]["conditions"][0]
    for reason, status, rechecked in [
        ("MinimumReplicasUnavailable", "False", True),
        ("CrashLoopBackOff", "False", True),
        (conditions.AWAITING_KSERVE, "Unknown", False),
        (conditions.INFERENCE_SERVICE_READY, "True", False),
    ]:
        ready.update(reason=reason, status=status)
        assert timer.when(body=body) is rechecked, reason
