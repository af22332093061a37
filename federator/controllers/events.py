"""The hub's Event recording: one EventRecorder per leadership term.

`event_recording` (first in hub/app.py's hub_controllers(), so every other
controller records into it) puts a fresh `EventRecorder` into `hub.events`,
runs its writer (every Event goes through this term's `hub.storage`, which
the hub fences with the leader's token) and a pass every
`event_gc_interval_seconds` (HubSettings.events, 60 s) that deletes Events not
seen for `event_ttl_seconds` (3600 s, kube's --event-ttl). The writer writes
at most `event_writes_per_second` (100): Events never crowd out the
controllers' own writes. On the way out it gives pending Events a moment to
be written.

It must never fail another controller: recording is in memory, the writer
and the expiry pass log their failures (rate-limited) and keep going.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from federator.apis.jobkinds import source_of_twin
from federator.apiserver.events import EventRecorder
from federator.apiserver.registry import ResourceType
from federator.controllers.context import HubContext
from federator.controllers.jobs import hub_id
from federator.controllers.loops import background_loop
from federator.obs import RepeatedFailureLog, get_logger

_log = get_logger("controllers.events")

#: How long a stopping term waits for pending Events to be written.
FLUSH_SECONDS = 1.0


async def _expire_events(hub: HubContext, recorder: EventRecorder, rt: ResourceType, *, interval: float) -> None:
    failures = RepeatedFailureLog(_log, "expiring old Events failed; will retry", every_seconds=300.0)
    while True:
        await asyncio.sleep(interval)
        try:
            deleted = await recorder.expire(hub.storage, rt)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - logged; the next pass tries again
            failures.failed(e, now=time.monotonic())
            continue
        failures.succeeded("expiring old Events works again")
        if deleted:
            _log.info("expired Events deleted", deleted=deleted, ttl_s=recorder.ttl_seconds)


async def event_recording(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the term's Event recorder, its writer and the expiry pass."""
    knobs = hub.settings.events
    ttl = knobs.ttl_seconds
    interval = knobs.gc_interval
    rt = hub.registry.by_kind("v1", "Event")
    if rt is None:
        raise RuntimeError("event_recording needs the hub registry's core v1 Event kind")
    # a twin's Events are also its upstream object's (apis/jobkinds): `kubectl describe pytorchjob` lists them
    recorder = EventRecorder(instance=f"federator-hub-{hub_id(hub)}", ttl_seconds=ttl, metrics=hub.metrics,
                             writes_per_second=knobs.writes_per_second, also_on=source_of_twin)
    hub.events = recorder
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(background_loop(
            recorder.run(hub.storage, rt), name="hub-event-writer", what="event writer", log=_log))
        await stack.enter_async_context(background_loop(
            _expire_events(hub, recorder, rt, interval=max(0.05, interval)), name="hub-event-expiry",
            what="event expiry", log=_log))
        try:
            yield
        finally:
            if not await recorder.flush(FLUSH_SECONDS):
                _log.info("stopping with Events not yet written", pending=recorder.pending)
