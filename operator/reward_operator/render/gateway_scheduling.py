"""spec.gateway.scheduling as the gateway's settings (REWARD_GATEWAY_COALESCE*, _FAIR_SHARE, _CLIENT_*).

A field left unset renders nothing, so the gateway's own default applies (runtimes/gateway/README.md,
"Scheduling"). One exception: client weights act in the gateway's queue, which only coalescing has,
and the gateway refuses to start with weights and coalescing off. So weights with ``coalesce`` unset
render REWARD_GATEWAY_COALESCE=true whatever the gateway's default is; ``coalesce: false`` with weights
is refused by the schema before it gets here.
"""

from __future__ import annotations

import json

from ..api.types import SchedulingSpec

# spec.gateway.scheduling field -> REWARD_GATEWAY_* variable, for the numbers passed through as they are.
_NUMBERS = (
    ("maxWaitMilliseconds", "COALESCE_MAX_WAIT_MS"),
    ("maxItemsPerCall", "COALESCE_MAX_ITEMS"),
    ("maxCallsInFlight", "COALESCE_MAX_BATCHES"),
    ("maxCallMilliseconds", "COALESCE_MAX_CALL_MS"),
    ("defaultClientWeight", "CLIENT_DEFAULT_WEIGHT"),
)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def scheduling_settings(scheduling: SchedulingSpec) -> dict[str, str]:
    """The gateway's settings (without the prefix) for ``scheduling``; {} when it sets nothing."""
    settings: dict[str, str] = {}
    weighted = "clients" in scheduling or "defaultClientWeight" in scheduling
    if "coalesce" in scheduling:
        settings["COALESCE"] = _flag(scheduling["coalesce"])
    elif weighted:
        settings["COALESCE"] = "true"
    for field, variable in _NUMBERS:
        if field in scheduling:
            settings[variable] = str(scheduling[field])  # type: ignore[literal-required]
    if "fairShare" in scheduling:
        settings["FAIR_SHARE"] = _flag(scheduling["fairShare"])
    if "clients" in scheduling:
        weights = {client["name"]: client["weight"] for client in scheduling["clients"]}
        settings["CLIENT_WEIGHTS"] = json.dumps(weights, separators=(",", ":"), ensure_ascii=False)
    return settings
