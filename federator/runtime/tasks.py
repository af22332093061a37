"""Background loops as named, supervised asyncio tasks: the one way federator
runs a coroutine beside its caller (a controller's loop, a member's reflector,
a simulated controller).

- `supervised(coro, log=..., event=..., **fields)` awaits `coro`; when it
  raises, it logs `event` once, in full (the task's name, the fields, the
  exception and its traceback), and re-raises, so the task ends failed and
  the failure is never lost. A cancellation is how a loop stops: not logged.
- `spawn(...)` starts `supervised(...)` as a task with a name.
- `stop_task` / `stop_tasks` cancel and wait until the tasks have ended (a
  task that swallowed a cancel is cancelled again), never raise what the task
  raised (it was logged when it happened) but return it, and let a cancel of
  the caller through.
- `running(...)` is `spawn` for the body of an `async with`.

No call site restarts a crashed loop (each loop retries its own I/O with
backoff and a crash is a bug to see), so nothing here restarts one.

It imports nothing of federator but the logger's home (`federator.obs`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any

from federator.obs import get_logger

__all__ = ["running", "spawn", "stop_task", "stop_tasks", "supervised"]

Loop = Awaitable[None]

#: how long `stop_task` waits for a cancelled task before it cancels it again
STOP_PATIENCE_SECONDS = 2.0


async def supervised(coro: Loop, *, log: Any, event: str, **fields: Any) -> None:
    """Await `coro`; if it raises, log `event` with `fields`, the task's name and the exception, then re-raise."""
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - a dead loop must be visible
        task = asyncio.current_task()
        log.error(event, **fields, task=task.get_name() if task is not None else None,
                  error=f"{type(e).__name__}: {e}", exc_info=True)
        raise


def spawn(coro: Loop, *, name: str, log: Any, event: str, **fields: Any) -> asyncio.Task[None]:
    """Start `coro` as the task `name`, supervised (see `supervised`)."""
    return asyncio.get_running_loop().create_task(supervised(coro, log=log, event=event, **fields), name=name)


async def stop_task(task: asyncio.Task[Any], *, patience: float = STOP_PATIENCE_SECONDS) -> BaseException | None:
    """Cancel `task` and wait until it has ended, cancelling again if a cancel got lost; what it raised
    (None if it returned or was cancelled). `asyncio.wait` never raises the task's outcome and lets a
    cancel of the caller through."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=patience)
        if not task.done():
            get_logger("runtime.tasks").warning("task ignored a cancel; cancelling again", task=task.get_name())
    return None if task.cancelled() else task.exception()


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], *,
                     patience: float = STOP_PATIENCE_SECONDS) -> list[BaseException]:
    """Cancel every task first, then wait for each (`stop_task`); what the failed ones raised."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    failures = []
    for task in tasks:
        failure = await stop_task(task, patience=patience)
        if failure is not None:
            failures.append(failure)
    return failures


@contextlib.asynccontextmanager
async def running(coro: Loop, *, name: str, log: Any, event: str, **fields: Any) -> AsyncIterator[asyncio.Task[None]]:
    """`spawn` for the body of the block; the task is stopped (`stop_task`) when the block ends."""
    task = spawn(coro, name=name, log=log, event=event, **fields)
    try:
        yield task
    finally:
        await stop_task(task)
