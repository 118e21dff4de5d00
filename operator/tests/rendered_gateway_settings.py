"""The gateway's settings as the operator renders them for a RewardModel, readable by the gateway's own loader
in a test (shared by the scheduling and identity render tests)."""

from __future__ import annotations

from pathlib import Path

from reward_operator.render import render_reward_model
from reward_testing.gateway_process import rendered_gateway

PREFIX = "REWARD_GATEWAY_"


def env(reward_model: dict) -> dict[str, str]:
    """The stable gateway container's plain settings, under their full names."""
    name = reward_model["metadata"]["name"]
    (isvc,) = [
        c
        for c in render_reward_model(reward_model)
        if c["kind"] == "InferenceService" and c["metadata"]["name"] == name
    ]
    return rendered_gateway(isvc)[0]


def loadable(rendered: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The environment with its mounted token file where this test can read it."""
    token = tmp_path / "token"
    token.write_text("grpo-main secret-a\nppo-ablation secret-b\n")
    if PREFIX + "AUTH_TOKEN_FILE" in rendered:
        rendered = {**rendered, PREFIX + "AUTH_TOKEN_FILE": str(token)}
    return rendered
