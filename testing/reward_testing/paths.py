"""Where the repository and the golden renderings are."""

from __future__ import annotations

from pathlib import Path

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
