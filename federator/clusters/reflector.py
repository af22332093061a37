"""Reflector: keeps one member resource (Nodes, Pods or a PodGroup kind) flowing into a sink.

The client-go reflector loop, over `MemberClient`:
1. LIST (paged) unless it has a resourceVersion to resume from (a
   checkpoint's); the difference between the list and what the sink holds
   (`sink.known`) goes to the sink as ADDED / MODIFIED / DELETED events;
2. WATCH from that resourceVersion with bookmarks; each chunk of events is
   one batch for the sink; bookmarks only advance the resourceVersion;
3. when the member ends the watch (timeoutSeconds) it watches again at once
   from the last resourceVersion;
4. on 410 Expired (the resourceVersion left the member's window) it
   re-lists and applies the difference (step 1) — the only time it LISTs
   after the first sync;
5. when the connection fails it waits (capped exponential backoff with
   jitter, logging what it waits for) and resumes from the last
   resourceVersion, without a LIST.

A LIST and the folding of its result run inside `list_gate` when one is
given (the hub shares one among all its reflectors): a LIST's objects are
held in memory all at once, and a hub that starts syncing 100 clusters
would otherwise hold all of their lists at the same moment. CPU-bound
either way, the initial sync takes no longer for it; the hub's peak heap,
and the heap the allocator keeps once those lists are freed, are smaller.

It reports watch state to a listener (health) and never touches the hub
store. It must never log an object body or a credential.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from federator.apis.views import Body
from federator.clusters.client import (
    Expired,
    ListResult,
    MemberApiError,
    MemberClient,
    MemberClientError,
    MemberUnreachable,
    ResourceKind,
)
from federator.clusters.snapshot_builder import object_key
from federator.obs import METRICS, Metrics, get_logger

__all__ = ["Backoff", "Reflector", "ReflectorListener", "ReflectorSink", "relist_difference"]

Event = tuple[str, Mapping[str, Any]]


class ReflectorSink(Protocol):
    def known(self, resource: str) -> Mapping[str, str]:
        """key ("ns/name" or "name") -> resourceVersion of every object the sink holds."""
        ...

    def apply(self, resource: str, events: Sequence[Event], *, resource_version: str, received_at: float) -> None:
        """Fold a batch (possibly empty: a bookmark) and record the resourceVersion."""
        ...


class ReflectorListener(Protocol):
    def watch_established(self, resource: str) -> None: ...

    def watch_lost(self, resource: str, error: MemberClientError) -> None: ...

    def relisting(self, resource: str, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with jitter: attempt n waits min(cap, initial * 2**n) * U(0.5, 1)."""

    initial: float = 0.2
    maximum: float = 10.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.maximum, self.initial * float(2 ** min(attempt, 30)))
        return float(base * (0.5 + 0.5 * rng.random()))


def relist_difference(items: Sequence[Mapping[str, Any]], known: Mapping[str, str], *,
                      resource_version: str) -> list[Event]:
    """The events that turn `known` (key -> resourceVersion) into the listed `items`.

    Unchanged objects (same resourceVersion) produce nothing; vanished ones
    a DELETED event carrying only their name and namespace."""
    events: list[Event] = []
    seen: set[str] = set()
    for item in items:
        key = object_key(item)
        if not key:
            continue
        seen.add(key)
        rv = Body(item).resource_version or None
        previous = known.get(key)
        if previous is None:
            events.append(("ADDED", item))
        elif previous != rv:
            events.append(("MODIFIED", item))
    for key in known:
        if key not in seen:
            namespace, _, name = key.rpartition("/")
            gone: dict[str, Any] = {"name": name, "resourceVersion": resource_version}
            if namespace:
                gone["namespace"] = namespace
            events.append(("DELETED", {"metadata": gone}))
    return events


class Reflector:
    """List-then-watch of one member resource into a sink (see the module docstring)."""

    def __init__(
        self,
        *,
        client: MemberClient,
        resource: ResourceKind,
        sink: ReflectorSink,
        listener: ReflectorListener,
        backoff: Backoff | None = None,
        resume_from: str | None = None,
        watch_timeout_seconds: tuple[int, int] = (300, 600),
        page_size: int = 500,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        logger: Any = None,
        label_selector: str | None = None,
        list_gate: asyncio.Semaphore | None = None,
    ) -> None:
        self.client = client
        #: LISTs (and folding their result) happen inside it, when given (see the module docstring)
        self.list_gate = list_gate
        #: only objects matching this selector flow into the sink (e.g. a hub's own member objects)
        self.label_selector = label_selector or None
        self.resource = resource
        self.key = resource.key
        self.sink = sink
        self.listener = listener
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = resume_from or None
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size
        self.metrics = metrics or METRICS
        self._rng = rng or random.Random()
        self.log = (logger or get_logger("clusters.reflector")).bind(cluster=client.cluster, resource=self.key)
        #: LIST round-trips made (full lists, each possibly several pages)
        self.lists = 0
        self.watching = False
        self._event_counters: dict[str, Any] = {}  # event type -> labelled counter (labels() is slow)

    async def run(self) -> None:
        """Run until cancelled."""
        loop = asyncio.get_running_loop()
        failures = 0
        expired_in_a_row = 0
        reason = "initial" if self.resource_version is None else ""
        if self.resource_version is not None:
            self.log.info("resuming watch from a stored resourceVersion", resource_version=self.resource_version)
        while True:
            try:
                if self.resource_version is None:
                    self.listener.relisting(self.key, reason or "initial")
                    await self._relist(reason or "initial", loop)
                await self._watch(loop)
                # the member ended the stream (timeoutSeconds): watch again at once
                failures = 0
                expired_in_a_row = 0
                self.metrics.member_watch_restarts.labels(cluster=self.client.cluster, resource=self.key,
                                                          reason="timeout").inc()
            except Expired as e:
                self.watching = False
                self.resource_version = None
                reason = "expired"
                expired_in_a_row += 1
                self.log.info("resourceVersion expired; re-listing", error=str(e))
                self.metrics.member_watch_restarts.labels(cluster=self.client.cluster, resource=self.key,
                                                          reason="expired").inc()
                if expired_in_a_row > 1:
                    await self._wait(expired_in_a_row - 2, "a consistent list after repeated 410 Expired")
            except (MemberUnreachable, MemberApiError) as e:
                self.watching = False
                self.listener.watch_lost(self.key, e)
                kind = "unreachable" if isinstance(e, MemberUnreachable) else "error"
                self.metrics.member_watch_restarts.labels(cluster=self.client.cluster, resource=self.key,
                                                          reason=kind).inc()
                await self._wait(failures, "the member API to answer" if kind == "unreachable"
                                 else "the member API to accept the request", error=str(e))
                failures += 1
            except MemberClientError as e:  # e.g. the client was closed under us
                self.watching = False
                self.listener.watch_lost(self.key, e)
                await self._wait(failures, "a usable client", error=str(e))
                failures += 1

    async def _wait(self, attempt: int, waiting_for: str, **detail: Any) -> None:
        delay = self.backoff.delay(attempt, self._rng)
        self.log.warning("member watch interrupted; retrying", waiting_for=waiting_for, attempt=attempt + 1,
                         delay_s=round(delay, 3), resume_from=self.resource_version or "(re-list)", **detail)
        await asyncio.sleep(delay)

    async def _relist(self, reason: str, loop: asyncio.AbstractEventLoop) -> None:
        if self.list_gate is None:
            await self._list_and_apply(reason, loop)
            return
        async with self.list_gate:
            await self._list_and_apply(reason, loop)

    async def _list_and_apply(self, reason: str, loop: asyncio.AbstractEventLoop) -> None:
        result: ListResult = await self.client.list_all(self.resource, page_size=self.page_size,
                                                         label_selector=self.label_selector)
        received = loop.time()
        self.lists += 1
        self.metrics.member_relists.labels(cluster=self.client.cluster, resource=self.key, reason=reason).inc()
        events = relist_difference(result.items, self.sink.known(self.key), resource_version=result.resource_version)
        self.sink.apply(self.key, events, resource_version=result.resource_version, received_at=received)
        self.resource_version = result.resource_version
        self.log.info("listed", reason=reason, items=len(result.items), changes=len(events),
                      resource_version=result.resource_version)

    async def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.resource_version is not None
        low, high = self.watch_timeout_seconds
        timeout = self._rng.randint(low, high) if high > low else low

        def opened() -> None:
            self.watching = True
            self.listener.watch_established(self.key)

        counters = self._event_counters
        async for batch in self.client.watch_batches(
            self.resource, resource_version=self.resource_version, timeout_seconds=timeout, on_open=opened,
            label_selector=self.label_selector,
        ):
            received = loop.time()
            events: list[Event] = []
            for ev in batch:
                if ev.type != "BOOKMARK":
                    events.append((ev.type, ev.object))
                counted = counters.get(ev.type)
                if counted is None:
                    counted = counters[ev.type] = self.metrics.member_watch_events.labels(
                        cluster=self.client.cluster, resource=self.key, type=ev.type)
                counted.inc()
            rv = batch[-1].resource_version or self.resource_version
            self.sink.apply(self.key, events, resource_version=rv, received_at=received)
            self.resource_version = rv
        self.watching = False
