"""Waiting on an asyncio.Event with a timeout, the one way federator does it.

`asyncio.wait_for(event.wait(), t)` is not used anywhere: on Python 3.11 it
can swallow a cancellation that arrives just as the event fires, and a loop
built on it then never stops (a hung Ctrl-C). `asyncio.timeout` has no such
race. This module holds no state and must never import anything of federator.
"""

from __future__ import annotations

import asyncio


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
