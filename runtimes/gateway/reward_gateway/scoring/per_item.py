"""One vLLM call of several inputs, answered input by input.

vLLM refuses a call as a whole (400) when one of its inputs is bad, over-long most often, without
saying whose. Halving the call finds the input at fault in about 2 * log2(inputs) calls, where one
call per input would cost as many calls as batching saved; each half without it is answered on the
way down. A refusal costs vLLM a tokenization, no model time: it checks inputs before scheduling
any. Only the input at fault fails, with vLLM's own answer to it alone; any other failure of a call
(vLLM away, overloaded, failing) is every input's of that call.

Both paths to vLLM use it: the scorer's own calls (a group's texts) and the coalescer's merged ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from reward_gateway.items.errors import UpstreamError, forget
from reward_gateway.items.outcomes import Failure, failure_of

T = TypeVar("T")
E = TypeVar("E")

# (position among the inputs, its entry or its failure)
Settle = Callable[[int, Any], None]


async def answer_each(
    post: Callable[[list[T]], Awaitable[Sequence[E]]], inputs: list[T], settle: Settle, start: int = 0
) -> bool:
    """Posts ``inputs`` and settles each one's entry or `Failure` as soon as it is known (``start``: the
    first input's position). True where vLLM answered them all in one call."""
    try:
        entries = await post(inputs)
    except UpstreamError as error:
        if error.status == 400 and len(inputs) > 1:
            half = len(inputs) // 2
            await asyncio.gather(
                answer_each(post, inputs[:half], settle, start),
                answer_each(post, inputs[half:], settle, start + half),
            )
            return False
        failure = failure_of(error)
        forget(error)  # its frames hold the call's inputs (reward_gateway.items.errors.forget)
        fail_all(settle, start, len(inputs), failure)
        return False
    for offset, entry in enumerate(entries):
        settle(start + offset, entry)
    return True


def fail_all(settle: Settle, start: int, count: int, failure: Failure) -> None:
    for position in range(start, start + count):
        settle(position, failure)
