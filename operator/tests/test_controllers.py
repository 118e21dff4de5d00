"""The operator's kopf registry, built from the run's settings."""

from __future__ import annotations

import kopf
from kopf._core.intents.causes import Activity  # kopf's internals: the registry has no public query API
from prometheus_client import CollectorRegistry

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


def test_the_drift_timer_follows_the_settings():
    registry = build_registry(Settings(drift_interval=17), CollectorRegistry())
    timers = [h for h in registry._spawning.get_all_handlers() if getattr(h, "interval", None) is not None]
    assert [(timer.interval, timer.initial_delay) for timer in timers] == [(17, 17)]
