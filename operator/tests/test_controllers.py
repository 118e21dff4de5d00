"""The operator's kopf registry, built from the run's settings."""

from __future__ import annotations

import asyncio
import inspect
import logging

import kopf
from kopf._core.intents.causes import Activity  # kopf's internals: the registry has no public query API
from prometheus_client import CollectorRegistry

from reward_operator import controllers
from reward_operator.controllers import build_registry
from reward_operator.settings import Settings


def activity_handlers(registry: kopf.OperatorRegistry, activity: Activity) -> list:
    return list(registry._activities.get_handlers(activity=activity))


def test_the_registry_logs_in_starts_up_and_answers_probes():
    registry = build_registry(Settings(), CollectorRegistry())
    # without a login handler kopf stops at start: "Ran out of valid credentials"
    assert activity_handlers(registry, Activity.AUTHENTICATION)
    assert activity_handlers(registry, Activity.STARTUP)
    assert activity_handlers(registry, Activity.PROBE)


def test_the_timers_follow_the_settings():
    registry = build_registry(Settings(drift_interval=17, recheck_interval=5, canary_interval=3), CollectorRegistry())
    timers = {h.id: h for h in registry._spawning.get_all_handlers() if getattr(h, "interval", None) is not None}
    assert {name: (timer.interval, timer.initial_delay) for name, timer in timers.items()} == {
        "drift_backstop": (17, 17),
        "recheck": (5, 5),
        "canary": (3, 3),
        "pipeline_drift_backstop": (17, 17),
        "pipeline_recheck": (5, 5),
        "batch_drift_backstop": (17, 17),
        "batch_recheck": (5, 5),
    }
    assert timers["drift_backstop"].when is None, "the backstop runs for every object"
    assert timers["pipeline_drift_backstop"].when is None
    assert timers["recheck"].when is not None, "the re-check runs only for objects that are not settled"
    with_canary = timers["canary"].when
    assert with_canary(spec={"model": {}, "canary": {}}) and not with_canary(spec={"model": {}}), (
        "the rollout's timer runs only for objects with spec.canary"
    )


def test_the_defaults_keep_a_thousand_settled_objects_quiet():
    # a timer per object every 60 s kept a core busy at 1000 objects (make bench-operator)
    assert Settings().drift_interval >= 3600


def test_kopf_logs_in_with_a_bounded_number_of_connections(monkeypatch):
    """kopf's own session opens a connection per request in flight; ours waits beyond a bound instead."""
    login = activity_handlers(build_registry(Settings(), CollectorRegistry()), Activity.AUTHENTICATION)[0]
    info = kopf.ConnectionInfo(server="https://api.example:6443", token="secret", default_namespace="team-a")
    monkeypatch.setattr(kopf, "login_via_client", lambda **_: info)

    async def log_in() -> tuple[kopf.AiohttpSession, int]:
        context = await login.fn(logger=None, settings=kopf.OperatorSettings())
        limit = context.aiohttp_session.connector.limit
        await context.aiohttp_session.close()
        return context, limit

    context, limit = asyncio.run(log_in())
    assert context.server == info.server and context.default_namespace == "team-a"
    assert limit == controllers.KOPF_CONNECTIONS
    assert context.aiohttp_session.headers["Authorization"] == "Bearer secret"


def test_the_watchs_copy_is_taken_on_the_event_loop_not_behind_queued_reconciles():
    """A sync event handler waits for one of kopf's threads behind every queued reconcile; at 1000
    objects that delayed kopf's own bookkeeping past its consistency wait (make bench-operator)."""
    registry = build_registry(Settings(), CollectorRegistry())
    handlers = {h.id.rpartition(".")[2]: h.fn for h in registry._watching.get_all_handlers()}
    assert inspect.iscoroutinefunction(handlers["reward_model_event"])


def test_a_predictor_deployment_refreshes_its_owner_only_when_its_replicas_change(monkeypatch):
    """KEDA, KServe's HPA and Knative scale the predictor without touching the RewardModel: the watch on its
    Deployments reconciles the owner when the replicas wanted or ready move, and at no other event."""
    from reward_operator.controllers.runner import Runner

    reconciled = []
    monkeypatch.setattr(
        Runner, "reconcile", lambda self, namespace, name, logger, changed_child=None: reconciled.append(
            (namespace, name, changed_child["kind"], changed_child["spec"]["replicas"])
        )
    )  # fmt: skip
    registry = build_registry(Settings(), CollectorRegistry())
    handlers = {h.id.rpartition(".")[2]: h for h in registry._watching.get_all_handlers()}
    handler = handlers["predictor_deployment_event"]
    assert inspect.iscoroutinefunction(handler.fn)
    # only KServe's predictor Deployments of a RewardModel's InferenceService are delivered
    assert handler.labels == {
        "app.kubernetes.io/managed-by": "reward-operator",
        "serving.rlhf.dev/rewardmodel": kopf.PRESENT,
        "component": "predictor",
    }
    labels = {"serving.rlhf.dev/rewardmodel": "rm", "serving.kserve.io/inferenceservice": "rm"}

    def event(kind: str, replicas: int, ready: int, name: str = "rm-predictor", uid: str = "d1", **extra) -> None:
        body = {
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"replicas": replicas},
            "status": {"readyReplicas": ready, **extra},
        }
        asyncio.run(
            handler.fn(event={"type": kind}, body=body, namespace="ns", labels=dict(labels), logger=logging.getLogger())
        )

    event("ADDED", 1, 1)  # the watch's first listing: recorded, nothing to refresh
    event("MODIFIED", 1, 1, observedGeneration=3)  # no replica moved
    assert reconciled == []
    event("MODIFIED", 0, 1)  # KEDA asked for zero
    event("MODIFIED", 0, 0)  # the last pod went
    event("MODIFIED", 0, 0, observedGeneration=4)
    assert reconciled == [("ns", "rm", "Deployment", 0), ("ns", "rm", "Deployment", 0)]
    event("DELETED", 0, 0)  # a Knative revision's Deployment removed: the sum moved
    assert len(reconciled) == 3
    # Standard mode's canary Deployment carries the owner's labels too: not the stable predictor
    event("ADDED", 1, 1, name="rm-canary-predictor", uid="d2")
    event("MODIFIED", 2, 2, name="rm-canary-predictor", uid="d2")
    assert len(reconciled) == 3
