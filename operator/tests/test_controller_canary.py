"""A rollout driven through the runner and the RewardModel sync over the fake cluster: what
the gateways are told at each step, what the status and conditions say, and which events are posted."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry

from reward_operator.api import API_VERSION, REWARD_MODEL_KIND, conditions
from reward_operator.api.defaults import apply_defaults
from reward_operator.api.names import GENERATION_ANNOTATION, SHARE_ANNOTATION
from reward_operator.controllers import rewardmodel as controller
from reward_operator.controllers.runner import Runner
from reward_operator.metrics import OperatorMetrics
from reward_operator.render import canary as canary_render
from reward_operator.render import canary_identity
from reward_operator.settings import Settings
from reward_testing.fake_cluster import FakeCluster

LOG = logging.getLogger("test")


def stored_reward_model(cluster: FakeCluster) -> dict:
    """The RewardModel as stored: edited in place by the tests, as a user's apply would."""
    return cluster.stored(REWARD_MODEL_KIND, "rm", "ns")


def kserve_reports(cluster: FakeCluster, candidate_ready: bool | None) -> None:
    """KServe's status on the stable InferenceService: Ready, and its word on the canary predictor."""
    isvc = cluster.stored("InferenceService", "rm", "ns")
    statuses = [] if candidate_ready is None else [{"name": "canary", "ready": candidate_ready}]
    isvc["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "canaryStatuses": statuses}


def nudges(cluster: FakeCluster) -> list[str]:
    """The shares the gateway pods were told by annotation (the kubelet projects the ConfigMap then)."""
    told = [json.loads(annotations) for method, annotations, _ in cluster.calls if method == "nudge_gateways"]
    return [annotations[SHARE_ANNOTATION] for annotations in told if SHARE_ANNOTATION in annotations]


def gateway_share(cluster: FakeCluster) -> str | None:
    """The share in the rollout's ConfigMap, as stored (the kubelet projects it into the gateways' pods)."""
    found = cluster.stored("ConfigMap", "rm-rollout", "ns")
    return None if found is None else found["data"]["percent"]


@pytest.fixture
def cluster() -> FakeCluster:
    body = apply_defaults(
        {
            "apiVersion": API_VERSION,
            "kind": REWARD_MODEL_KIND,
            "metadata": {"name": "rm", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": {
                "model": {"uri": "hf://org/rm"},
                "resources": {"gpus": 1, "cpu": "4", "memory": "16Gi"},
                "canary": {
                    "model": {"uri": "hf://org/rm-v2"},
                    "mode": "split",
                    "steps": [10, 50, 100],
                    "interval": "30s",
                    "minPairs": 10,
                    "minRequests": 10,
                },
            },
        }
    )
    fake = FakeCluster()
    fake.put(body)
    return fake


def figures(cluster: FakeCluster, percent: int, concordant: float, discordant: float, errors: float = 0) -> list[dict]:
    candidate = canary_identity(stored_reward_model(cluster)).candidate
    pairs = {"concordant": concordant, "discordant": discordant, "candidate_tied": 0, "stable_tied": 0}
    models = {"candidate": {"requests": 20.0, "errors": errors}}
    return [{"candidate": candidate, "mode": "split", "percent": percent, "pairs": pairs, "models": models}]


def rewardmodel_runner(cluster: FakeCluster) -> Runner:
    """The RewardModel controller's sync on the shared runner, over the fake cluster."""
    return Runner(
        API_VERSION,
        REWARD_MODEL_KIND,
        lambda obj, logger, child: controller.sync(obj, Settings(), logger, child, cluster=cluster),
        apply_defaults,
        OperatorMetrics([REWARD_MODEL_KIND], CollectorRegistry()),
        cluster,
    )


def status(cluster: FakeCluster) -> dict:
    return stored_reward_model(cluster)["status"]


def conditions_of(cluster: FakeCluster) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(cluster)["conditions"]}


def events(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(kind, reason) for kind, reason, _ in cluster.events]


def test_a_rollout_steps_up_while_the_gates_hold_and_rolls_back_once_when_one_fails(cluster):
    runner = rewardmodel_runner(cluster)

    def reconcile(after_seconds: float = 0) -> None:
        cluster.clock.advance(after_seconds)
        runner.reconcile("ns", "rm", LOG)

    reconcile()
    assert status(cluster)["canary"]["percent"] == 0 and gateway_share(cluster) == "0", "no word from KServe yet"
    kserve_reports(cluster, candidate_ready=True)
    reconcile()
    assert status(cluster)["canary"]["percent"] == 10 and gateway_share(cluster) == "10"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("True", conditions.CANDIDATE_READY)
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("True", conditions.STEP_RUNNING)
    assert ("Normal", conditions.STEP_RUNNING) in events(cluster)

    cluster.figures = figures(cluster, 10, concordant=19, discordant=1)
    reconcile(after_seconds=10)
    assert status(cluster)["canary"]["percent"] == 10, "not before the interval has run"
    before = len(cluster.calls)
    reconcile(after_seconds=25)
    assert status(cluster)["canary"]["percent"] == 50 and gateway_share(cluster) == "50"
    assert status(cluster)["canary"]["agreement"] == 0.95
    stepped = [kind for method, kind, _ in cluster.calls[before:] if method == "apply"]
    assert stepped.count("InferenceService") == 1, "a step renders and applies the InferenceService once"

    # the old replicas' figures (10%) judge nothing at 50%; the new ones disagree
    cluster.figures = figures(cluster, 10, 19, 1) + figures(cluster, 50, concordant=8, discordant=12)
    cluster.events.clear()
    reconcile(after_seconds=5)
    assert status(cluster)["canary"]["percent"] == 0 and gateway_share(cluster) == "0"
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("False", conditions.ROLLED_BACK)
    reconcile(after_seconds=60)
    reconcile(after_seconds=60)
    assert events(cluster) == [("Warning", conditions.ROLLED_BACK)], "exactly one Warning event"
    assert status(cluster)["canary"]["percent"] == 0

    # promotion is a change in Git: spec.canary gone, and its status and conditions with it
    del stored_reward_model(cluster)["spec"]["canary"]
    stored_reward_model(cluster)["metadata"]["generation"] = 2
    reconcile()
    assert "canary" not in status(cluster)
    assert set(conditions_of(cluster)) == {conditions.READY}
    assert gateway_share(cluster) is None


def test_the_candidate_becoming_unready_rolls_back_its_share(cluster):
    runner = rewardmodel_runner(cluster)
    runner.reconcile("ns", "rm", LOG)
    kserve_reports(cluster, candidate_ready=None)
    runner.reconcile("ns", "rm", LOG)
    assert status(cluster)["canary"]["percent"] == 0 and gateway_share(cluster) == "0"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("Unknown", conditions.AWAITING_CANDIDATE)
    kserve_reports(cluster, candidate_ready=True)
    runner.reconcile("ns", "rm", LOG)
    assert gateway_share(cluster) == "10"
    assert nudges(cluster) == ["10"], "the running gateways told at once, not at the kubelet's next sync"
    kserve_reports(cluster, candidate_ready=False)
    runner.reconcile("ns", "rm", LOG)
    assert gateway_share(cluster) == "0"
    assert nudges(cluster) == ["10", "0"], "the rollback told at once"
    runner.reconcile("ns", "rm", LOG)
    assert nudges(cluster) == ["10", "0"], "nothing moved: no pod patched"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("False", conditions.CANDIDATE_NOT_READY)
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("False", conditions.ROLLED_BACK)
    assert [e for e in events(cluster) if e[0] == "Warning"] == [("Warning", conditions.ROLLED_BACK)]


def test_knatives_candidate_is_judged_by_its_own_inference_service_and_pruned_after_promotion(cluster):
    stored_reward_model(cluster)["spec"]["serving"] = {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2}

    def kserve_says(name: str, ready: str) -> None:
        found = [{"type": "Ready", "status": ready}, {"type": "TransformerReady", "status": ready}]
        cluster.stored("InferenceService", name, "ns")["status"] = {"conditions": found}

    runner = rewardmodel_runner(cluster)
    runner.reconcile("ns", "rm", LOG)
    applied = [name for method, kind, name in cluster.calls if (method, kind) == ("apply", "InferenceService")]
    assert applied == ["rm", "rm-canary"]
    kserve_says("rm", "True")
    kserve_says("rm-canary", "Unknown")
    runner.reconcile("ns", "rm", LOG)
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("Unknown", conditions.AWAITING_CANDIDATE)
    assert conditions_of(cluster)[conditions.READY] == ("True", conditions.INFERENCE_SERVICE_READY)
    kserve_says("rm-canary", "True")
    runner.reconcile("ns", "rm", LOG)
    assert status(cluster)["canary"]["percent"] == 10 and gateway_share(cluster) == "10"
    assert ("prune", "InferenceService", "") in cluster.calls, "listed while the rollout is on"
    assert cluster.stored("InferenceService", "rm-canary", "ns") is not None, "and kept"

    del stored_reward_model(cluster)["spec"]["canary"]
    stored_reward_model(cluster)["metadata"]["generation"] = 2
    runner.reconcile("ns", "rm", LOG)
    assert cluster.stored("InferenceService", "rm-canary", "ns") is None, "the candidate goes with spec.canary"
    assert "canary" not in status(cluster)
    cluster.calls.clear()
    runner.reconcile("ns", "rm", LOG)
    pruned = [kind for method, kind, _ in cluster.calls if method == "prune"]
    assert "InferenceService" not in pruned, "no InferenceService list once the rollout is over"


def test_kserves_word_on_the_candidate_moves_the_share_through_the_configmap_alone(cluster):
    """A reconcile for the InferenceService's change (KServe reports the candidate Ready) with the spec as
    last reconciled: the share moves in the rollout's ConfigMap, and the InferenceService, which holds
    our fields, is not applied: no pod template changes, no gateway restarts."""
    runner = rewardmodel_runner(cluster)
    runner.reconcile("ns", "rm", LOG)
    assert gateway_share(cluster) == "0"
    runner.remember("ns", "rm", stored_reward_model(cluster))  # the watch brings our status write back
    kserve_reports(cluster, candidate_ready=True)
    before = len(cluster.calls)
    runner.reconcile("ns", "rm", LOG, changed_child=cluster.stored("InferenceService", "rm", "ns"))
    assert cluster.applied_names[-1:] == [("ConfigMap", "rm-rollout")]
    assert [call for call in cluster.calls[before:] if call[0] == "apply"] == [("apply", "ConfigMap", "rm-rollout")]
    assert gateway_share(cluster) == "10" and status(cluster)["canary"]["percent"] == 10
    assert nudges(cluster) == ["10"]


def test_the_rollouts_configmap_goes_with_spec_canary_and_the_chat_templates_stays(cluster):
    body = stored_reward_model(cluster)
    body["spec"]["model"]["chatTemplate"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    runner = rewardmodel_runner(cluster)
    runner.reconcile("ns", "rm", LOG)
    configmaps = {name for (_, kind, _, name) in cluster.objects if kind == "ConfigMap"}
    assert "rm-rollout" in configmaps and len(configmaps) >= 2, configmaps
    del body["spec"]["canary"]
    body["metadata"]["generation"] = 2
    runner.reconcile("ns", "rm", LOG)
    left = {name for (_, kind, _, name) in cluster.objects if kind == "ConfigMap"}
    assert left == configmaps - {"rm-rollout"}


def test_a_spec_edit_tells_the_gateway_pods_the_new_generation_once(cluster):
    """The identity ConfigMap's generation, like the share, is set on the gateway pods when it moves (the
    kubelet projects it then); a reconcile of an unchanged spec patches no pod."""
    runner = rewardmodel_runner(cluster)

    def generations() -> list[str]:
        told = [json.loads(a) for method, a, _ in cluster.calls if method == "nudge_gateways"]
        return [annotations[GENERATION_ANNOTATION] for annotations in told if GENERATION_ANNOTATION in annotations]

    runner.reconcile("ns", "rm", LOG)
    assert generations() == [], "created: its gateway pods start with the current generation, none to tell"
    runner.reconcile("ns", "rm", LOG)
    assert generations() == [], "nothing moved: no pod patched"
    stored_reward_model(cluster)["spec"]["gateway"]["maxConcurrency"] = 32
    stored_reward_model(cluster)["metadata"]["generation"] = 2
    runner.reconcile("ns", "rm", LOG)
    assert generations() == ["2"]


@pytest.mark.parametrize(("mode", "renders"), [("Standard", [False]), ("Knative", [False, True])])
def test_the_candidate_is_rendered_once_per_reconcile(cluster, monkeypatch, mode, renders):
    """Its identity (decided from) and KServe's spec.canary[] entry (applied) come from one render; Knative
    mode's candidate InferenceService is a whole predictor of its own (``standalone``), rendered apart."""
    rendered = []
    render_predictor = canary_render.candidate_predictor

    def counted(*args, **kwargs):
        rendered.append(kwargs["standalone"])
        return render_predictor(*args, **kwargs)

    monkeypatch.setattr(canary_render, "candidate_predictor", counted)
    body = stored_reward_model(cluster)
    body["spec"]["serving"]["mode"] = mode
    cluster.put(body)
    rewardmodel_runner(cluster).reconcile("ns", "rm", LOG)
    assert rendered == renders
    assert gateway_share(cluster) == "0", "and the rollout's ConfigMap applied"
