"""docs/reference/ is generated from the CRDs and must not drift from them.

It must also say what the API server enforces: each field's facts and each CEL rule's
message, on the object the rule sits on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reward_operator.api.crd import all_crds
from reward_operator.api.reference import reference_pages

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"


def test_committed_reference_matches_the_crds():
    pages = reference_pages()
    assert {p.name for p in REFERENCE.glob("*.md")} == set(pages), "run `make api-reference`"
    for name, text in pages.items():
        assert (REFERENCE / name).read_text() == text, f"docs/reference/{name} drifted: run `make api-reference`"


def _section(page: str, path: str) -> str:
    """The text under ``### <path>``, up to the next heading."""
    match = re.search(rf"^### {re.escape(path)}\n(.*?)(?=^#|\Z)", page, re.S | re.M)
    assert match, f"no section for {path}"
    return match.group(1)


def _walk(node: dict, path: str):
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from _walk(child, f"{path}.{name}")
        if child.get("items", {}).get("properties"):
            yield from _walk(child["items"], f"{path}.{name}[]")


@pytest.mark.parametrize("file_name", sorted(all_crds()))
def test_every_field_and_every_rule_message_is_in_the_reference(file_name):
    crd = all_crds()[file_name]
    page = reference_pages()[f"{crd['spec']['names']['kind'].lower()}.md"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for top in ("spec", "status"):
        for path, field in _walk(schema["properties"][top], top):
            section = _section(page, path)
            for rule in field.get("x-kubernetes-validations", []):
                assert " ".join(rule["message"].split()).replace("<", "&lt;") in section, (path, rule["message"])


def test_a_field_shows_its_type_default_enum_and_bounds():
    page = reference_pages()["rewardmodel.md"]
    kind = _section(page, "spec.model.kind")
    assert "**string**" in kind
    assert "default `sequence`" in kind
    assert "one of `sequence`, `token`, `process`" in kind
    tensor_parallel = _section(page, "spec.model.tensorParallelSize")
    assert "**integer (int32)** · default `1` · 1 to 64" in tensor_parallel
    uri = _section(page, "spec.model.uri")
    assert "required" in uri and "at most 2048 characters" in uri


def test_a_cross_field_rule_sits_on_the_object_that_carries_it():
    page = reference_pages()["rewardmodel.md"]
    spec_rules = page.split("\n## spec\n", 1)[1].split("\n### ", 1)[0]
    assert "spec.canary needs gateway.enabled: true" in spec_rules


def test_the_columns_table_lists_every_printer_column():
    for crd in all_crds().values():
        page = reference_pages()[f"{crd['spec']['names']['kind'].lower()}.md"]
        for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
            assert f"| {column['name'].upper()} |" in page
