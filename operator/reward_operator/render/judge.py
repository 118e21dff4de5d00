"""A judge's prompt and verdict (spec.judge, canary.judge) as its reward gateway reads them."""

from __future__ import annotations

import json

from ..api.types import JudgeSpec


def judge_setting(judge: JudgeSpec) -> str:
    """REWARD_GATEWAY_JUDGE (or CANARY_JUDGE): the object as it is, as JSON (reward_gateway.config.judge).

    An environment variable, not a mounted file: a new prompt or verdict changes the gateway's pod template,
    so its pods roll (a new revision in Knative mode) and none goes on serving the old judge. KServe reads only
    the predictor's container as a Go template, not the transformer's, so a Jinja template's braces pass."""
    return json.dumps(judge, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
