"""The children an RLHFPipeline renders, and the ClusterServingRuntimes of runtimes/, walked against
KServe v0.20's own CRD schemas, offline.

The API server drops a field its schema does not know (pruning) without a word, so a misspelt
``routerTimeouts`` would leave the router at its 60 s default and nothing would fail. This
catches that, and a value outside KServe's enums, before any cluster; the integration tests
(e2e/tests/cluster/test_rlhfpipeline_operator.py) then have KServe's webhooks and router run them.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from reward_operator.render import render_reward_model, render_rlhf_pipeline
from reward_testing.paths import GOLDEN, REPO

CASES = sorted((GOLDEN / "pipeline" / "inputs").glob("*.yaml"))
RUNTIMES = sorted((REPO / "runtimes").glob("*.yaml"))


@pytest.fixture(scope="module")
def kserve_schemas() -> dict[str, dict]:
    """kind -> the openAPIV3Schema of KServe's CRD, from the pinned module (downloaded once by the testenv)."""
    from testenv.addons import kserve

    try:
        files = kserve.crd_files()
    except (RuntimeError, FileNotFoundError, OSError) as error:
        pytest.skip(f"KServe's CRDs are not available offline: {error}")
    schemas = {}
    for path in files:
        crd = yaml.safe_load(path.read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return schemas


def unknown_fields(value: Any, schema: dict, path: str = "") -> list[str]:
    """Paths in ``value`` the schema would prune or refuse (unknown fields, values outside an enum)."""
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return problems
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in properties:
                problems += unknown_fields(sub, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += unknown_fields(sub, extra, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                problems.append(f"{path}.{key}: not in KServe's schema")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problems += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[path.stem for path in CASES])
def test_every_rendered_field_is_kserves(case, kserve_schemas):
    for child in render_rlhf_pipeline(yaml.safe_load(case.read_text())):
        schema = kserve_schemas[child["kind"]]
        spec_problems = unknown_fields(child["spec"], schema["properties"]["spec"], f"{child['kind']}.spec")
        assert spec_problems == [], child["metadata"]["name"]


@pytest.mark.parametrize("runtime", RUNTIMES, ids=[path.stem for path in RUNTIMES])
def test_every_runtime_field_is_kserves(runtime, kserve_schemas):
    manifest = yaml.safe_load(runtime.read_text())
    assert manifest["kind"] == "ClusterServingRuntime"
    schema = kserve_schemas["ClusterServingRuntime"]
    assert unknown_fields(manifest["spec"], schema["properties"]["spec"], "ClusterServingRuntime.spec") == []


def test_a_cpu_reward_models_inference_service_is_kserves(kserve_schemas):
    reward_model = yaml.safe_load((GOLDEN / "inputs" / "sequence-cpu.yaml").read_text())
    for child in render_reward_model(reward_model):
        if child["kind"] == "InferenceService":
            schema = kserve_schemas["InferenceService"]["properties"]["spec"]
            assert unknown_fields(child["spec"], schema, "InferenceService.spec") == []
