"""LoopSlice: a long synchronous pass lets other tasks run once it has held the loop for its slice."""

from __future__ import annotations

import asyncio

from federator.runtime.waits import LoopSlice


async def _steps_before_other_task_runs(share: LoopSlice, steps: int) -> int | None:
    ran_at: list[int] = []
    step = 0

    async def other() -> None:
        ran_at.append(step)

    task = asyncio.get_running_loop().create_task(other())
    for step in range(steps):
        await share.maybe_yield()
    await task
    return ran_at[0] if ran_at else None


async def test_a_pass_past_its_slice_lets_others_run() -> None:
    # a zero slice yields at the first step: the other task runs before the pass is done
    assert await _steps_before_other_task_runs(LoopSlice(0.0), 100) == 0


async def test_a_pass_within_its_slice_keeps_the_loop() -> None:
    # an hour's slice never yields: the other task runs only after the pass
    assert await _steps_before_other_task_runs(LoopSlice(3600.0), 100) == 99
