"""Where the repository and the golden renderings are, and the comparison with a golden rendering."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
# Golden renderings: inputs/<case>.yaml (a RewardModel) -> <case>.yaml (its children).
GOLDEN = Path(__file__).resolve().parent / "golden"


def golden_cases() -> list[str]:
    return sorted(path.stem for path in (GOLDEN / "inputs").glob("*.yaml"))


def golden_input(case: str) -> dict:
    return yaml.safe_load((GOLDEN / "inputs" / f"{case}.yaml").read_text())


def golden_children(case: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((GOLDEN / f"{case}.yaml").read_text()) if doc]


def assert_matches_golden(golden: Path, children: list[dict[str, Any]]) -> None:
    """``children`` as YAML documents are the golden file's text (``UPDATE_GOLDEN=1`` writes it), with no
    YAML anchor: an anchor means one object rendered into two places."""
    rendered = yaml.safe_dump_all(children, sort_keys=False, width=120)
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"missing {golden}; run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()
    assert "&id" not in rendered, "a YAML anchor: one object rendered twice"
