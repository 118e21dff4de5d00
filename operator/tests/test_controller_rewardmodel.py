"""The RewardModel sync over the fake cluster: what each trigger applies, prunes and reads
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
from reward_operator.controllers import rewardmodel as controller
from reward_operator.controllers import rewardmodel_triggers
from reward_operator.metrics import OperatorMetrics
from reward_operator.policy.dependencies import Observed
from reward_operator.policy.scaling import PredictorReplicas
from reward_operator.render import render_reward_model
from reward_operator.settings import Settings
from reward_testing.fake_cluster import FakeCluster
from reward_testing.paths import golden_input

LOG = logging.getLogger("test")
SETTINGS = Settings()


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


def sync(cluster: FakeCluster, body: dict, changed_child: dict | None = None):
    return controller.sync(body, SETTINGS, LOG, changed_child, cluster=cluster)


def pod_lists(cluster: FakeCluster) -> list[str]:
    return [name for method, _, name in cluster.calls if method == "inference_service_pods"]


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


def test_a_change_of_the_inference_service_alone_applies_nothing_when_it_holds_our_fields(cluster):
    body = reward_model(settled=True)
    outcome = sync(cluster, body, stored_inference_service(body))
    assert cluster.applied == [] and cluster.pruned == []
    assert outcome.result == "progressing"


def test_a_field_of_ours_lost_from_the_inference_service_is_applied_again_alone(cluster):
    body = reward_model(settled=True)
    edited = stored_inference_service(body)
    edited["spec"]["predictor"]["minReplicas"] = 7  # a hand edit
    sync(cluster, body, edited)
    assert cluster.applied == [kserve.INFERENCE_SERVICE_KIND] and cluster.pruned == []


# What a full reconcile of reward_model() applies, in order: the identity's ConfigMap and the chat template's,
# the allowed clients' NetworkPolicies, the InferenceService.
EVERY_CHILD = ["ConfigMap", "ConfigMap", "NetworkPolicy", "NetworkPolicy", kserve.INFERENCE_SERVICE_KIND]


@pytest.mark.parametrize(
    "why",
    ["the RewardModel's own trigger", "a spec not reconciled yet", "a status waiting on something outside the spec"],
)
def test_every_child_is_applied_and_pruned_otherwise(cluster, why):
    body = reward_model(settled=why != "a spec not reconciled yet")
    child = None if why == "the RewardModel's own trigger" else stored_inference_service(body)
    if why == "a status waiting on something outside the spec":
        body["status"]["conditions"][0]["reason"] = conditions.APPLY_FAILED
    sync(cluster, body, child)
    assert cluster.applied == EVERY_CHILD
    assert "NetworkPolicy" in cluster.pruned


def test_a_new_reward_models_first_reconcile_lists_nothing_to_prune(cluster):
    """Nothing it owns can be unrendered before its spec first changes: an earlier reconcile of the same
    spec that failed before writing the status applied what this one renders."""
    body = reward_model(settled=False)
    body["metadata"]["generation"] = 1
    body["status"] = {}
    sync(cluster, body)
    assert cluster.applied == EVERY_CHILD
    assert cluster.pruned == []
    body["status"] = {"observedGeneration": 1}  # reconciled before (by another version of the operator, maybe)
    sync(cluster, body)
    assert "NetworkPolicy" in cluster.pruned


def test_the_identity_config_map_goes_with_the_gateway_and_the_chat_templates_stays(cluster):
    body = apply_defaults(golden_input("sequence-gateway-auth"))
    sync(cluster, body)
    assert ("ConfigMap", "guarded-rm-identity") in cluster.applied_names
    body["spec"]["gateway"] = {"enabled": False, "chatTemplateMode": "upstream"}
    body["metadata"]["generation"] += 1
    sync(cluster, body)
    assert {key[3] for key in cluster.objects if key[1] == "ConfigMap"} == {"guarded-rm-chat-template"}


def test_the_inference_service_pulls_with_the_operators_secrets(cluster):
    body = apply_defaults(golden_input("sequence-standard"))
    controller.sync(body, Settings(image_pull_secrets=("registry",)), LOG, cluster=cluster)
    spec = cluster.stored(kserve.INFERENCE_SERVICE_KIND, body["metadata"]["name"])["spec"]
    assert spec["predictor"]["imagePullSecrets"] == spec["transformer"]["imagePullSecrets"] == [{"name": "registry"}]


def test_a_cpu_model_asks_for_the_cpu_runtime_and_its_gap_is_invalid_spec(cluster):
    asked = []

    def observe(namespace, wanted):
        asked.append(wanted.runtime)
        return Observed(runtime_found=wanted.runtime == "vllm-reward")

    cluster.observed = observe
    body = apply_defaults(golden_input("sequence-cpu"))
    outcome = sync(cluster, body)
    assert asked == ["vllm-reward-cpu"] and cluster.applied == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert "named 'vllm-reward-cpu', the default for spec.resources.gpus" in outcome.ready.message


def register(cluster: FakeCluster, registry: kopf.OperatorRegistry | None = None):
    registry = registry or kopf.OperatorRegistry()
    return rewardmodel_triggers.register(registry, SETTINGS, OperatorMetrics([KIND], CollectorRegistry()), cluster)


class Handled:
    """The RewardModel controller as registered, over the fake cluster: its InferenceService event
    handler, and how many syncs ran."""

    def __init__(self, monkeypatch, cluster: FakeCluster, body: dict) -> None:
        self.syncs = 0
        counted_sync = controller.sync

        def counted(*args, **kwargs):
            self.syncs += 1
            return counted_sync(*args, **kwargs)

        monkeypatch.setattr(controller, "sync", counted)  # counts the runner's calls; the cluster is the fake
        cluster.put(body)
        registry = kopf.OperatorRegistry()
        self.runner = register(cluster, registry)
        (self.handler,) = [
            h.fn for h in registry._watching.get_all_handlers() if h.id.endswith("inference_service_event")
        ]

    def event(self, kind: str, isvc: dict) -> None:
        metadata = isvc["metadata"]
        self.handler(event={"type": kind}, body=isvc, namespace=metadata["namespace"],
                     labels=metadata["labels"], logger=LOG)  # fmt: skip


def test_an_inference_service_event_with_no_news_costs_no_reconcile(cluster, monkeypatch):
    """KServe's finalizer and its status rewrites whose only change is a timestamp were about half of
    all reconciles at a thousand objects (make bench-operator)."""
    body = reward_model(settled=True)
    handled = Handled(monkeypatch, cluster, body)
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
    assert handled.syncs == 3 and cluster.applied[-1] == kserve.INFERENCE_SERVICE_KIND, "restored"
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


def test_a_predictor_scaled_by_its_autoscaler_refreshes_the_status_alone(cluster):
    """KEDA took the predictor to zero: the InferenceService is read as stored, nothing is applied or
    pruned, and the status says zero replicas, asleep, still Ready."""
    body = scale_to_zero_model()
    stored = stored_inference_service(body)
    stored["status"] = {
        "conditions": [{"type": t, "status": "True"} for t in ("Ready", "PredictorReady", "TransformerReady")]
    }
    cluster.put(stored)
    cluster.default_replicas = PredictorReplicas(ready=0, wanted=0)
    outcome = sync(cluster, body, predictor_deployment(0))
    assert [(kind, name) for method, kind, name in cluster.calls if method == "get"] == [
        (kserve.INFERENCE_SERVICE_KIND, "skywork-rm")
    ]
    assert cluster.applied == [] and cluster.pruned == []
    assert outcome.fields["replicas"] == 0
    assert outcome.ready.status == "True"
    (asleep,) = outcome.conditions
    assert (asleep.type, asleep.status, asleep.reason) == (conditions.SCALED_TO_ZERO, "True", conditions.IDLE)
    assert conditions.SCALED_TO_ZERO not in outcome.removed_conditions


def test_scaled_to_zero_goes_with_a_minimum_above_zero(cluster):
    body = reward_model(settled=False)  # minReplicas 1
    cluster.put(stored_inference_service(body))  # KServe has reported on it
    outcome = sync(cluster, body)
    assert conditions.SCALED_TO_ZERO in outcome.removed_conditions
    assert all(condition.type != conditions.SCALED_TO_ZERO for condition in outcome.conditions)
    assert outcome.fields["replicas"] == 1


def test_an_inference_service_kserve_has_not_reported_on_costs_no_read_of_its_replicas_or_pods(cluster):
    """A RewardModel's first reconcile creates its InferenceService: KServe has made no predictor and no
    pod yet, so neither is listed; the status says so, and KServe's first report brings the next reconcile."""
    body = scale_to_zero_model()
    body["status"] = {}
    outcome = sync(cluster, body)
    listed = [method for method, _, _ in cluster.calls if method in ("predictor_replicas", "inference_service_pods")]
    assert listed == []
    assert "replicas" not in outcome.fields
    assert (outcome.ready.status, outcome.ready.reason) == ("Unknown", conditions.AWAITING_KSERVE)
    (asleep,) = outcome.conditions
    assert (asleep.type, asleep.status) == (conditions.SCALED_TO_ZERO, "Unknown")
    assert asleep.reason == conditions.AWAITING_KSERVE


def test_the_outcome_names_the_inference_service_version_it_decided_from(cluster):
    """The runner reads a later copy of the InferenceService again while it may be older than this."""
    body = reward_model(settled=True)
    stored = stored_inference_service(body)
    outcome = sync(cluster, body, stored)  # holds our fields: decided from the watch's copy as delivered
    assert outcome.decided_from == ((("serving.kserve.io/v1beta1", "InferenceService", "skywork-rm"), "7"),)
    outcome = sync(cluster, reward_model(settled=False))  # a full reconcile: the apply's answer
    applied = cluster.stored(kserve.INFERENCE_SERVICE_KIND, "skywork-rm")
    assert outcome.decided_from == (
        (("serving.kserve.io/v1beta1", "InferenceService", "skywork-rm"), applied["metadata"]["resourceVersion"]),
    )


def test_a_predictor_change_before_the_spec_is_reconciled_is_a_full_reconcile(cluster):
    body = scale_to_zero_model()
    body["status"]["observedGeneration"] = 1
    sync(cluster, body, predictor_deployment(0))
    assert cluster.applied == ["ConfigMap", "Service", kserve.INFERENCE_SERVICE_KIND, "ScaledObject"] and cluster.pruned


def cached_reward_model(copies: dict) -> tuple[dict, dict]:
    body = apply_defaults(golden_input("sequence-standard-cache"))
    cache = {**render_reward_model(body)[0], "status": {"copies": copies}}
    return body, cache


@pytest.fixture
def cache_cluster(cluster):
    """The fake cluster with the cache's node groups and no InferenceService stored yet."""
    groups = {"gpu-h100": [], "gpu-a100": []}
    cluster.observed = Observed(runtime_found=True, node_groups=groups)
    return cluster


def test_a_new_inference_service_waits_for_a_filled_cache(cache_cluster):
    body, cache = cached_reward_model({"total": 2, "available": 1})
    cache_cluster.cache = cache
    outcome = sync(cache_cluster, body)
    assert kserve.INFERENCE_SERVICE_KIND not in cache_cluster.applied
    assert (outcome.ready.status, outcome.ready.reason) == ("Unknown", conditions.AWAITING_MODEL_CACHE)
    (cached,) = outcome.conditions
    assert (cached.type, cached.status) == (conditions.MODEL_CACHED, "Unknown")
    assert outcome.fields["modelCache"]["kind"] == "LocalModelNamespaceCache"

    cache["status"]["copies"]["available"] = 2
    outcome = sync(cache_cluster, body)
    assert cache_cluster.applied[-1] == kserve.INFERENCE_SERVICE_KIND
    assert outcome.conditions[0].status == "True"


def test_a_serving_inference_service_keeps_serving_opted_out_until_the_cache_is_filled(cache_cluster):
    body, cache = cached_reward_model({"total": 2, "available": 0})
    cache_cluster.cache = cache
    serving = stored_inference_service(body)
    sync(cache_cluster, body, serving)
    isvc = cache_cluster.stored(kserve.INFERENCE_SERVICE_KIND, serving["metadata"]["name"])
    assert isvc["metadata"]["annotations"][kserve.DISABLE_LOCAL_MODEL] == "true"


def test_removing_spec_cache_opts_the_bound_inference_service_out_and_sweeps_the_cache(cache_cluster):
    body, cache = cached_reward_model({"total": 1, "available": 1})
    body["status"] = {"modelCache": {"kind": "LocalModelNamespaceCache", "name": cache["metadata"]["name"],
                                     "namespace": "rlhf"}}  # fmt: skip
    del body["spec"]["cache"]
    bound = stored_inference_service(body)
    bound["metadata"]["labels"][kserve.LOCAL_MODEL_LABEL] = cache["metadata"]["name"]
    cache_cluster.put(bound)
    outcome = sync(cache_cluster, body)
    assert cache_cluster.cache_opt_outs == [True]
    assert cache_cluster.swept == [("LocalModelNamespaceCache", cache["metadata"]["name"], "rlhf")]
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


def test_a_ready_inference_service_costs_no_pod_list(cluster):
    body = reward_model(settled=True)
    stored = stored_inference_service(body)
    stored["status"] = ALL_READY
    outcome = sync(cluster, body, stored)
    assert outcome.ready.status == "True" and pod_lists(cluster) == []


def test_a_crash_looping_predictor_gives_kubernetes_reason_from_one_pod_list(cluster):
    body = reward_model(settled=True)
    stored = stored_inference_service(body)
    stored["status"] = NOT_AVAILABLE
    cluster.pods = [vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=3)]
    outcome = sync(cluster, body, stored)
    assert pod_lists(cluster) == [body["metadata"]["name"]]
    assert (outcome.ready.status, outcome.ready.reason) == ("False", "CrashLoopBackOff")
    assert "exit code 1: RuntimeError: Engine core initialization failed" in outcome.ready.message


def test_a_crash_loop_posts_one_warning_until_the_pod_is_ready(cluster):
    """Reconciles through a crash loop's states (the re-check timer's): one Warning event for it, the
    status written when the message changes, then one Normal event once vLLM is ready."""
    body = reward_model(settled=True)
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    cluster.put(body)
    isvc = cluster.put(stored_inference_service(body))
    isvc["status"] = NOT_AVAILABLE
    cluster.put(isvc)
    runner = register(cluster)

    cycle = [
        vllm_pod({"terminated": {"reason": "Error", "exitCode": 1}}, restarts=0),  # the first exit
        vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=1),
        vllm_pod({"running": {}}, restarts=1),
        vllm_pod({"terminated": {"reason": "Error", "exitCode": 1}}, restarts=2),
        vllm_pod({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=2),
        vllm_pod({"running": {}}, restarts=2),
    ]
    for found in cycle:
        cluster.pods = [found]
        runner.reconcile(namespace, name, LOG)
    assert [(kind, reason) for kind, reason, _ in cluster.events] == [("Warning", "CrashLoopBackOff")]
    stored = cluster.stored(KIND, name, namespace)
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == conditions.READY)
    assert (ready["status"], ready["reason"]) == ("False", "CrashLoopBackOff")
    assert ready["message"].startswith("predictor pod skywork-rm-predictor-6b-x, container kserve-container")

    cluster.pods = [vllm_pod({"running": {}}, restarts=2, ready=True)]
    isvc["status"] = ALL_READY
    cluster.put(isvc)
    lists = len(pod_lists(cluster))
    runner.reconcile(namespace, name, LOG)
    assert [(kind, reason) for kind, reason, _ in cluster.events] == [
        ("Warning", "CrashLoopBackOff"),
        ("Normal", conditions.INFERENCE_SERVICE_READY),
    ]
    assert len(pod_lists(cluster)) == lists, "Ready: no pod list"


def test_the_recheck_timer_runs_while_pods_may_fail_unseen():
    """No watch follows pods: a RewardModel not Ready on KServe's MinimumReplicasUnavailable (or on a pod
    failure, to refresh it) is re-checked, a Ready one is not."""
    registry = kopf.OperatorRegistry()
    register(FakeCluster(), registry)
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
