"""A controller's background loop as a named task: started, supervised and
stopped in one place; and the list + watch that keeps a controller's cache
of one hub kind.

`background_loop` runs a coroutine as a named asyncio task for the body of an
`async with` (a controller's set-up/yield/tear-down), logs a failure instead
of losing it, and cancels and awaits the task on exit. It must never swallow
a failure silently or outlive the `async with`.

`watch_hub_kind` watches one kind of the hub store from a resourceVersion,
handing each event to the cache; when the watch ends it lists again (410
Gone at once, a store error after a capped backoff with jitter).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apiserver.registry import ResourceType
from federator.clusters.reflector import Backoff
from federator.controllers.context import HubContext
from federator.runtime.tasks import running
from federator.store.protocol import StoreError


@contextlib.asynccontextmanager
async def background_loop(
    coro: Coroutine[Any, Any, None], *, name: str, what: str, log: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `coro` as task `name` while the block runs; `what` names it in the
    failure log line."""
    async with running(coro, name=name, log=log, event=f"{what} failed") as task:
        yield task


async def watch_hub_kind(
    hub: HubContext, rt: ResourceType, *, relist: Callable[[], Awaitable[str]],
    apply: Callable[[str, dict[str, Any]], Awaitable[None] | None], log: Any, resource_version: str | None = None,
) -> None:
    """Keep a cache of kind `rt`: `relist()` (fills the cache, returns the list's resourceVersion) when
    there is no `resource_version` to watch from, then `apply(event type, object)` for every watch event
    (awaited, in order, when it is a coroutine function: member sync starts and stops a cluster's sync)."""
    attempt = 0
    rv = resource_version
    rng = random.Random()
    s = hub.settings
    backoff = Backoff(initial=s.watch.backoff_initial_seconds, maximum=s.watch.backoff_max_seconds)
    while True:
        try:
            if rv is None:
                rv = await relist()
            async for event in hub.storage.watch(rt, resource_version=rv):
                attempt = 0
                obj = event.object
                rv = Body(obj).resource_version or rv
                applied = apply(event.type, obj)
                if applied is not None:
                    await applied
            rv = None  # the storage closed the watch: list again
        except (ApiError, StoreError) as e:
            expired = isinstance(e, ApiError) and e.code == 410
            rv = None
            if expired:
                log.info(f"{rt.kind} watch expired; re-listing")
                continue
            delay = backoff.delay(attempt, rng)
            attempt += 1
            log.warning(f"{rt.kind} watch failed; retrying", waiting_for="the hub store", delay_s=round(delay, 3),
                        error=str(e))
            await asyncio.sleep(delay)
