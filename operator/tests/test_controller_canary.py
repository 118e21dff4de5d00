"""A rollout driven through the runner and the RewardModel sync, with the cluster layer replaced: what
the gateways are told at each step, what the status and conditions say, and which events are posted."""

from __future__ import annotations

import copy
import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from reward_operator.api import API_VERSION, REWARD_MODEL_KIND, conditions
from reward_operator.api.defaults import apply_defaults
from reward_operator.cluster import gateways, gather, objects
from reward_operator.controllers import rewardmodel as controller
from reward_operator.controllers import runner as runner_module
from reward_operator.controllers.runner import Runner
from reward_operator.metrics import OperatorMetrics
from reward_operator.policy.dependencies import Observed
from reward_operator.policy.scaling import PredictorReplicas
from reward_operator.render import canary_identity
from reward_operator.settings import Settings

LOG = logging.getLogger("test")
START = datetime(2026, 12, 1, 3, 0, 0, tzinfo=UTC)


class Cluster:
    """The stored RewardModel; what was applied; KServe's word on the candidate; the gateways' figures."""

    def __init__(self, body: dict):
        self.obj = body
        self.applied: list[dict] = []
        self.events: list[tuple[str, str]] = []
        self.candidate_ready: bool | None = True
        self.figures: list[dict] = []
        self.clock = START

    def apply(self, manifest, dry_run=False):
        self.applied.append(copy.deepcopy(manifest))
        stored = copy.deepcopy(manifest)
        if manifest["kind"] == "InferenceService":
            statuses = [] if self.candidate_ready is None else [{"name": "canary", "ready": self.candidate_ready}]
            stored["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "canaryStatuses": statuses}
        return stored

    def patch_status(self, api_version, kind, namespace, name, patch):
        status = {**self.obj.get("status", {}), **patch}
        self.obj["status"] = {k: v for k, v in status.items() if v is not None}
        return self.obj

    def gateway_share(self) -> str | None:
        """REWARD_GATEWAY_CANARY_PERCENT in the InferenceService applied last."""
        (isvc, *_) = [m for m in reversed(self.applied) if m["kind"] == "InferenceService"]
        (container,) = isvc["spec"]["transformer"]["containers"]
        found = {e["name"]: e.get("value") for e in container["env"]}
        return found.get("REWARD_GATEWAY_CANARY_PERCENT")


@pytest.fixture
def cluster(monkeypatch) -> Cluster:
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
    fake = Cluster(body)
    monkeypatch.setattr(objects, "get", lambda *args, **kwargs: fake.obj)
    monkeypatch.setattr(objects, "apply", fake.apply)
    monkeypatch.setattr(objects, "prune", lambda *args, **kwargs: [])
    monkeypatch.setattr(objects, "patch_status", fake.patch_status)
    monkeypatch.setattr(runner_module.events, "post_event", lambda owner, t, reason, m: fake.events.append((t, reason)))
    monkeypatch.setattr(gather, "observe", lambda namespace, wanted: Observed(runtime_found=True))
    monkeypatch.setattr(gather, "predictor_replicas", lambda namespace, name: PredictorReplicas(ready=1, wanted=1))
    monkeypatch.setattr(gather, "keda_served", lambda: False)
    monkeypatch.setattr(gather, "inference_service_pods", lambda namespace, name: [])
    monkeypatch.setattr(gateways, "rollout_figures", lambda namespace, name: fake.figures)
    monkeypatch.setattr(controller, "now", lambda: fake.clock)
    return fake


def figures(cluster: Cluster, percent: int, concordant: float, discordant: float, errors: float = 0) -> list[dict]:
    candidate, _ = canary_identity(cluster.obj)
    pairs = {"concordant": concordant, "discordant": discordant, "candidate_tied": 0, "stable_tied": 0}
    models = {"candidate": {"requests": 20.0, "errors": errors}}
    return [{"candidate": candidate, "mode": "split", "percent": percent, "pairs": pairs, "models": models}]


def rewardmodel_runner() -> Runner:
    """The RewardModel controller's sync on the shared runner, over the fake cluster."""
    return Runner(
        API_VERSION,
        REWARD_MODEL_KIND,
        lambda obj, logger, child: controller.sync(obj, Settings(), logger, child),
        apply_defaults,
        OperatorMetrics([REWARD_MODEL_KIND], CollectorRegistry()),
    )


def conditions_of(cluster: Cluster) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in cluster.obj["status"]["conditions"]}


def test_a_rollout_steps_up_while_the_gates_hold_and_rolls_back_once_when_one_fails(cluster):
    runner = rewardmodel_runner()

    def reconcile(after_seconds: float = 0) -> None:
        cluster.clock += timedelta(seconds=after_seconds)
        runner.reconcile("ns", "rm", LOG)

    reconcile()
    assert cluster.obj["status"]["canary"]["percent"] == 10 and cluster.gateway_share() == "10"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("True", conditions.CANDIDATE_READY)
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("True", conditions.STEP_RUNNING)
    assert ("Normal", conditions.STEP_RUNNING) in cluster.events

    cluster.figures = figures(cluster, 10, concordant=19, discordant=1)
    reconcile(after_seconds=10)
    assert cluster.obj["status"]["canary"]["percent"] == 10, "not before the interval has run"
    reconcile(after_seconds=25)
    assert cluster.obj["status"]["canary"]["percent"] == 50 and cluster.gateway_share() == "50"
    assert cluster.obj["status"]["canary"]["agreement"] == 0.95

    # the old replicas' figures (10%) judge nothing at 50%; the new ones disagree
    cluster.figures = figures(cluster, 10, 19, 1) + figures(cluster, 50, concordant=8, discordant=12)
    cluster.events.clear()
    reconcile(after_seconds=5)
    assert cluster.obj["status"]["canary"]["percent"] == 0 and cluster.gateway_share() == "0"
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("False", conditions.ROLLED_BACK)
    reconcile(after_seconds=60)
    reconcile(after_seconds=60)
    assert cluster.events == [("Warning", conditions.ROLLED_BACK)], "exactly one Warning event"
    assert cluster.obj["status"]["canary"]["percent"] == 0

    # promotion is a change in Git: spec.canary gone, and its status and conditions with it
    del cluster.obj["spec"]["canary"]
    cluster.obj["metadata"]["generation"] = 2
    reconcile()
    assert "canary" not in cluster.obj["status"]
    assert set(conditions_of(cluster)) == {conditions.READY}
    assert cluster.gateway_share() is None


def test_the_candidate_becoming_unready_rolls_back_its_share(cluster):
    runner = rewardmodel_runner()
    cluster.candidate_ready = None
    runner.reconcile("ns", "rm", LOG)
    assert cluster.obj["status"]["canary"]["percent"] == 0 and cluster.gateway_share() == "0"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("Unknown", conditions.AWAITING_CANDIDATE)
    cluster.candidate_ready = True
    runner.reconcile("ns", "rm", LOG)
    assert cluster.gateway_share() == "10"
    cluster.candidate_ready = False
    runner.reconcile("ns", "rm", LOG)
    assert cluster.gateway_share() == "0"
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("False", conditions.CANDIDATE_NOT_READY)
    assert conditions_of(cluster)[conditions.CANARY_PROGRESSING] == ("False", conditions.ROLLED_BACK)
    assert [e for e in cluster.events if e[0] == "Warning"] == [("Warning", conditions.ROLLED_BACK)]


def test_knatives_candidate_is_judged_by_its_own_inference_service_and_pruned_after_promotion(cluster, monkeypatch):
    pruned: list[tuple[str, set[str]]] = []
    monkeypatch.setattr(
        objects, "prune", lambda api_version, kind, ns, labels, uid, keep: pruned.append((kind, set(keep))) or []
    )
    cluster.obj["spec"]["serving"] = {"mode": "Knative", "minReplicas": 0, "maxReplicas": 2}
    candidate_ready = {"value": "Unknown"}

    def apply(manifest, dry_run=False):
        cluster.applied.append(copy.deepcopy(manifest))
        stored = copy.deepcopy(manifest)
        if manifest["kind"] == "InferenceService":
            status = "True" if manifest["metadata"]["name"] == "rm" else candidate_ready["value"]
            found = [{"type": "Ready", "status": status}, {"type": "TransformerReady", "status": status}]
            stored["status"] = {"conditions": found}
        return stored

    monkeypatch.setattr(objects, "apply", apply)
    runner = rewardmodel_runner()
    runner.reconcile("ns", "rm", LOG)
    applied = [m["metadata"]["name"] for m in cluster.applied if m["kind"] == "InferenceService"]
    assert applied == ["rm", "rm-canary"]
    assert conditions_of(cluster)[conditions.CANARY_READY] == ("Unknown", conditions.AWAITING_CANDIDATE)
    assert conditions_of(cluster)[conditions.READY] == ("True", conditions.INFERENCE_SERVICE_READY)
    candidate_ready["value"] = "True"
    runner.reconcile("ns", "rm", LOG)
    assert cluster.obj["status"]["canary"]["percent"] == 10 and cluster.gateway_share() == "10"
    assert ("InferenceService", {"rm", "rm-canary"}) in pruned, "kept while the rollout is on"

    pruned.clear()
    del cluster.obj["spec"]["canary"]
    cluster.obj["metadata"]["generation"] = 2
    runner.reconcile("ns", "rm", LOG)
    assert ("InferenceService", {"rm"}) in pruned, "the candidate's InferenceService goes with spec.canary"
    assert "canary" not in cluster.obj["status"]
    pruned.clear()
    runner.reconcile("ns", "rm", LOG)
    assert [kind for kind, _ in pruned] == ["NetworkPolicy"], "no InferenceService list once the rollout is over"
