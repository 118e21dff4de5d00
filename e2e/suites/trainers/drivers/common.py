"""What every driver shares: the request it reads, the answer it prints, the docs' snippets.

A driver runs under its trainer's own venv (e2e/suites/trainers/venvs), not the tests' (which has no torch
and none of the trainers): the test starts it as a script with a JSON request on stdin and reads the
``RESULTS <json>`` line it prints, as ``reward_testing.tiny_models`` does with the vLLM venv's.
This module must import under every trainer's venv: the standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[4] / "docs" / "trainers.md"
# docs/trainers.md marks each snippet a test runs with this comment on the line before its fence
SNIPPET = re.compile(r"<!-- e2e/suites/trainers: (?P<name>[\w-]+) -->\n```\w*\n(?P<body>.*?)\n```", re.S)


def snippet(name: str) -> str:
    """The body of the docs' snippet ``name``: what the test runs is what the page shows."""
    found = {match["name"]: match["body"] for match in SNIPPET.finditer(DOCS.read_text())}
    if name not in found:
        raise LookupError(f"{DOCS} has no snippet {name!r} (it has {sorted(found)})")
    return found[name]


def request() -> dict[str, Any]:
    """The request: the first line of stdin (stdin stays open: a test may answer on it later)."""
    return json.loads(sys.stdin.readline())


def wait_for_test() -> str:
    """Block until the test writes its next line on stdin (it acts, e.g. deletes a pod, meanwhile)."""
    return sys.stdin.readline()


def answer(results: dict[str, Any]) -> None:
    print("RESULTS " + json.dumps(results, default=str), flush=True)
