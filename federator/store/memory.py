"""MemoryStore: the in-process backend of the store protocol.

Fast and not durable: the simulator's member clusters and unit tests use it.
Keys live in a sorted list (range is a bisect plus a slice), history lives in
an `EventLog` (watch replay and range-at-revision roll back from it), and a
bounded window (`retain_revisions=N`) auto-compacts so a long simulation does
not grow without end; a watch from before the window gets `Compacted`, exactly
as from an etcd that compacted.

Every operation runs synchronously on the event loop (no awaits inside a
mutation), so each txn is atomic by construction. This module must never do
I/O or block; it must never be used where data has to survive the process.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace

from sortedcontainers import SortedList

from federator.obs import Metrics, get_logger
from federator.store._base import (
    DEFAULT_PREFIX,
    BaseStore,
    EventLog,
    check_lease_id,
    check_prefix_arg,
    compare_holds,
    iterate_log,
    prefix_end,
    watch_closed_error,
)
from federator.store.protocol import (
    Compacted,
    Compare,
    Delete,
    Event,
    EventType,
    FutureRevision,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    StoreError,
    StoreUnavailable,
    StoreUsage,
    TxnResult,
)

_log = get_logger("store.memory")


@dataclass(slots=True)
class _Lease:
    id: int
    ttl: float
    deadline: float
    keys: set[str] = field(default_factory=set)


class MemoryStore(BaseStore):
    """The store protocol in memory. `retain_revisions=N` keeps only the last N
    revisions of history (older ones are compacted automatically)."""

    backend_name = "memory"

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        retain_revisions: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(prefix=prefix, metrics=metrics)
        if retain_revisions is not None and retain_revisions < 1:
            raise StoreError(f"retain_revisions must be >= 1 or None, not {retain_revisions!r}")
        self._retain = retain_revisions
        self._kvs: dict[str, KeyValue] = {}
        self._keys = SortedList()
        # etcd starts an empty store at revision 1; so do we, so that revision
        # arithmetic in callers is the same on every backend.
        self._revision = 1
        self._compact_revision = 0
        self._log = EventLog(last_revision=self._revision)
        self._log.first_revision = 1
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(0x1000)
        self._lease_changed: asyncio.Event | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------ reads

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("memory store is closed")

    async def _get(self, key: str) -> KeyValue | None:
        self._check_open()
        return self._kvs.get(key)

    async def _range(
        self, prefix: str, *, limit: int, start_after: str | None, revision: int | None
    ) -> RangeResult:
        self._check_open()
        end = prefix_end(prefix)
        if revision is None or revision == self._revision:
            return self._range_now(prefix, end, limit=limit, start_after=start_after)
        if revision > self._revision:
            raise FutureRevision(revision, self._revision)
        if revision < self._compact_revision:
            raise Compacted(revision, self._compact_revision)
        return self._range_past(prefix, end, limit=limit, start_after=start_after, revision=revision)

    def _range_now(self, prefix: str, end: str, *, limit: int, start_after: str | None) -> RangeResult:
        keys = self._keys
        lo = keys.bisect_left(prefix)
        hi = keys.bisect_left(end)
        count = hi - lo
        if start_after is not None and start_after >= prefix:
            lo = max(lo, keys.bisect_right(start_after))
        stop = hi if limit == 0 else min(hi, lo + limit)
        kvs = self._kvs
        selected = tuple(kvs[k] for k in keys.islice(lo, stop))
        return RangeResult(kvs=selected, revision=self._revision, more=stop < hi, count=count)

    def _range_past(
        self, prefix: str, end: str, *, limit: int, start_after: str | None, revision: int
    ) -> RangeResult:
        # Roll back from the present: the state of a key at `revision` is the
        # prev_kv of its first event after `revision`.
        rolled: dict[str, KeyValue | None] = {}
        for ev in reversed(self._log.events_between(revision)):
            key = ev.kv.key
            if prefix <= key < end:
                rolled[key] = ev.prev_kv
        keys = self._keys
        state = {k: self._kvs[k] for k in keys.irange(prefix, end, inclusive=(True, False)) if k not in rolled}
        for k, kv in rolled.items():
            if kv is not None:
                state[k] = kv
        ordered = sorted(state)
        count = len(ordered)
        if start_after is not None:
            ordered = ordered[bisect.bisect_right(ordered, start_after):]
        more = bool(limit) and len(ordered) > limit
        if limit:
            ordered = ordered[:limit]
        return RangeResult(kvs=tuple(state[k] for k in ordered), revision=revision, more=more, count=count)

    # ------------------------------------------------------------ writes

    async def _txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        self._check_open()
        return self._apply(compares, success, failure)

    def _apply(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> TxnResult:
        kvs = self._kvs
        ok = all(compare_holds(c, kvs.get(c.key)) for c in compares)
        ops = success if ok else failure
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise LeaseNotFound(op.lease)
        rev = self._revision + 1
        events: list[Event] = []
        results: list[KeyValue | None] = []
        for op in ops:
            if isinstance(op, Get):
                results.append(kvs.get(op.key))
            elif isinstance(op, Put):
                prev = kvs.get(op.key)
                if prev is None:
                    kv = KeyValue(op.key, bytes(op.value), rev, rev, 1, op.lease)
                    self._keys.add(op.key)
                else:
                    kv = KeyValue(op.key, bytes(op.value), prev.create_revision, rev, prev.version + 1, op.lease)
                    if prev.lease and prev.lease != op.lease:
                        self._detach(prev.lease, op.key)
                kvs[op.key] = kv
                if op.lease:
                    self._leases[op.lease].keys.add(op.key)
                events.append(Event(EventType.PUT, kv, prev))
                results.append(kv)
            else:
                assert isinstance(op, Delete)
                gone = self._remove(op.key, rev)
                if gone is not None:
                    events.append(gone)
                results.append(gone.prev_kv if gone is not None else None)
        if events:
            self._commit(rev, events)
        return TxnResult(succeeded=ok, revision=self._revision, results=tuple(results))

    def _remove(self, key: str, rev: int) -> Event | None:
        prev = self._kvs.pop(key, None)
        if prev is None:
            return None
        self._keys.remove(key)
        if prev.lease:
            self._detach(prev.lease, key)
        return Event(EventType.DELETE, replace(prev, mod_revision=rev), prev)

    def _detach(self, lease_id: int, key: str) -> None:
        lease = self._leases.get(lease_id)
        if lease is not None:
            lease.keys.discard(key)

    def _commit(self, rev: int, events: list[Event]) -> None:
        self._revision = rev
        self._log.append(rev, events)
        if self._retain is not None and rev - self._retain + 1 > self._compact_revision:
            self._compact_to(rev - self._retain + 1)

    # ------------------------------------------------------------ watch

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        """Events under `prefix` with revision >= from_revision, then live
        ones; from_revision <= 0 means "only what happens from now on"."""
        check_prefix_arg(self.prefix, prefix)
        if not isinstance(from_revision, int) or isinstance(from_revision, bool):
            raise StoreError(f"from_revision must be an int, not {from_revision!r}")
        self._check_open()
        cursor = from_revision if from_revision > 0 else self._revision + 1
        return iterate_log(
            self._log,
            prefix,
            cursor=cursor,
            compact_revision=lambda: self._compact_revision,
            load_older=None,
            on_event=self._metrics.watch_events.inc,
            closed_error=lambda: watch_closed_error("memory store"),
        )

    # ------------------------------------------------------------ compaction

    async def current_revision(self) -> int:
        self._check_open()
        return self._revision

    async def compact(self, revision: int) -> None:
        self._check_open()
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise StoreError(f"compact revision must be an int, not {revision!r}")
        if revision > self._revision:
            raise FutureRevision(revision, self._revision)
        if revision < self._compact_revision:
            raise Compacted(revision, self._compact_revision)
        self._compact_to(revision)

    def _compact_to(self, revision: int) -> None:
        if revision > self._compact_revision:
            self._metrics.compacted()
        self._compact_revision = revision
        self._log.trim_before(revision)

    async def compact_revision(self) -> int:
        self._check_open()
        return self._compact_revision

    async def usage(self) -> StoreUsage:
        self._check_open()
        usage = StoreUsage(keys=len(self._kvs))
        self._metrics.usage(usage)
        return usage

    # ------------------------------------------------------------ leases

    async def lease_grant(self, ttl_seconds: float) -> int:
        self._check_open()
        if not isinstance(ttl_seconds, (int, float)) or isinstance(ttl_seconds, bool) or not ttl_seconds > 0:
            raise StoreError(f"lease TTL must be a number of seconds > 0, not {ttl_seconds!r}")
        loop = asyncio.get_running_loop()
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _Lease(lease_id, float(ttl_seconds), loop.time() + ttl_seconds)
        self._ensure_expiry_task()
        return lease_id

    async def lease_keepalive(self, lease: int) -> None:
        self._check_open()
        check_lease_id(lease)
        held = self._leases.get(lease)
        now = asyncio.get_running_loop().time()
        if held is None:
            raise LeaseNotFound(lease)
        if held.deadline <= now:
            # The expiry task has not run yet; the lease is gone all the same.
            self._expire(held)
            raise LeaseNotFound(lease)
        held.deadline = now + held.ttl
        self._poke_expiry()

    async def lease_revoke(self, lease: int) -> None:
        self._check_open()
        check_lease_id(lease)
        held = self._leases.get(lease)
        if held is None:
            raise LeaseNotFound(lease)
        self._expire(held)

    def _expire(self, lease: _Lease) -> None:
        self._leases.pop(lease.id, None)
        rev = self._revision + 1
        events = [ev for key in sorted(lease.keys) if (ev := self._remove(key, rev)) is not None]
        if events:
            self._commit(rev, events)
        self._poke_expiry()

    def _ensure_expiry_task(self) -> None:
        if self._expiry_task is None or self._expiry_task.done():
            self._lease_changed = asyncio.Event()
            self._expiry_task = asyncio.get_running_loop().create_task(
                self._expire_leases(), name="memory-store-lease-expiry"
            )
        else:
            self._poke_expiry()

    def _poke_expiry(self) -> None:
        if self._lease_changed is not None:
            self._lease_changed.set()

    async def _expire_leases(self) -> None:
        loop = asyncio.get_running_loop()
        changed = self._lease_changed
        assert changed is not None
        while not self._closed:
            now = loop.time()
            for lease in [le for le in self._leases.values() if le.deadline <= now]:
                _log.debug("lease expired", lease=lease.id, keys=len(lease.keys))
                self._expire(lease)
            changed.clear()
            if not self._leases:
                await changed.wait()
                continue
            nearest = min(le.deadline for le in self._leases.values())
            try:
                await asyncio.wait_for(changed.wait(), timeout=max(0.0, nearest - loop.time()))
            except TimeoutError:
                pass

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._log.close()
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
