"""Clients for the reward gateway (runtimes/gateway): TRL and verl adapters on one small HTTP client.

Only httpx is needed; nothing here imports torch or a trainer. Adapters live in their own
modules (``reward_gateway_client.trl``, ``reward_gateway_client.verl``) so a trainer loads
only its own.
"""

from reward_gateway_client.http import AsyncRewardClient, GatewayError, GatewaySettings, RewardClient

__all__ = ["AsyncRewardClient", "GatewayError", "GatewaySettings", "RewardClient"]
