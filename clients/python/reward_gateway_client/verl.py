"""verl: the reward gateway as verl's custom reward function.

verl 0.9 has no setting for an external reward model's URL: its own reward-model path
posts to the router of the vLLM/SGLang servers it launches itself. What its config CAN
name is a custom reward function, by file and name, with keyword arguments of its own:

    reward.custom_reward_function.path=$(python -c 'import reward_gateway_client.verl as m; print(m.__file__)')
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.url=http://skywork-rm.rlhf-demo.svc.cluster.local

(verl 0.8 and older: the same keys without the ``reward.`` prefix.) What this copies from
verl (tag v0.9.0, 483b8a0; the same lines as the 0.9.1 wheel):

- verl/trainer/ppo/reward.py L50-86 (get_custom_reward_fn): loads ``name`` from ``path``
  and wraps it so ``reward_kwargs`` are merged into every call's keywords, the config's
  winning (L41-47); a coroutine function is awaited.
- verl/experimental/reward_loop/reward_manager/naive.py L54-84 (run_single): one call per
  sample, ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` plus
  ``reward_router_address`` and ``reward_model_tokenizer`` when verl runs a reward model of
  its own; ``solution_str`` is the response alone, decoded with skip_special_tokens=True.
  A number or ``{"score": number, ...}`` comes back (L86-95).
- verl/experimental/reward_loop/reward_loop.py L138-143 (compute_score_batch): a worker
  starts every sample of its share at once and gathers them on one event loop.

So this function is a coroutine, and calls that arrive on one event loop within
``batch_window_s`` of the first (default 20 ms) go to the gateway as ONE request,
each prompt's responses in one group. verl hands the reward function no prompt: it is
read from ``extra_info[prompt_key]`` (default ``"prompt"``), which the dataset's
preprocessing must fill with the chat messages (or the prompt text). Messages become a
``{"messages": prompt + [assistant response]}`` item; text a ``{"prompt", "response"}`` item.
``ground_truth`` is the item's ``reference`` (as text; anything else as JSON): a judge compares the
response with it, a score head scores without it.
URL and token: reward_kwargs ``url``/``token``/``token_file``, else $REWARD_GATEWAY_URL,
$REWARD_GATEWAY_TOKEN, $REWARD_GATEWAY_TOKEN_FILE in the reward workers' environment.
A failed request raises in every sample's call, as verl's own reward-model client does once its
retries are spent. A sample the gateway could not score (over the model's context, say) raises
`ItemFailed` in its own call alone, naming the reason; the other samples get their rewards. verl
has no missing reward to give it: its reward loop builds a tensor of every sample's score
(reward_loop.py compute_rm_score -> assemble_rm_scores, 0.9.1), where None cannot go and NaN
would train, so the step stops with the reason rather than train on a made-up number.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any

from reward_gateway_client.http import AsyncRewardClient, GatewaySettings, ItemFailure
from reward_gateway_client.items import reference_text


async def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    token_file: str | None = None,
    model: str | None = None,
    prompt_key: str = "prompt",
    batch_window_s: float = 0.02,
    max_batch: int = 1024,
    timeout_s: float = 200.0,
    attempts: int = 8,
    max_backoff_s: float = 30.0,
    **_verl_extras: Any,  # reward_router_address, reward_model_tokenizer: verl's own reward model, not used
) -> float:
    prompt = (extra_info or {}).get(prompt_key)
    if prompt is None:
        raise ValueError(
            f"extra_info[{prompt_key!r}] is missing: verl gives a reward function only the response, so the "
            "dataset's preprocessing must put the prompt (chat messages or text) in extra_info"
        )
    prompt = _plain(prompt)
    if isinstance(prompt, str):
        item: dict[str, Any] = {"prompt": prompt, "response": solution_str}
    else:
        item = {"messages": [*prompt, {"role": "assistant", "content": solution_str}]}
    reference = reference_text(_plain(ground_truth))
    if reference is not None:  # a judge compares the response with it; a score head scores without it
        item["reference"] = reference
    settings = GatewaySettings(
        url=url,
        token=token,
        token_file=token_file,
        timeout_s=timeout_s,
        attempts=attempts,
        max_backoff_s=max_backoff_s,
        model=model,
    )
    batcher = _batcher(settings, batch_window_s, max_batch)
    return await batcher.submit(_key(prompt), item)


def _plain(value: Any) -> Any:
    """verl keeps dataset columns as numpy object arrays: back to lists and dicts for JSON."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(entry) for entry in value]
    if isinstance(value, dict):
        return {key: _plain(entry) for key, entry in value.items()}
    return value


def _key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)


class _Batcher:
    """Collects the calls of one event loop for one gateway and sends them together.

    The first call of a batch starts a timer of ``window_s``; when it fires (or the batch
    reaches ``max_batch``) everything collected goes in one request and each caller gets
    its own reward, or the request's error."""

    def __init__(self, client: AsyncRewardClient, window_s: float, max_batch: int):
        self.client = client
        self.window_s = window_s
        self.max_batch = max_batch
        self.pending: list[tuple[str, dict[str, Any], asyncio.Future]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.sending: set[asyncio.Task] = set()  # the event loop keeps only weak references to tasks

    def submit(self, key: str, item: dict[str, Any]) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((key, item, future))
        if len(self.pending) >= self.max_batch or self.window_s <= 0:
            self.flush()
        elif self.timer is None:
            self.timer = loop.call_later(self.window_s, self.flush)
        return future

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)

    async def _send(self, batch: list[tuple[str, dict[str, Any], asyncio.Future]]) -> None:
        groups: dict[str, int] = {}
        items = [{**item, "group": groups.setdefault(key, len(groups))} for key, item, _ in batch]
        try:
            outcomes = await self.client.outcomes(items)
        except Exception as error:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, _, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, ItemFailure):
                future.set_exception(outcome.error())
            else:
                future.set_result(outcome)


# One batcher per event loop and gateway: futures and timers belong to their loop.
_BATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, _Batcher]] = weakref.WeakKeyDictionary()


def _batcher(settings: GatewaySettings, window_s: float, max_batch: int) -> _Batcher:
    per_loop = _BATCHERS.setdefault(asyncio.get_running_loop(), {})
    key = (settings, window_s, max_batch)
    if key not in per_loop:
        per_loop[key] = _Batcher(AsyncRewardClient(settings), window_s, max_batch)
    return per_loop[key]
