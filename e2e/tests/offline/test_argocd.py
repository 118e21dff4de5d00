"""Argo CD: the health check for RewardModel and RLHFPipeline run in a real Lua interpreter, and the
Application that orders the operator before the models.

Argo CD runs health checks in gopher-lua (Lua 5.1 semantics); the check is run in
Lua 5.1 and 5.4 (lupa) against the testdata objects of each state, with the
expectations in manifests/argocd/health/health_test.yaml. The argocd-cm component
built by kubectl's kustomize: e2e/tests/cluster/test_manifests.py.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from reward_testing.paths import REPO

HEALTH = REPO / "manifests" / "argocd" / "health"
SCRIPT = (HEALTH / "rewardmodel.lua").read_text()
CASES = yaml.safe_load((HEALTH / "health_test.yaml").read_text())["tests"]


def run_health_check(lua_module: str, obj: dict[str, Any]) -> dict[str, str]:
    runtime = importlib.import_module(f"lupa.{lua_module}").LuaRuntime()
    check = runtime.eval(f"function(obj)\n{SCRIPT}\nend")
    result = check(runtime.table_from(obj, recursive=True))
    return {key: result[key] for key in ("status", "message")}


@pytest.mark.parametrize("lua_module", ["lua51", "lua54"])
@pytest.mark.parametrize("case", CASES, ids=[Path(case["inputPath"]).stem for case in CASES])
def test_health_check(lua_module, case):
    obj = yaml.safe_load((HEALTH / case["inputPath"]).read_text())
    assert run_health_check(lua_module, obj) == case["healthStatus"]


def test_every_argo_health_state_is_covered():
    assert {case["healthStatus"]["status"] for case in CASES} == {"Healthy", "Progressing", "Degraded"}
    assert sorted(case["inputPath"] for case in CASES) == sorted(
        f"testdata/{path.name}" for path in (HEALTH / "testdata").glob("*.yaml")
    )


def test_healthy_flips_to_progressing_when_the_spec_changes():
    # what Argo CD sees right after a sync edits a Ready model's spec
    obj = yaml.safe_load((HEALTH / "testdata" / "ready.yaml").read_text())
    assert run_health_check("lua51", obj)["status"] == "Healthy"
    obj["metadata"]["generation"] += 1
    assert run_health_check("lua51", obj)["status"] == "Progressing"


def _every_reason() -> list[str]:
    from reward_operator.api import conditions

    declared = vars(conditions).items()
    names = {value for name, value in declared if name.isupper() and isinstance(value, str) and name != "READY"}
    return sorted(names | set(conditions.DEGRADED_REASONS) | {"PredictorReadyFalse", "ContainerCrashLoop"})


@pytest.mark.parametrize("reason", _every_reason())
def test_degraded_exactly_for_the_reasons_the_api_declares(reason):
    """api/conditions.py's DEGRADED_REASONS (and *Failed) is what the Lua check calls Degraded."""
    from reward_operator.api import conditions

    obj = yaml.safe_load((HEALTH / "testdata" / "invalid-spec.yaml").read_text())
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="False", reason=reason)
    degraded = reason in conditions.DEGRADED_REASONS or reason.endswith(conditions.DEGRADED_SUFFIX)
    assert run_health_check("lua51", obj)["status"] == ("Degraded" if degraded else "Progressing")


def test_argocd_application_orders_operator_before_models():
    apps = list(yaml.safe_load_all((REPO / "manifests" / "argocd" / "application.yaml").read_text()))
    waves = {
        app["metadata"]["name"]: int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for app in apps
    }
    operator = next(app for app in apps if app["spec"]["source"]["path"] == "charts/reward-operator")
    models = next(app for app in apps if app["spec"]["source"]["path"] == "manifests/samples")
    assert waves[operator["metadata"]["name"]] < waves[models["metadata"]["name"]]
    assert (REPO / operator["spec"]["source"]["path"] / "Chart.yaml").is_file()
    assert (REPO / models["spec"]["source"]["path"] / "kustomization.yaml").is_file()
    assert "ServerSideApply=true" in operator["spec"]["syncPolicy"]["syncOptions"]
