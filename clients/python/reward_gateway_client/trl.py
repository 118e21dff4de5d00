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
prompt num_generations times in a row).

A completion the gateway could not score (over the model's context, say) gets None, TRL's
own "no reward": TRL turns it into NaN, leaves it out of its group's baseline and gives it
advantage 0 (grpo_trainer.py, 1.16.0 L2756-2806), so the step trains on the others. No
second request is sent; the failures are logged (one warning per step, by reason) and
counted in TRL's metrics as ``<name>/failed_items`` (its ``log_metric``). A request that
fails as a whole (the gateway unreachable, vLLM away past the gateway's hold, after the
client's retries): ``on_error="raise"`` (default) raises and stops the step;
``on_error="none"`` gives every completion None.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from reward_gateway_client.http import (
    AsyncRewardClient,
    GatewayError,
    GatewaySettings,
    ItemFailure,
    Outcome,
    RewardClient,
    rewards_of,
)
from reward_gateway_client.items import reward_items

logger = logging.getLogger("reward_gateway_client")

ON_ERROR = ("raise", "none")


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
        reference_column: str | None = None,
    ):
        """``reference_column``: the dataset column (as TRL passes it) holding each completion's reference
        answer, which a judge compares it with (e.g. ``"solution"``); unset, items carry no reference."""
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
        self.reference_column = reference_column
        self.__name__ = name  # what TRL's logs call this reward
        self.client = RewardClient(settings)
        self.async_client = AsyncRewardClient(settings)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        items = reward_items(prompts, completions, self._references(columns))
        try:
            outcomes = self.client.outcomes(items)
        except GatewayError as error:
            return self._failed(error, len(items))
        return self._rewards(outcomes, columns.get("log_metric"))

    async def ascore(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, **columns: Any
    ) -> list[float | None]:
        items = reward_items(prompts, completions, self._references(columns))
        try:
            outcomes = await self.async_client.outcomes(items)
        except GatewayError as error:
            return self._failed(error, len(items))
        return self._rewards(outcomes, columns.get("log_metric"))

    def _references(self, columns: dict[str, Any]) -> Sequence[Any] | None:
        if self.reference_column is None:
            return None
        if self.reference_column not in columns:
            raise KeyError(
                f"reference_column {self.reference_column!r} is not among the dataset's columns TRL passed: "
                f"{', '.join(sorted(columns)) or 'none'}"
            )
        return columns[self.reference_column]

    def as_async(self) -> functools.partial:
        """This reward as a coroutine function for TRL (see the module docstring)."""
        return functools.partial(reward_gateway, self)

    def _rewards(self, outcomes: list[Outcome], log_metric: Callable[[str, float], None] | None) -> list[float | None]:
        """TRL's rewards: None for each completion the gateway could not score, logged and counted."""
        failed = [outcome for outcome in outcomes if isinstance(outcome, ItemFailure)]
        if log_metric is not None:
            log_metric(f"{self.__name__}/failed_items", float(len(failed)))
        if failed:
            reasons = ", ".join(f"{count} {reason}" for reason, count in Counter(f.reason for f in failed).items())
            logger.warning(
                "%s: %d of %d completions not scored (%s), given None: first, completion %d: %s",
                self.__name__,
                len(failed),
                len(outcomes),
                reasons,
                failed[0].index,
                failed[0].message,
            )
        return rewards_of(outcomes)

    def _failed(self, error: GatewayError, count: int) -> list[float | None]:
        if self.on_error == "raise":
            raise error
        logger.warning("%s: %d rewards set to None: %s", self.__name__, count, error)
        return [None] * count


async def reward_gateway(reward: GatewayReward, /, **kwargs: Any) -> list[float | None]:
    """Module-level (so a partial of it pickles) and a coroutine function (so TRL awaits it)."""
    return await reward.ascore(**kwargs)
