"""background_loop: a controller loop runs while the block runs, its failure is
logged (not lost), and it never outlives the block."""

from __future__ import annotations

import asyncio
from typing import Any

from federator.controllers.loops import background_loop


class RecordingLog:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict[str, Any]]] = []

    def error(self, event: str, **kw: Any) -> None:
        self.errors.append((event, kw))


async def test_the_loop_is_cancelled_when_the_block_ends() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    log = RecordingLog()
    async with background_loop(forever(), name="t:forever", what="test loop", log=log) as task:
        await asyncio.wait_for(started.wait(), 5)
        assert task.get_name() == "t:forever" and not task.done()
    assert task.cancelled()
    assert log.errors == []


async def test_a_failing_loop_is_logged_and_the_block_still_exits() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    log = RecordingLog()
    async with background_loop(broken(), name="t:broken", what="test loop", log=log) as task:
        with_exc = await asyncio.wait({task}, timeout=5)
        assert with_exc[0] == {task}
    assert isinstance(task.exception(), RuntimeError)
    assert [event for event, _ in log.errors] == ["test loop failed"]
    assert log.errors[0][1]["error"] == "RuntimeError: boom"
