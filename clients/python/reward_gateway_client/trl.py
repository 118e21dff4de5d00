"""TRL: the reward gateway as a GRPO reward function.

    from reward_gateway_client.trl import GatewayReward
    reward = GatewayReward("http://skywork-rm.rlhf-demo.svc.cluster.local")
    GRPOTrainer(..., reward_funcs=[reward])                 # sync
    GRPOTrainer(..., reward_funcs=[reward.as_async()])      # async, beside other async rewards

How TRL calls it (trl/trainer/grpo_trainer.py::_calculate_rewards; 1.16.0 wheel L1579-1661,
repo f2cd577 L1612-1690): ``reward_func(prompts=prompts, completions=completions,
completion_ids=completion_ids_list, **reward_kwargs)`` with every other dataset column,
``trainer_state``, ``log_extra``, ``log_metric`` (and ``environments``) as keywords; a list
with one reward or None per completion comes back, None turns into NaN. A function is run
on TRL's event loop when ``inspect.iscoroutinefunction(reward_func)`` is true (same file,
repo L704 and L1654). Its name in TRL's logs (``rewards/<name>/mean``) is
``get_callable_name(func)`` (trl/trainer/utils.py, repo L224-232): partials unwrapped,
then ``__name__``, else the class's name.

So:
- ``GatewayReward`` is a callable object (picklable, as TRL's async GRPO worker requires of
  reward functions: trl/rewards/other_rewards.py explains why TRL's own are classes), with
  a ``__name__`` of its own for the logs.
- ``as_async()`` is ``functools.partial(reward_gateway, self)``: ``iscoroutinefunction`` sees
  through partials on every Python TRL supports, where an object with an ``async __call__``
  is not a coroutine function before Python 3.12. Its name in the logs is ``reward_gateway``.

One request per step: every completion of the step in one POST /v1/rewards, in order,
each prompt's completions kept together as one group (TRL's RepeatSampler repeats each
prompt num_generations times in a row). ``on_error="raise"`` (default): a failed request
raises and stops the step. ``on_error="none"``: failed items get None (TRL turns it into
NaN and trains on the rest) and the failure is logged; where the gateway refused the
request for what it holds (400, 413) it is sent again per group, then per item within a
failing group, so one bad completion costs only its own reward.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any

from reward_gateway_client.http import AsyncRewardClient, GatewayError, GatewaySettings, RewardClient
from reward_gateway_client.items import reward_items

logger = logging.getLogger("reward_gateway_client")

ON_ERROR = ("raise", "none")
# Refusals caused by what a request holds, which sending it in parts can narrow down to items.
SPLIT_ON = frozenset({400, 413})


class GatewayReward:
    """A TRL reward function backed by the reward gateway. Options: see ``GatewaySettings``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        timeout_s: float = 200.0,
        attempts: int = 8,
        max_backoff_s: float = 30.0,
        model: str | None = None,
        on_error: str = "raise",
        name: str = "reward_gateway",
    ):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        settings = GatewaySettings(
            url=url,
            token=token,
            token_file=token_file,
            timeout_s=timeout_s,
            attempts=attempts,
            max_backoff_s=max_backoff_s,
            model=model,
        )
        self.on_error = on_error
        self.__name__ = name  # what TRL's logs call this reward
        self.client = RewardClient(settings)
        self.async_client = AsyncRewardClient(settings)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        return self._score(reward_items(prompts, completions))

    async def ascore(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        return await self._ascore(reward_items(prompts, completions))

    def as_async(self) -> functools.partial:
        """This reward as a coroutine function for TRL (see the module docstring)."""
        return functools.partial(reward_gateway, self)

    def _score(self, items: list[dict[str, Any]]) -> list[float | None]:
        try:
            return list(self.client.score(items))
        except GatewayError as error:
            parts = self._parts(error, items)
            if not parts:
                return self._failed(error, len(items))
        return [reward for part in parts for reward in self._score(part)]

    async def _ascore(self, items: list[dict[str, Any]]) -> list[float | None]:
        try:
            return list(await self.async_client.score(items))
        except GatewayError as error:
            parts = self._parts(error, items)
            if not parts:
                return self._failed(error, len(items))
        scored = await asyncio.gather(*(self._ascore(part) for part in parts))
        return [reward for part in scored for reward in part]

    def _parts(self, error: GatewayError, items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """With on_error="none", a request refused for what is in it (400: e.g. one completion over the
        model's context length; 413: too large) is sent again in parts, so only the items that fail
        get None: first one request per group, then, in a group that fails, one per item. Nothing
        else is split: a 401, 404 or an unreachable gateway would fail every part alike."""
        if self.on_error == "raise" or error.status not in SPLIT_ON or len(items) < 2:
            return []
        groups: dict[Any, list[dict[str, Any]]] = {}
        for item in items:
            groups.setdefault(item.get("group"), []).append(item)
        if len(groups) > 1:
            return list(groups.values())
        return [[item] for item in items]

    def _failed(self, error: GatewayError, count: int) -> list[float | None]:
        if self.on_error == "raise":
            raise error
        logger.warning("%s: %d rewards set to None: %s", self.__name__, count, error)
        return [None] * count


async def reward_gateway(reward: GatewayReward, /, **kwargs: Any) -> list[float | None]:
    """Module-level (so a partial of it pickles) and a coroutine function (so TRL awaits it)."""
    return await reward.ascore(**kwargs)
