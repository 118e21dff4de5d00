"""crds/ is generated from reward_operator.api and must not drift from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from reward_operator.api.crd import all_crds, to_yaml

CRDS = Path(__file__).resolve().parents[2] / "crds"


def properties(node: dict, path: str) -> Iterator[tuple[str, dict]]:
    """Every property below a schema node, as (its dotted path, its schema), array items as ``[]``."""
    for name, sub in node.get("properties", {}).items():
        yield f"{path}.{name}", sub
        yield from properties(sub, f"{path}.{name}")
    if "items" in node:
        yield from properties(node["items"], path + "[]")


def test_committed_crds_match_the_api_package():
    generated = all_crds()
    committed = {path.name for path in CRDS.glob("*.yaml")}
    assert committed == set(generated), "run `reward-operator crds --output-dir crds`"
    for filename, crd in generated.items():
        assert (CRDS / filename).read_text() == to_yaml(crd), f"{filename} drifted: run `make crds`"


def test_reward_model_crd_conventions():
    crd = yaml.safe_load((CRDS / "serving.rlhf.dev_rewardmodels.yaml").read_text())
    names = crd["spec"]["names"]
    assert names["categories"] == ["rlhf"]
    assert "all" not in names["categories"]
    assert names["shortNames"] == ["rwm"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == [
        "Ready",
        "Mode",
        "Replicas",
        "Asleep",
        "URL",
        "Canary",
        "Age",
        "Reason",
        "Message",
        "Agreement",
    ]
    assert columns["Asleep"]["jsonPath"] == '.status.conditions[?(@.type=="ScaledToZero")].status'
    assert columns["Reason"]["priority"] == 1 and columns["Message"]["priority"] == 1


def test_every_schema_property_is_described():
    crd = yaml.safe_load((CRDS / "serving.rlhf.dev_rewardmodels.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert [path for path, sub in properties(spec, "spec") if not sub.get("description")] == []


def test_rlhf_pipeline_crd_has_a_column_per_role():
    crd = yaml.safe_load((CRDS / "serving.rlhf.dev_rlhfpipelines.yaml").read_text())
    names = crd["spec"]["names"]
    assert names["categories"] == ["rlhf"] and names["shortNames"] == ["rlhfp"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == [
        "Ready",
        "Actor",
        "Reference",
        "Critic",
        "Rewards",
        "Graph",
        "URL",
        "Age",
        "Reason",
        "Message",
    ]
    assert columns["Critic"]["jsonPath"] == '.status.conditions[?(@.type=="CriticReady")].status'
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert [path for path, sub in properties(spec, "spec") if not sub.get("description")] == []


# Keys YAML 1.1 reads as booleans: kubectl and Helm parse manifests that way, so a field named
# like this would arrive as "true" or "false" (an RLHFPipeline's bestOfN.n once did).
YAML11_BOOLEANS = {
    spelling
    for word in ("y", "yes", "n", "no", "on", "off", "true", "false")
    for spelling in (word, word.capitalize(), word.upper())
}


def test_no_field_is_named_like_a_yaml_1_1_boolean():
    clashing = [
        path
        for filename, crd in all_crds().items()
        for path, _ in properties(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], filename)
        if path.rpartition(".")[2] in YAML11_BOOLEANS
    ]
    assert clashing == []
