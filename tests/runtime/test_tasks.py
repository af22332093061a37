"""federator.runtime.tasks: a supervised task logs its crash once with its name, a
cancellation is how it stops (not an error), and stopping cancels and waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from federator.runtime.tasks import running, spawn, stop_task, stop_tasks, supervised


class RecordingLog:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict[str, Any]]] = []

    def error(self, event: str, **fields: Any) -> None:
        self.errors.append((event, fields))


async def forever(started: asyncio.Event) -> None:
    started.set()
    await asyncio.Event().wait()


async def test_a_crash_is_logged_once_with_the_task_name_and_the_exception() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    log = RecordingLog()
    task = spawn(broken(), name="t:broken", log=log, event="test loop failed", loop="broken")
    await asyncio.wait({task}, timeout=30)
    assert task.done() and isinstance(task.exception(), RuntimeError)  # the task ends failed, not quietly
    assert log.errors == [("test loop failed", {"loop": "broken", "task": "t:broken",
                                                "error": "RuntimeError: boom", "exc_info": True})]
    assert isinstance(await stop_task(task), RuntimeError)  # stopping returns it, never raises it
    assert len(log.errors) == 1


async def test_cancellation_is_not_an_error() -> None:
    started = asyncio.Event()
    log = RecordingLog()
    task = spawn(forever(started), name="t:forever", log=log, event="test loop failed")
    await asyncio.wait_for(started.wait(), 30)
    assert task.get_name() == "t:forever" and not task.done()
    assert await stop_task(task) is None
    assert task.cancelled()
    assert log.errors == []


async def test_supervised_reraises_and_passes_a_return_through() -> None:
    async def fine() -> None:
        return None

    async def broken() -> None:
        raise ValueError("bad")

    log = RecordingLog()
    await supervised(fine(), log=log, event="x failed")
    with pytest.raises(ValueError, match="bad"):
        await supervised(broken(), log=log, event="x failed", what="w")
    assert [(event, fields["what"], fields["error"]) for event, fields in log.errors] == [
        ("x failed", "w", "ValueError: bad")]


async def test_stop_tasks_cancels_every_task_and_waits_for_each() -> None:
    log = RecordingLog()
    started = [asyncio.Event() for _ in range(3)]
    tasks = [spawn(forever(e), name=f"t:{i}", log=log, event="failed") for i, e in enumerate(started)]

    async def broken() -> None:
        raise KeyError("k")

    failed = spawn(broken(), name="t:failed", log=log, event="failed")
    for e in started:
        await asyncio.wait_for(e.wait(), 30)
    await asyncio.wait({failed}, timeout=30)
    failures = await stop_tasks([*tasks, failed])
    assert all(t.cancelled() for t in tasks)
    assert [type(f) for f in failures] == [KeyError]
    assert [fields["task"] for _, fields in log.errors] == ["t:failed"]


async def test_a_task_that_swallows_a_cancel_is_cancelled_again() -> None:
    swallowed = asyncio.Event()
    started = asyncio.Event()

    async def stubborn() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # a loop that catches too much: the first cancel is lost
        await asyncio.Event().wait()

    task = spawn(stubborn(), name="t:stubborn", log=RecordingLog(), event="failed")
    await asyncio.wait_for(started.wait(), 30)
    assert await stop_task(task, patience=0.01) is None
    assert swallowed.is_set() and task.cancelled()


async def test_stopping_lets_a_cancel_of_the_caller_through() -> None:
    inner_started, stopping = asyncio.Event(), asyncio.Event()
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        inner_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopping.set()
            await release.wait()  # takes its time to clean up

    task = spawn(slow_to_stop(), name="t:slow", log=RecordingLog(), event="failed")
    await asyncio.wait_for(inner_started.wait(), 30)
    stopper = asyncio.get_running_loop().create_task(stop_task(task, patience=30))
    await asyncio.wait_for(stopping.wait(), 30)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    release.set()
    assert await stop_task(task) is None and task.cancelled()


async def test_running_stops_the_task_when_the_block_ends() -> None:
    started = asyncio.Event()
    log = RecordingLog()
    async with running(forever(started), name="t:block", log=log, event="failed") as task:
        await asyncio.wait_for(started.wait(), 30)
        assert not task.done()
    assert task.cancelled() and log.errors == []
