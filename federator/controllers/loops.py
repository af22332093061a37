"""A controller's background loop as a named task: started, supervised and
stopped in one place.

`background_loop` runs a coroutine as a named asyncio task for the body of an
`async with` (a controller's set-up/yield/tear-down), logs a failure instead
of losing it, and cancels and awaits the task on exit. It must never swallow
a failure silently or outlive the `async with`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


async def _supervised(coro: Coroutine[Any, Any, None], *, what: str, log: Any) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - a dead loop must be visible
        log.error(f"{what} failed", error=f"{type(e).__name__}: {e}", exc_info=True)
        raise


@contextlib.asynccontextmanager
async def background_loop(
    coro: Coroutine[Any, Any, None], *, name: str, what: str, log: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `coro` as task `name` while the block runs; `what` names it in the
    failure log line."""
    task = asyncio.get_running_loop().create_task(_supervised(coro, what=what, log=log), name=name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was logged by _supervised
            await task
