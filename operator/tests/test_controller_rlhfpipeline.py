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
from reward_operator.cluster import Refused, events, gather, objects
from reward_operator.controllers import build_registry
from reward_operator.controllers import rlhfpipeline as controller
from reward_operator.settings import Settings
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
        "metadata": {"name": name, "namespace": "rlhf"},
        "spec": {"gateway": {"enabled": gateway}},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "m"}]},
    }


class Cluster:
    """What the fake cluster holds and what the sync did to it."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, str]] = []
        self.kept: set[str] | None = None
        self.reward_models: dict[str, dict] = {"helpful": reward_model("helpful"), "harmless": reward_model("harmless")}
        self.runtimes = {"vllm-generate", "vllm-reward"}
        self.secrets: dict[str, set[str]] = {"hf-token": {"HF_TOKEN"}}
        self.ready = True
        self.refuse: str | None = None


@pytest.fixture
def cluster(monkeypatch) -> Cluster:
    state = Cluster()

    def apply(manifest, dry_run=False):
        if manifest["metadata"]["name"] == state.refuse:
            raise Refused(422, "Invalid", "admission webhook denied the request")
        state.applied.append((manifest["kind"], manifest["metadata"]["name"]))
        stored = copy.deepcopy(manifest)
        if state.ready:
            stored["status"] = {"conditions": READY_ISVC if manifest["kind"] == "InferenceService" else READY_ISVC[:1]}
        return stored

    def prune(api_version, kind, namespace, labels, owner_uid, keep):
        state.kept = set(keep)
        return []

    monkeypatch.setattr(objects, "apply", apply)
    monkeypatch.setattr(objects, "prune", prune)
    monkeypatch.setattr(gather, "runtime_exists", lambda namespace, runtime: runtime in state.runtimes)
    monkeypatch.setattr(gather, "secret_keys", lambda namespace, name: state.secrets.get(name))
    monkeypatch.setattr(
        gather, "reward_models", lambda namespace, names: {n: state.reward_models.get(n) for n in names}
    )
    return state


def conditions_of(outcome) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in outcome.conditions}


def test_a_pipeline_whose_roles_are_all_ready_is_ready_at_its_graphs_url(cluster):
    outcome = controller.sync(pipeline(), SETTINGS, LOG)
    assert cluster.applied == [
        ("InferenceService", "ppo-full-actor"),
        ("InferenceService", "ppo-full-reference"),
        ("InferenceService", "ppo-full-critic"),
        ("InferenceGraph", "ppo-full"),
    ]
    assert cluster.kept == {"ppo-full-actor", "ppo-full-reference", "ppo-full-critic"}
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


def test_a_missing_reward_model_holds_the_graph_with_a_clear_condition(cluster):
    del cluster.reward_models["harmless"]
    outcome = controller.sync(pipeline(), SETTINGS, LOG)
    assert ("InferenceGraph", "ppo-full") not in cluster.applied
    assert len(cluster.applied) == 3, "the roles are served meanwhile"
    found = conditions_of(outcome)
    assert found[conditions.REWARDS_READY] == ("False", conditions.REWARD_MODEL_NOT_FOUND)
    assert found[conditions.GRAPH_READY] == ("Unknown", conditions.AWAITING_REWARD_MODELS)
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.REWARD_MODEL_NOT_FOUND)
    assert outcome.ready.message.startswith("rewards: spec.rewards[1]: RewardModel harmless not found")
    assert "url" not in outcome.fields


def test_a_graph_applied_before_a_reward_model_went_keeps_its_url(cluster):
    body = pipeline()
    body["status"] = {"url": "http://ppo-full.rlhf.svc.cluster.local", "inferenceGraph": "ppo-full"}
    del cluster.reward_models["helpful"]
    outcome = controller.sync(body, SETTINGS, LOG)
    assert outcome.fields["url"] == "http://ppo-full.rlhf.svc.cluster.local"


def test_removing_the_critic_deletes_its_inference_service_and_condition(cluster):
    body = pipeline()
    del body["spec"]["critic"]
    outcome = controller.sync(body, SETTINGS, LOG)
    assert cluster.kept == {"ppo-full-actor", "ppo-full-reference"}
    assert conditions.CRITIC_READY not in conditions_of(outcome)
    assert outcome.removed_conditions == (conditions.CRITIC_READY,)
    assert "critic" not in outcome.fields["inferenceServices"]


def test_roles_kserve_has_not_reported_on_keep_ready_unknown(cluster):
    cluster.ready = False
    outcome = controller.sync(pipeline("minimal"), SETTINGS, LOG)
    assert (outcome.ready.status, outcome.ready.reason) == ("Unknown", conditions.AWAITING_KSERVE)
    assert outcome.ready.message.startswith("actor: ")
    assert outcome.result == "progressing"


def test_a_missing_runtime_is_invalid_spec_and_applies_nothing(cluster):
    cluster.runtimes = {"vllm-generate"}
    outcome = controller.sync(pipeline(), SETTINGS, LOG)
    assert cluster.applied == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert outcome.ready.message.startswith(
        "spec.critic.runtime: no ClusterServingRuntime (or ServingRuntime in rlhf) named 'vllm-reward'"
    )
    assert outcome.result == "invalid"


def test_a_missing_cpu_runtime_is_named_with_the_field_that_picked_it(cluster):
    outcome = controller.sync(pipeline("cpu"), SETTINGS, LOG)  # only the GPU runtimes installed
    assert cluster.applied == []
    assert (outcome.ready.status, outcome.ready.reason) == ("False", conditions.INVALID_SPEC)
    assert outcome.ready.message.startswith(
        "spec.actor.runtime: no ClusterServingRuntime (or ServingRuntime in rlhf) named 'vllm-generate-cpu', "
        "the default for spec.actor.resources.gpus"
    )
    cluster.runtimes |= {"vllm-generate-cpu", "vllm-reward-cpu"}
    assert controller.sync(pipeline("cpu"), SETTINGS, LOG).ready.reason != conditions.INVALID_SPEC


def test_a_missing_secret_a_role_names_is_invalid_spec(cluster):
    """The reference takes the actor's credentials: both name the Secret, the actor is reported first."""
    cluster.secrets = {}
    outcome = controller.sync(pipeline(), SETTINGS, LOG)
    assert cluster.applied == []
    assert outcome.ready.reason == conditions.INVALID_SPEC
    assert (
        outcome.ready.message
        == "spec.actor.credentials.huggingFaceToken: Secret 'hf-token' not found in namespace rlhf"
    )


def test_a_name_too_long_for_kserves_hosts_is_invalid_spec(cluster):
    body = pipeline("minimal")
    body["metadata"]["namespace"] = "a-namespace-with-a-rather-long-name-here"
    outcome = controller.sync(body, SETTINGS, LOG)
    assert outcome.ready.reason == conditions.INVALID_SPEC and "ppo-reference-transformer" in outcome.ready.message


def test_a_refused_child_is_apply_failed(cluster):
    cluster.refuse = "ppo-full"
    outcome = controller.sync(pipeline(), SETTINGS, LOG)
    assert (outcome.ready.reason, outcome.result) == (conditions.APPLY_FAILED, "apply_failed")
    assert outcome.ready.message == "InferenceGraph ppo-full rejected: admission webhook denied the request"


def test_a_reward_models_change_reconciles_only_the_pipelines_naming_it(cluster, monkeypatch):
    """Through the registered handlers: the status is written (patched) for the pipeline that names the
    RewardModel once it exists, and no other pipeline is touched."""
    patched: dict[str, dict] = {}
    monkeypatch.setattr(
        objects,
        "patch_status",
        lambda av, kind, ns, name, status: patched.setdefault(name, status) and {"status": status},
    )
    monkeypatch.setattr(events, "post_event", lambda *args: None)
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry())
    handlers = {h.id.rpartition(".")[2]: h.fn for h in registry._watching.get_all_handlers()}

    naming, other = pipeline(), pipeline("minimal")
    other["spec"]["rewards"] = [{"name": "unrelated", "weight": 1, "normalise": "none"}]
    for body in (naming, other):
        asyncio.run(
            handlers["rlhf_pipeline_event"](
                event={"type": "ADDED"}, body=body, namespace="rlhf", name=body["metadata"]["name"]
            )
        )
    asyncio.run(handlers["reward_model_of_a_pipeline_event"](namespace="rlhf", name="harmless", logger=LOG))
    assert list(patched) == ["ppo-full"]
    ready = next(c for c in patched["ppo-full"]["conditions"] if c["type"] == "Ready")
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


def test_a_childs_echo_of_our_apply_runs_no_reconcile_and_a_deletion_restores_it(cluster, monkeypatch):
    monkeypatch.setattr(objects, "patch_status", lambda av, kind, ns, name, status: {"status": status})
    monkeypatch.setattr(events, "post_event", lambda *args: None)
    registry = build_registry(Settings(metrics_port=0), CollectorRegistry())
    handlers = {h.id.rpartition(".")[2]: h.fn for h in registry._watching.get_all_handlers()}
    body = pipeline()
    asyncio.run(handlers["rlhf_pipeline_event"](event={"type": "ADDED"}, body=body, namespace="rlhf", name="ppo-full"))
    asyncio.run(handlers["reward_model_of_a_pipeline_event"](namespace="rlhf", name="helpful", logger=LOG))
    applied = len(cluster.applied)
    assert applied == 4
    actor = copy.deepcopy(controller.render_rlhf_pipeline(body)[0])
    actor["status"] = {"conditions": READY_ISVC}  # as the fake apply answered it
    labels = {"serving.rlhf.dev/rlhfpipeline": "ppo-full"}

    def isvc_event(kind: str, child: dict) -> None:
        handlers["pipeline_inference_service_event"](
            event={"type": kind}, body=child, namespace="rlhf", labels=labels, logger=LOG
        )

    isvc_event("MODIFIED", actor)
    assert len(cluster.applied) == applied, "the echo of our own apply"
    isvc_event("DELETED", actor)
    assert len(cluster.applied) == applied + 4, "a deleted child is restored by a full reconcile"
    changed = copy.deepcopy(actor)
    changed["status"]["conditions"][0] = {"type": "Ready", "status": "False"}
    isvc_event("MODIFIED", changed)
    assert len(cluster.applied) == applied + 8, "KServe's news on a role is reconciled"


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


def test_what_the_actor_and_the_reference_name_alike_is_read_once(cluster, monkeypatch):
    reads: list[tuple[str, str]] = []
    runtime_exists, secret_keys = gather.runtime_exists, gather.secret_keys
    monkeypatch.setattr(
        gather, "runtime_exists", lambda ns, name: reads.append(("runtime", name)) or runtime_exists(ns, name)
    )
    monkeypatch.setattr(gather, "secret_keys", lambda ns, name: reads.append(("secret", name)) or secret_keys(ns, name))
    controller.sync(pipeline(), SETTINGS, LOG)
    # the reference inherits the actor's runtime and token: one read of each, and the critic's runtime
    assert sorted(reads) == sorted(set(reads)), reads
    assert ("runtime", "vllm-reward") in reads and ("runtime", "vllm-generate") in reads
