"""The watch cache: the current state and the recent events of every
resource, kept from one store watch, serving lists and watches.

`WatchCache` follows ONE store watch over the store's whole prefix and hands
each event to the `ResourceFeed` of its resource (one per resource prefix,
`<store prefix>registry/<group>/<plural>/`; other keys only advance the revision).
A feed keeps:
- the current state: key -> (stored bytes, mod revision), filled by one
  consistent `store.range(prefix)` at some revision R and kept current by the
  events after R (PUT replaces, DELETE removes). Entries stay raw bytes: a
  list decodes a fresh copy of each object it returns, so nothing shared is
  ever handed out and memory stays close to the stored size;
- the most recent events, for watchers. Each event is decoded (and, for HTTP
  watchers, JSON-encoded) at most once, however many watchers read it; a
  watcher is just an index into the list, so a burst of events reaches it as
  one batch. A watcher that starts from a revision the feed no longer covers
  reads the store directly instead (the store raises Compacted if that is too
  old, which becomes 410 Expired).

Why one watch for the whole store and not one per resource: a consistent
("most recent") read must know that the cache has seen every change up to
the store's current revision N. kube-apiserver learns that from etcd progress
notifications (RequestWatchProgress). The Store protocol has no progress
request, and a watch on one resource's prefix yields nothing for revisions
that only touched other keys, so a per-resource cache could never prove it had
reached N while other kinds were being written. One watch over the store
prefix sees every revision of the memory and sqlite stores, and of an etcd
that only this store's prefix writes to: `WatchCache.revision` reaches N as
soon as the change at N has been applied. Where that proof does not come in
time (another client writes the same etcd outside our prefix, the cache is
restarting, the store is down), `ResourceFeed.wait_fresh` gives up and the
caller reads the store directly: correct by construction, only slower.

What makes `revision` a proof: events are applied in revision order, without
an await between them, and a store delivers all events of one revision
without suspending in between (iterate_log yields a never-split batch, etcd
one WatchResponse per revision batch; a wrapping Store must keep that, as a
pass-through async generator does), so whenever a reader runs, every feed
that is ready reflects exactly the state at max(its listing revision,
`revision`). ObjectStorage decides when a list may wait for that proof.

The price of one watch: when it falls behind compaction (only a burst larger
than a memory store's retained window, written without yielding to the loop,
or an etcd compaction racing a reconnect), every feed resets: its watchers
end (FeedReset; clients resume from their last revision) and it re-lists.

Objects reachable from a `CachedEvent` are shared between watchers: readers
must never mutate them (ObjectStorage hands out fresh copies). This module
must never import aiohttp, the simulator or the hub.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
from sortedcontainers import SortedDict

from federator.obs import get_logger
from federator.store.protocol import Compacted, Event, EventType, Store, StoreUnavailable
from federator.runtime.tasks import stop_tasks
from federator.runtime.waits import wait_event

_log = get_logger("apiserver.watchcache")

JSONObject = dict[str, Any]

#: One object of a feed's state: the stored bytes (without
#: metadata.resourceVersion) and the object's mod revision.
StateEntry = tuple[bytes, int]


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


def _prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with `prefix`
    (our prefixes end with "/", never with the largest code point)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class ResourceFeed:
    """The current state and the shared event list of one resource prefix.

    Lifecycle: created idle by `WatchCache.feed`; `want()` (or
    `ensure_started`/`wait_fresh`) asks the cache to list it; it is `ready`
    once its state is filled, and stays ready, following the cache's store
    watch, until the cache resets (compaction: it re-lists by itself) or
    closes (`closed`)."""

    def __init__(self, cache: WatchCache, prefix: str, *, capacity: int, name: str) -> None:
        self.cache = cache
        self.store = cache.store
        self.prefix = prefix
        self.capacity = max(16, capacity)
        self.name = name
        self.events: list[CachedEvent] = []
        self.revs: list[int] = []
        self.base = 0  # absolute index of events[0]
        #: every event with revision >= covers_from is in `events` (or was trimmed, see base)
        self.covers_from = 0
        self.epoch = 0
        #: key -> (stored bytes, mod revision); valid while `ready`
        self.state: Any = SortedDict()
        self.ready = False
        #: the revision of the range that filled `state`
        self.listed_at = 0
        #: why the last listing failed (None while listing or once ready)
        self.error: BaseException | None = None
        self.wanted = False
        self._buffer: list[Event] | None = None
        self._listing: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # ------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        return self.cache.closed

    @property
    def last_revision(self) -> int:
        """The revision the state reflects (0 while not ready)."""
        if not self.ready:
            return 0
        return max(self.listed_at, self.cache.revision)

    def want(self) -> None:
        """Start the cache and this feed's listing if they are not running
        (never waits)."""
        self.wanted = True
        self.cache.start()
        if self.cache.positioned:
            self._start_listing()

    async def ensure_started(self) -> None:
        """Wait until the state is filled; raises the store's error if the
        listing failed or the cache closed."""
        self.want()
        while True:
            if self.closed:
                raise self.cache.error or StoreUnavailable("watch cache closed")
            if self.ready:
                return
            if self.error is not None and self._listing is None:
                raise self.error
            await self.cache.progressed(None)

    async def wait_fresh(self, revision: int, timeout: float) -> bool:
        """True as soon as the state reflects `revision` or a later one; False
        if that cannot be shown within `timeout` seconds (the cache is closed,
        its listing failed, or no change at or past `revision` reached it)."""
        if self.ready and not self.closed and self.last_revision >= revision:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.want()
        while True:
            if self.closed:
                return False
            if self.ready and self.last_revision >= revision:
                return True
            if not self.ready and self.error is not None and self._listing is None:
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.cache.progressed(remaining)

    def _start_listing(self) -> None:
        if self.ready or self._listing is not None or self.cache.closed:
            return
        self.error = None
        # From here on the cache buffers this prefix's events: anything it
        # applied before is at or below the revision the range will read at.
        self._buffer = []
        self._listing = asyncio.get_running_loop().create_task(self._list(), name=f"watch-cache-list:{self.name}")

    async def _list(self) -> None:
        me = asyncio.current_task()
        try:
            rr = await self.store.range(self.prefix)
        except asyncio.CancelledError:
            if self._listing is me:  # not cancelled by a reset or the close (they clear it first)
                self._buffer = None
                self._listing = None
            raise
        except Exception as e:  # noqa: BLE001 - recorded; readers fall back to the store
            if self._listing is me:
                self._buffer = None
                self._listing = None
                self.error = e
                _log.warning("watch cache could not list", feed=self.name, error=str(e))
                self.cache.wake_progress()
            return
        if self._listing is not me:
            return
        buffered = self._buffer or []
        self._buffer = None
        self._listing = None
        self.state = SortedDict((kv.key, (kv.value, kv.mod_revision)) for kv in rr.kvs)
        self.listed_at = rr.revision
        self.covers_from = rr.revision + 1
        self.ready = True
        for ev in buffered:
            if ev.kv.mod_revision > rr.revision:
                self._apply_now(ev)
        self._wake()
        self.cache.wake_progress()

    def _reset(self) -> None:
        """The cache lost continuity: end every watcher, forget the state."""
        self.epoch += 1
        self.base += len(self.events)
        self.events = []
        self.revs = []
        self.ready = False
        self.state = SortedDict()
        self._buffer = None
        task, self._listing = self._listing, None
        if task is not None:
            task.cancel()
        self._wake()

    def _close(self) -> None:
        self.ready = False
        self._buffer = None
        task, self._listing = self._listing, None
        if task is not None:
            task.cancel()
        self._wake()

    # ------------------------------------------------------------ events

    def apply(self, ev: Event) -> None:
        """One store event under this prefix, in revision order."""
        if not self.ready:
            if self._buffer is not None:
                self._buffer.append(ev)
            return
        if ev.kv.mod_revision <= self.listed_at:
            return  # already in the listed state
        self._apply_now(ev)

    def _apply_now(self, ev: Event) -> None:
        kv = ev.kv
        if ev.type is EventType.DELETE:
            self.state.pop(kv.key, None)
        else:
            self.state[kv.key] = (kv.value, kv.mod_revision)
        self._append(CachedEvent(ev))

    def _append(self, ev: CachedEvent) -> None:
        self.events.append(ev)
        self.revs.append(ev.revision)
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
        return not self.closed and self.ready and from_revision >= self.covers_from

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

    # ------------------------------------------------------------ state

    def entries(self, prefix: str) -> list[tuple[str, StateEntry]]:
        """(key, entry) of every object under `prefix` (this feed's prefix or
        a namespace below it), in key order: a snapshot, consistent at
        `last_revision` as long as the caller does not await in between."""
        state = self.state
        if prefix == self.prefix:
            return list(state.items())
        lo = state.bisect_left(prefix)
        hi = state.bisect_left(_prefix_end(prefix))
        result: list[tuple[str, StateEntry]] = state.items()[lo:hi]
        return result

    def entry(self, key: str) -> StateEntry | None:
        found: StateEntry | None = self.state.get(key)
        return found


class WatchCache:
    """One store watch over the whole store prefix, applied to the feeds of
    the resources (see the module docstring)."""

    def __init__(self, store: Store, *, route: Callable[[str], str | None], name: str = "watch-cache") -> None:
        self.store = store
        self.name = name
        #: key -> the resource prefix of its feed (None: not a resource key)
        self._route = route
        self.feeds: dict[str, ResourceFeed] = {}
        #: newest revision whose events have all been applied (0 before start)
        self.revision = 0
        #: True once the store watch has a start revision (feeds may list)
        self.positioned = False
        self.closed = False
        #: why the cache closed (None: closed on purpose, or still open)
        self.error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._progress = asyncio.Event()
        self._progress_waiters = 0

    def feed(self, prefix: str, *, capacity: int, name: str) -> ResourceFeed:
        feed = self.feeds.get(prefix)
        if feed is None:
            feed = self.feeds[prefix] = ResourceFeed(self, prefix, capacity=capacity, name=name)
        return feed

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None and not self.closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        resets = 0  # compactions in a row with no event applied in between
        while not self.closed:
            if resets > 1:
                # A store that compacts past every fresh start: do not spin.
                await asyncio.sleep(min(1.0, 0.01 * 2 ** resets))
            try:
                start = await self.store.current_revision()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the cache closes; the storage makes a new one on next use
                self._finish(e)
                return
            self.revision = start
            self.positioned = True
            for feed in list(self.feeds.values()):
                if feed.wanted:
                    feed._start_listing()
            self.wake_progress()
            iterator: AsyncIterator[Event] | None = None
            try:
                iterator = self.store.watch(self.store.prefix, from_revision=start + 1)
                async for ev in iterator:
                    self._apply(ev)
                    resets = 0
            except Compacted as e:
                # Events are lost to us: every feed's watchers end, and every
                # feed lists again once the watch has a new start.
                _log.warning("watch cache fell behind compaction; restarting", cache=self.name, error=str(e))
                self._reset()
                resets += 1
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - StoreUnavailable, or a broken store: must not pass silently
                if not isinstance(e, StoreUnavailable):
                    _log.error("watch cache failed", cache=self.name, error=repr(e))
                self._finish(e)
                return
            finally:
                aclose = getattr(iterator, "aclose", None)
                if aclose is not None:
                    try:
                        await aclose()
                    except Exception:  # noqa: BLE001 - already ending
                        pass
            self._finish(StoreUnavailable(f"the store watch of {self.name} ended"))
            return

    def _apply(self, ev: Event) -> None:
        prefix = self._route(ev.kv.key)
        if prefix is not None:
            feed = self.feeds.get(prefix)
            if feed is not None:
                feed.apply(ev)
        self.revision = ev.kv.mod_revision
        if self._progress_waiters:
            self.wake_progress()

    def _reset(self) -> None:
        self.positioned = False
        for feed in self.feeds.values():
            feed._reset()
        self.wake_progress()

    def _finish(self, error: BaseException | None) -> None:
        """Close for good (the storage makes a new cache on next use). Waiters
        learn it through `closed` and `error`: no future is left holding an
        exception nobody retrieves."""
        self.closed = True
        self.positioned = False
        if error is not None and self.error is None:
            self.error = error
        for feed in self.feeds.values():
            feed._close()
        self.wake_progress()

    async def close(self) -> None:
        tasks = [t for t in (self._task, *(f._listing for f in self.feeds.values())) if t is not None]
        self._task = None
        self._finish(None)
        await stop_tasks(tasks)  # what a task raised: the cache already recorded why it failed

    # ------------------------------------------------------------ waiting

    def wake_progress(self) -> None:
        progress = self._progress
        self._progress = asyncio.Event()
        progress.set()

    async def progressed(self, timeout: float | None) -> None:
        """Wait until something changes: an event applied, a feed listed or
        failed, a reset, the end (or `timeout` seconds)."""
        self._progress_waiters += 1
        try:
            await wait_event(self._progress, timeout)
        finally:
            self._progress_waiters -= 1


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
                if batch[0].revision < from_revision:
                    # The feed was behind the caller's start (its initial list
                    # came from the store at a newer revision): skip what that
                    # list already showed.
                    batch = [ev for ev in batch if ev.revision >= from_revision]
                    if not batch:
                        continue
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

