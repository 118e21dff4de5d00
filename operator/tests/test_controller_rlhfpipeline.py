"""The RLHFPipeline sync and handlers with the cluster layer replaced: what each spec applies, prunes and
reports (create, change one role, a missing RewardModel, a refused child, a RewardModel's change)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging

import kopf
import pytest
import yaml
from prometheus_client import CollectorRegistry

from reward_operator.api import conditions, kserve
from reward_operator.api.defaults import apply_defaults
from reward_operator.api.schema import RLHF_PIPELINE
from reward_operator.controllers import build_registry
from reward_operator.controllers import rlhfpipeline as controller
from reward_operator.render import render_rlhf_pipeline
from reward_operator.settings import Settings
from reward_testing.fake_cluster import FakeCluster
from reward_testing.paths import GOLDEN

LOG = logging.getLogger("test")
SETTINGS = Settings()
READY_ISVC = [
    {"type": "Ready", "status": "True"},
    {"type": "PredictorReady", "status": "True"},
    {"type": "TransformerReady", "status": "True"},
]


def pipeline(case: str = "full") -> dict:
    body = apply_defaults(yaml.safe_load((GOLDEN / "pipeline" / "inputs" / f"{case}.yaml").read_text()), RLHF_PIPELINE)
    body["metadata"]["generation"] = 1
    return body


def reward_model(name: str, ready: str = "True", gateway: bool = True) -> dict:
    return {
        "apiVersion": "serving.rlhf.dev/v1alpha1",
        "kind": "RewardModel",
        "metadata": {"name": name, "namespace": "rlhf"},
        "spec": {"gateway": {"enabled": gateway}},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "m"}]},
    }


class KServeReports(FakeCluster):
    """The fake cluster, where KServe reports each InferenceService (and the graph) Ready as it is applied,
    while ``ready``."""

    ready = True

    def apply(self, manifest: dict) -> dict:
        stored = super().apply(manifest)
        if self.ready:
            found = READY_ISVC if manifest["kind"] == "InferenceService" else READY_ISVC[:1]
            stored["status"] = self.stored(manifest["kind"], manifest["metadata"]["name"])["status"] = {
                "conditions": copy.deepcopy(found)
            }
        return stored


@pytest.fixture
def cluster() -> KServeReports:
    fake = KServeReports(runtimes={"vllm-generate", "vllm-reward"}, secrets={"hf-token": {"HF_TOKEN"}})
    fake.put(reward_model("helpful"))
    fake.put(reward_model("harmless"))
    return fake


def sync(cluster: FakeCluster, body: dict):
    return controller.sync(body, SETTINGS, LOG, cluster=cluster)


def conditions_of(outcome) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in outcome.conditions}


def test_a_pipeline_whose_roles_are_all_ready_is_ready_at_its_graphs_url(cluster):
    outcome = sync(cluster, pipeline())
    assert cluster.applied_names == [
        ("InferenceService", "ppo-full-actor"),
        ("InferenceService", "ppo-full-reference"),
        ("InferenceService", "ppo-full-critic"),
        ("InferenceGraph", "ppo-full"),
    ]
    assert cluster.kept["InferenceService"] == {"ppo-full-actor", "ppo-full-reference", "ppo-full-critic"}
    assert (outcome.ready.status, outcome.ready.reason) == ("True", conditions.ROLES_READY)
    assert conditions_of(outcome) == {
        conditions.ACTOR_READY: ("True", conditions.INFERENCE_SERVICE_READY),
        conditions.REFERENCE_READY: ("True", conditions.INFERENCE_SERVICE_READY),
        conditions.CRITIC_READY: ("True", conditions.INFERENCE_SERVICE_READY),
        conditions.REWARDS_READY: ("True", conditions.REWARD_MODELS_READY),
        conditions.GRAPH_READY: ("True", conditions.GRAPH_SERVING),
    }
    assert outcome.fields == {
        "url": "http://ppo-full.rlhf.svc.cluster.local",
        "inferenceGraph": "ppo-full",
        "inferenceServices": {
            "actor": "ppo-full-actor",
            "reference": "ppo-full-reference",
            "critic": "ppo-full-critic",
        },
    }
    assert outcome.result == "ready"


def test_the_roles_pull_with_the_operators_secrets(cluster):
    controller.sync(pipeline("minimal"), Settings(image_pull_secrets=("registry",)), LOG, cluster=cluster)
    applied = [cluster.stored(kind, name) for kind, name in cluster.applied_names if kind == "InferenceService"]
    assert applied
    for isvc in applied:
        for component in ("predictor", "transformer"):
            assert isvc["spec"][component]["imagePullSecrets"] == [{"name": "registry"}], component


def test_a_missing_reward_model_holds_the_graph_with_a_clear_condition(cluster):
    cluster.delete("RewardModel", "harmless", "rlhf")
    outcome = sync(cluster, pipeline())
    assert ("InferenceGraph", "ppo-full") not in cluster.applied_names
    assert len(cluster.applied_names) == 3, "the roles are served meanwhile"
    found = conditions_of(outcome)
    assert found[conditions.REWARDS_READY] == ("False", conditions.REWARD_MODEL_NOT_FOUND)
    assert found[conditions.GRAPH_READY] == ("Unknown", conditions.AWAITING_REWARD_MODELS)
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.REWARD_MODEL_NOT_FOUND)
    assert outcome.ready.message.startswith("rewards: spec.rewards[1]: RewardModel harmless not found")
    assert "url" not in outcome.fields


def test_a_graph_applied_before_a_reward_model_went_keeps_its_url(cluster):
    body = pipeline()
    body["status"] = {"url": "http://ppo-full.rlhf.svc.cluster.local", "inferenceGraph": "ppo-full"}
    cluster.delete("RewardModel", "helpful", "rlhf")
    outcome = sync(cluster, body)
    assert outcome.fields["url"] == "http://ppo-full.rlhf.svc.cluster.local"


def test_removing_the_critic_deletes_its_inference_service_and_condition(cluster):
    body = pipeline()
    del body["spec"]["critic"]
    outcome = sync(cluster, body)
    assert cluster.kept["InferenceService"] == {"ppo-full-actor", "ppo-full-reference"}
    assert conditions.CRITIC_READY not in conditions_of(outcome)
    assert outcome.removed_conditions == (conditions.CRITIC_READY,)
    assert "critic" not in outcome.fields["inferenceServices"]


def test_roles_kserve_has_not_reported_on_keep_ready_unknown(cluster):
    cluster.ready = False
    outcome = sync(cluster, pipeline("minimal"))
    assert (outcome.ready.status, outcome.ready.reason) == ("Unknown", conditions.AWAITING_KSERVE)
    assert outcome.ready.message.startswith("actor: ")
    assert outcome.result == "progressing"


def test_a_missing_runtime_is_invalid_spec_and_applies_nothing(cluster):
    cluster.runtimes = {"vllm-generate"}
    outcome = sync(cluster, pipeline())
    assert cluster.applied_names == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert outcome.ready.message.startswith(
        "spec.critic.runtime: no ClusterServingRuntime (or ServingRuntime in rlhf) named 'vllm-reward'"
    )
    assert outcome.result == "invalid"


def test_a_missing_cpu_runtime_is_named_with_the_field_that_picked_it(cluster):
    outcome = sync(cluster, pipeline("cpu"))  # only the GPU runtimes installed
    assert cluster.applied_names == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert outcome.ready.message.startswith(
        "spec.actor.runtime: no ClusterServingRuntime (or ServingRuntime in rlhf) named 'vllm-generate-cpu', "
        "the default for spec.actor.resources.gpus"
    )
    cluster.runtimes |= {"vllm-generate-cpu", "vllm-reward-cpu"}
    assert sync(cluster, pipeline("cpu")).ready.reason != conditions.INVALID_SPEC


def test_a_missing_secret_a_role_names_is_invalid_spec(cluster):
    """The reference takes the actor's credentials: both name the Secret, the actor is reported first."""
    cluster.secrets = {}
    outcome = sync(cluster, pipeline())
    assert cluster.applied_names == []
    assert outcome.ready.reason == conditions.INVALID_SPEC
    assert (
        outcome.ready.message
        == "spec.actor.credentials.huggingFaceToken: Secret 'hf-token' not found in namespace rlhf"
    )


def test_a_name_too_long_for_kserves_hosts_is_invalid_spec(cluster):
    body = pipeline("minimal")
    body["metadata"]["namespace"] = "a-namespace-with-a-rather-long-name-here"
    outcome = sync(cluster, body)
    assert outcome.ready.reason == conditions.INVALID_SPEC and "ppo-reference-transformer" in outcome.ready.message


def test_a_refused_child_is_apply_failed(cluster):
    cluster.refused["InferenceGraph"] = "admission webhook denied the request"
    outcome = sync(cluster, pipeline())
    assert (outcome.ready.reason, outcome.result) == (conditions.APPLY_FAILED, "apply_failed")
    assert outcome.ready.message == "InferenceGraph ppo-full rejected: admission webhook denied the request"


def test_a_reward_models_change_reconciles_only_the_pipelines_naming_it(cluster):
    """Through the registered handlers: the status is written (patched) for the pipeline that names the
    RewardModel once it exists, and no other pipeline is touched."""
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry(), cluster)
    handlers = {h.id.rpartition(".")[2]: h.fn for h in registry._watching.get_all_handlers()}

    naming, other = pipeline(), pipeline("minimal")
    other["spec"]["rewards"] = [{"name": "unrelated", "weight": 1, "normalise": "none"}]
    for body in (naming, other):
        cluster.put(body)
        asyncio.run(
            handlers["rlhf_pipeline_event"](
                event={"type": "ADDED"}, body=body, namespace="rlhf", name=body["metadata"]["name"]
            )
        )
    asyncio.run(handlers["reward_model_of_a_pipeline_event"](namespace="rlhf", name="harmless", logger=LOG))
    assert [name for method, _, name in cluster.calls if method == "patch_status"] == ["ppo-full"]
    stored = cluster.stored("RLHFPipeline", "ppo-full", "rlhf")
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_the_handlers_watch_only_this_kinds_children():
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry())
    handlers = {h.id.rpartition(".")[2]: h for h in registry._watching.get_all_handlers()}
    for name in ("pipeline_inference_service_event", "pipeline_inference_graph_event"):
        assert handlers[name].labels == {
            "app.kubernetes.io/managed-by": "reward-operator",
            "serving.rlhf.dev/rlhfpipeline": kopf.PRESENT,
        }
    assert kserve.INFERENCE_GRAPH_PLURAL in str(handlers["pipeline_inference_graph_event"].selector)


def test_a_childs_echo_of_our_apply_runs_no_reconcile_and_a_deletion_restores_it(cluster):
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry(), cluster)
    handlers = {h.id.rpartition(".")[2]: h.fn for h in registry._watching.get_all_handlers()}
    body = pipeline()
    cluster.put(body)
    asyncio.run(handlers["rlhf_pipeline_event"](event={"type": "ADDED"}, body=body, namespace="rlhf", name="ppo-full"))
    asyncio.run(handlers["reward_model_of_a_pipeline_event"](namespace="rlhf", name="helpful", logger=LOG))
    applied = len(cluster.applied_names)
    assert applied == 4
    actor = copy.deepcopy(render_rlhf_pipeline(body)[0])
    actor["status"] = {"conditions": READY_ISVC}  # as the fake apply answered it
    labels = {"serving.rlhf.dev/rlhfpipeline": "ppo-full"}

    def isvc_event(kind: str, child: dict) -> None:
        handlers["pipeline_inference_service_event"](
            event={"type": kind}, body=child, namespace="rlhf", labels=labels, logger=LOG
        )

    isvc_event("MODIFIED", actor)
    assert len(cluster.applied_names) == applied, "the echo of our own apply"
    isvc_event("DELETED", actor)
    assert len(cluster.applied_names) == applied + 4, "a deleted child is restored by a full reconcile"
    changed = copy.deepcopy(actor)
    changed["status"]["conditions"][0] = {"type": "Ready", "status": "False"}
    isvc_event("MODIFIED", changed)
    assert len(cluster.applied_names) == applied + 8, "KServe's news on a role is reconciled"


def test_the_handlers_on_every_reward_models_events_run_on_the_event_loop():
    # a sync handler waits for a thread of kopf's pool behind the queued reconciles: on events of every
    # RewardModel, that held kopf's own patches past its consistency wait at N = 1000 (make bench-operator)
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry())
    on_reward_models = [
        h for h in registry._watching.get_all_handlers() if "rewardmodels" in str(h.selector) and h.labels is None
    ]
    assert {h.id.rpartition(".")[2] for h in on_reward_models} == {
        "reward_model_event",
        "reward_model_of_a_pipeline_event",
    }
    assert all(inspect.iscoroutinefunction(h.fn) for h in on_reward_models)


def test_what_the_actor_and_the_reference_name_alike_is_read_once(cluster):
    sync(cluster, pipeline())
    # the reference inherits the actor's runtime and token: one look-up for both, and one for the critic
    looked_up = [runtime for method, _, runtime in cluster.calls if method == "lookup"]
    assert sorted(looked_up) == ["vllm-generate", "vllm-reward"]
