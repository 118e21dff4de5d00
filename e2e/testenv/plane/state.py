"""What ``up`` started, persisted in the control plane's folder so that any process can inspect or stop it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def default_state_dir() -> Path:
    """``$TESTENV_DIR``, else the checkout's ``.testenv`` (what ``make up`` and ``make down`` use)."""
    return Path(os.environ.get("TESTENV_DIR") or REPO_ROOT / ".testenv")


@dataclass
class State:
    directory: str
    kubeconfig: str
    api_server: str
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    add_ons: list[str] = field(default_factory=list)  # the names of the add-ons that run, in start order

    @classmethod
    def load(cls, directory: Path) -> State:
        return cls(**json.loads((directory / "state.json").read_text()))

    def save(self) -> None:
        path = Path(self.directory) / "state.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
