"""The benchmark's fake schedules like vLLM; its figures are only as good as that."""

from __future__ import annotations

import asyncio

from reward_testing.fake_vllm import EngineSteps


def test_texts_run_in_steps_of_the_token_budget_in_arrival_order():
    async def main() -> list[tuple[str, int]]:
        engine = EngineSteps(step_s=0.01, tokens_per_step=1024, tokens_per_text=512)  # 2 texts a step
        finished: list[tuple[str, int]] = []

        async def call(name: str, texts: int) -> None:
            await engine.run([name] * texts)
            finished.append((name, engine.steps_done))

        await asyncio.gather(call("a", 1), call("b", 1), call("c", 1), call("d", 2))
        return finished

    # step 1: a, b; step 2: c and d's first text; step 3: d's second text
    assert asyncio.run(main()) == [("a", 1), ("b", 1), ("c", 2), ("d", 3)]


def test_a_text_arriving_during_a_step_waits_for_the_next():
    async def main() -> list[tuple[str, int]]:
        engine = EngineSteps(step_s=0.2, tokens_per_step=1024, tokens_per_text=512)  # room for 2
        finished: list[tuple[str, int]] = []

        async def call(name: str) -> None:
            await engine.run([name])
            finished.append((name, engine.steps_done))

        running = asyncio.create_task(call("first"))
        await engine.step_began.wait()  # the first step is under way, with room left
        await asyncio.gather(running, call("late"))
        return finished

    assert asyncio.run(main()) == [("first", 1), ("late", 2)]


def test_one_step_answers_its_texts_together():
    async def main() -> set[int]:
        engine = EngineSteps(step_s=0.01, tokens_per_step=64 * 8, tokens_per_text=1)  # the bench's worst case
        steps: list[int] = []

        async def call() -> None:
            await engine.run(["t"] * 8)
            steps.append(engine.steps_done)

        await asyncio.gather(*(call() for _ in range(64)))
        return set(steps)

    assert asyncio.run(main()) == {1}
