"""Waiting on an asyncio.Event with a timeout, the one way federator does it;
and `LoopSlice`, the one way a long pass shares the event loop.

`asyncio.wait_for(event.wait(), t)` is not used anywhere: on Python 3.11 it
can swallow a cancellation that arrives just as the event fires, and a loop
built on it then never stops (a hung Ctrl-C). `asyncio.timeout` has no such
race. This module holds no state and must never import anything of federator.
"""

from __future__ import annotations

import asyncio
import time


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds pass (None: no limit);
    True if it is set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(None if timeout is None else max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


class LoopSlice:
    """Lets a long pass of mostly synchronous steps (a GC pass, a status resync over every job) share
    the event loop: `await slice.maybe_yield()` between steps yields once the pass has held the loop
    for `seconds` since it last yielded. A step that reads the sqlite store inline never suspends, so
    without this a pass over thousands of jobs held every request and watch event back for its whole
    length."""

    def __init__(self, seconds: float = 0.005) -> None:
        self.seconds = seconds
        self._since = time.perf_counter()

    async def maybe_yield(self) -> None:
        if time.perf_counter() - self._since >= self.seconds:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
