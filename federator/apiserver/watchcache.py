"""The watch cache: one store watch per resource, fanned out to every watcher.

A `ResourceFeed` follows the store's watch for one resource prefix and keeps
the most recent events in a list. Each event is decoded (and, for HTTP
watchers, JSON-encoded) at most once, however many watchers read it; a
watcher is just an index into the list, so a burst of events reaches it as
one batch. A watcher that starts from a revision the feed no longer covers
reads the store directly instead (the store raises Compacted if that is too
old, which becomes 410 Expired).

Objects reachable from a `CachedEvent` are shared between watchers: readers
must never mutate them (ObjectStorage.watch hands out fresh copies). This
module must never import aiohttp, the simulator or the hub.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson

from federator.obs import get_logger
from federator.store.protocol import Compacted, Event, EventType, Store, StoreUnavailable
from federator.waits import wait_event

_log = get_logger("apiserver.watchcache")

JSONObject = dict[str, Any]


class CachedEvent:
    """One change to one object, decoded lazily and at most once."""

    __slots__ = ("revision", "type", "key", "_value", "_prev_value", "_obj", "_prev", "_json", "_lines")

    def __init__(self, ev: Event) -> None:
        kv = ev.kv
        self.revision = kv.mod_revision
        self.key = kv.key
        if ev.type is EventType.DELETE:
            self.type = "DELETED"
        elif kv.create_revision == kv.mod_revision:
            self.type = "ADDED"
        else:
            self.type = "MODIFIED"
        self._value = kv.value
        self._prev_value = ev.prev_kv.value if ev.prev_kv is not None else None
        self._obj: JSONObject | None = None
        self._prev: JSONObject | None = None
        self._json: bytes | None = None
        self._lines: dict[str, bytes] | None = None

    def obj(self) -> JSONObject:
        """The object after the change (for DELETED: its last state), stamped
        with this event's revision. Shared: do not mutate."""
        obj = self._obj
        if obj is None:
            obj = orjson.loads(self._value)
            meta = obj.get("metadata")
            if not isinstance(meta, dict):
                meta = obj["metadata"] = {}
            meta["resourceVersion"] = str(self.revision)
            self._obj = obj
        return obj

    def prev(self) -> JSONObject | None:
        """The object before the change, if the store reported it."""
        if self._prev is None and self._prev_value is not None:
            self._prev = orjson.loads(self._prev_value)
        return self._prev

    def json(self) -> bytes:
        data = self._json
        if data is None:
            data = self._json = orjson.dumps(self.obj())
        return data

    def line(self, event_type: str) -> bytes:
        """`{"type":...,"object":...}\\n`, encoded once per event type."""
        lines = self._lines
        if lines is None:
            lines = self._lines = {}
        data = lines.get(event_type)
        if data is None:
            data = lines[event_type] = b'{"type":"' + event_type.encode() + b'","object":' + self.json() + b"}\n"
        return data

    def fresh_copy(self) -> JSONObject:
        result: JSONObject = orjson.loads(self.json())
        return result


class FeedReset(Exception):
    """The feed lost continuity (its store watch was compacted); watchers
    reading it must end so their clients resume from their last revision."""


class ResourceFeed:
    """The shared event list of one resource prefix."""

    def __init__(self, store: Store, prefix: str, *, capacity: int, name: str) -> None:
        self.store = store
        self.prefix = prefix
        self.capacity = max(16, capacity)
        self.name = name
        self.events: list[CachedEvent] = []
        self.revs: list[int] = []
        self.base = 0  # absolute index of events[0]
        #: every event with revision >= covers_from is in `events` (or was trimmed, see base)
        self.covers_from = 0
        #: the newest revision this feed has processed (0 before start)
        self.last_revision = 0
        self.epoch = 0
        self.closed = False
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None

    # ------------------------------------------------------------ lifecycle

    async def ensure_started(self) -> None:
        if self._started is None:
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._task = loop.create_task(self._run(), name=f"watch-cache:{self.name}")
        await asyncio.shield(self._started)

    async def _run(self) -> None:
        assert self._started is not None
        while not self.closed:
            try:
                start = await self.store.current_revision() + 1
            except StoreUnavailable as e:
                self._finish(e)
                return
            self.covers_from = start
            self.last_revision = max(self.last_revision, start - 1)
            if not self._started.done():
                self._started.set_result(None)
            try:
                async for ev in self.store.watch(self.prefix, from_revision=start):
                    self._append(CachedEvent(ev))
            except Compacted as e:
                # We fell behind the store's retained window: events are lost
                # to us, so every watcher of this epoch must end and resume.
                _log.warning("watch cache fell behind compaction; restarting", feed=self.name, error=str(e))
                self._reset()
                continue
            except StoreUnavailable as e:
                self._finish(e)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a broken feed must not take the server down silently
                _log.error("watch cache failed", feed=self.name, error=repr(e))
                self._finish(e)
                return
            self._finish(None)
            return

    def _finish(self, error: BaseException | None) -> None:
        self.closed = True
        if self._started is not None and not self._started.done():
            if error is not None:
                self._started.set_exception(error)
            else:
                self._started.set_result(None)
        self._wake()

    def _reset(self) -> None:
        self.epoch += 1
        self.base += len(self.events)
        self.events = []
        self.revs = []
        self._wake()

    async def close(self) -> None:
        self.closed = True
        self._wake()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._started is not None and not self._started.done():
            self._started.set_exception(StoreUnavailable("watch cache closed"))
            # Nobody may be awaiting it; mark the exception retrieved.
            self._started.exception()

    # ------------------------------------------------------------ events

    def _append(self, ev: CachedEvent) -> None:
        self.events.append(ev)
        self.revs.append(ev.revision)
        self.last_revision = ev.revision
        if len(self.events) > 2 * self.capacity:
            self._trim()
        self._wake()

    def _trim(self) -> None:
        drop = len(self.events) - self.capacity
        revs = self.revs
        while drop < len(revs) and revs[drop] == revs[drop - 1]:
            drop += 1  # never split one revision
        self.covers_from = revs[drop - 1] + 1
        del self.events[:drop]
        del self.revs[:drop]
        self.base += drop

    def _wake(self) -> None:
        changed = self._changed
        self._changed = asyncio.Event()
        changed.set()

    def covers(self, from_revision: int) -> bool:
        """True if every event with revision >= from_revision can be read here."""
        return not self.closed and self._started is not None and self._started.done() \
            and from_revision >= self.covers_from

    def position(self, from_revision: int) -> int:
        """The absolute index of the first event with revision >= from_revision."""
        return self.base + bisect.bisect_left(self.revs, from_revision)

    def read(self, position: int, epoch: int) -> list[CachedEvent]:
        """Events from an absolute position; raises FeedReset if the reader
        fell behind the trimmed head or the feed restarted."""
        if epoch != self.epoch or position < self.base:
            raise FeedReset(self.name)
        return self.events[position - self.base:]

    def changed(self) -> asyncio.Event:
        return self._changed


async def store_events(store: Store, prefix: str, from_revision: int) -> AsyncGenerator[list[CachedEvent], None]:
    """The slow path: read a store watch directly, one batch per event."""
    async for ev in store.watch(prefix, from_revision=from_revision):
        yield [CachedEvent(ev)]


async def follow(
    feed: ResourceFeed,
    store: Store,
    *,
    from_revision: int,
    stop: Callable[[], bool],
    idle_timeout: float | None = None,
) -> AsyncIterator[list[CachedEvent]]:
    """Batches of events with revision >= from_revision, from the feed when it
    covers them, else straight from the store. Yields an empty list after
    `idle_timeout` seconds without events (so callers can send bookmarks or
    notice a closed connection). Ends when `stop()` is true or the feed ends.
    Raises Compacted (from the store) and FeedReset (lost continuity)."""
    if feed.covers(from_revision):
        epoch = feed.epoch
        pos = feed.position(from_revision)
        while not stop():
            batch = feed.read(pos, epoch)
            if batch:
                pos += len(batch)
                yield batch
                continue
            if feed.closed:
                return
            if not await wait_event(feed.changed(), idle_timeout):
                yield []
        return
    iterator = store_events(store, feed.prefix, from_revision)
    # Keep one pending __anext__ across idle timeouts: cancelling it would
    # kill the underlying store watch.
    pending: asyncio.Future[list[CachedEvent]] | None = None
    try:
        while not stop():
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=idle_timeout)
            if not done:
                yield []
                continue
            task, pending = pending, None
            try:
                batch = task.result()
            except StopAsyncIteration:
                return
            yield batch
    finally:
        if pending is not None:
            pending.cancel()
            try:
                await pending
            except (asyncio.CancelledError, StopAsyncIteration, Exception):  # noqa: BLE001 - shutting down
                pass
        await iterator.aclose()
