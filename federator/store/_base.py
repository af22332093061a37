"""What the three store backends share: input validation, metrics, the
convenience operations built on `txn`, and the in-process event log that
serves watches for the memory and sqlite backends.

Backends subclass `BaseStore` and implement the `_`-prefixed primitives; the
public methods here validate input (prefix, value size, op shapes) before any
backend sees it, so bad input never changes anything. This module must never
import a backend or do I/O of its own.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from federator.obs import METRICS, Metrics
from federator.store.protocol import (
    MAX_VALUE_BYTES,
    Compare,
    Delete,
    Event,
    Get,
    KeyExists,
    KeyNotFound,
    KeyOutsidePrefix,
    KeyValue,
    Op,
    Put,
    RangeResult,
    RevisionMismatch,
    StoreError,
    StoreUnavailable,
    StoreUsage,
    TxnResult,
    ValueTooLarge,
)

DEFAULT_PREFIX = "/federator/"

_COMPARE_TARGETS = frozenset({"mod", "create", "version", "value", "lease"})
_COMPARE_OPS = frozenset({"=", "!=", "<", ">"})


def prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with `prefix`
    (code-point order, which is also UTF-8 byte order)."""
    chars = prefix.rstrip("\U0010ffff")
    if not chars:
        return "\U0010ffff" * (len(prefix) + 1)
    return chars[:-1] + chr(ord(chars[-1]) + 1)


def check_prefix_arg(store_prefix: str, prefix: str) -> None:
    if not isinstance(prefix, str):
        raise StoreError(f"prefix must be str, not {type(prefix).__name__}")
    if not prefix.startswith(store_prefix):
        raise KeyOutsidePrefix(prefix, store_prefix)
    _check_utf8(prefix)


def check_key(store_prefix: str, key: str) -> None:
    if not isinstance(key, str):
        raise StoreError(f"key must be str, not {type(key).__name__}")
    if not key.startswith(store_prefix) or len(key) == len(store_prefix):
        raise KeyOutsidePrefix(key, store_prefix)
    _check_utf8(key)


def _check_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise StoreError(f"key {text!r} is not valid UTF-8: {e.reason}") from None


def check_value(key: str, value: bytes) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise StoreError(f"value for {key!r} must be bytes, not {type(value).__name__}")
    if len(value) > MAX_VALUE_BYTES:
        raise ValueTooLarge(key, len(value))


def check_lease_id(lease: int) -> None:
    if not isinstance(lease, int) or isinstance(lease, bool) or lease < 0 or lease >= 2**63:
        raise StoreError(f"lease id must be a non-negative int64, not {lease!r}")


def check_txn(store_prefix: str, compares: Sequence[Compare], branches: Sequence[Sequence[Op]]) -> None:
    """Validate a whole txn before anything runs. Like etcd, a branch may not
    write (put or delete) the same key twice."""
    for c in compares:
        if not isinstance(c, Compare):
            raise StoreError(f"compare must be a Compare, not {type(c).__name__}")
        check_key(store_prefix, c.key)
        if c.target not in _COMPARE_TARGETS:
            raise StoreError(f"compare target must be one of {sorted(_COMPARE_TARGETS)}, not {c.target!r}")
        if c.op not in _COMPARE_OPS:
            raise StoreError(f"compare op must be one of {sorted(_COMPARE_OPS)}, not {c.op!r}")
        if c.target == "value":
            if not isinstance(c.value, (bytes, bytearray)):
                raise StoreError(f"compare on value of {c.key!r} needs bytes, not {type(c.value).__name__}")
            check_value(c.key, bytes(c.value))
        elif not isinstance(c.value, int) or isinstance(c.value, bool):
            raise StoreError(f"compare on {c.target} of {c.key!r} needs an int, not {type(c.value).__name__}")
    for ops in branches:
        written: set[str] = set()
        for op in ops:
            if isinstance(op, Put):
                check_key(store_prefix, op.key)
                check_value(op.key, op.value)
                check_lease_id(op.lease)
            elif isinstance(op, (Delete, Get)):
                check_key(store_prefix, op.key)
            else:
                raise StoreError(f"txn op must be Put, Delete or Get, not {type(op).__name__}")
            if isinstance(op, (Put, Delete)):
                if op.key in written:
                    raise StoreError(f"txn writes key {op.key!r} twice in one branch")
                written.add(op.key)


def compare_holds(c: Compare, kv: KeyValue | None) -> bool:
    """Evaluate one compare the way etcd does. A missing key has
    mod=create=version=lease=0; a value compare on a missing key is false."""
    actual: int | bytes
    if c.target == "value":
        if kv is None:
            return False
        actual = kv.value
    elif kv is None:
        actual = 0
    elif c.target == "mod":
        actual = kv.mod_revision
    elif c.target == "create":
        actual = kv.create_revision
    elif c.target == "version":
        actual = kv.version
    else:
        actual = kv.lease
    expected = c.value
    if c.op == "=":
        return actual == expected
    if c.op == "!=":
        return actual != expected
    if c.op == "<":
        return actual < expected  # type: ignore[operator]
    return actual > expected  # type: ignore[operator]


class StoreMetrics:
    """Per-backend handles on the store metrics of obs.METRICS (children are
    cached, because `.labels()` costs more than the observation itself)."""

    def __init__(self, backend: str, metrics: Metrics | None = None) -> None:
        self.backend = backend
        self._m = metrics or METRICS
        self._ops: dict[tuple[str, str], Any] = {}
        self._seconds: dict[str, Any] = {}
        self.watch_events = self._m.store_watch_events.labels(backend=backend)

    def observe(self, op: str, result: str, started: float) -> None:
        key = (op, result)
        counter = self._ops.get(key)
        if counter is None:
            counter = self._ops[key] = self._m.store_ops.labels(backend=self.backend, op=op, result=result)
        counter.inc()
        hist = self._seconds.get(op)
        if hist is None:
            hist = self._seconds[op] = self._m.store_op_seconds.labels(backend=self.backend, op=op)
        hist.observe(time.perf_counter() - started)

    def retry(self, op: str) -> None:
        self._m.store_retries.labels(backend=self.backend, op=op).inc()

    def compacted(self) -> None:
        """The store's compact revision advanced (a retain window or a compact call)."""
        self._m.store_compactions.labels(backend=self.backend).inc()

    def usage(self, usage: StoreUsage) -> None:
        """Export what `BaseStore.usage` found (a figure the backend cannot give stays unexported)."""
        if usage.size_bytes is not None:
            self._m.store_size_bytes.labels(backend=self.backend).set(usage.size_bytes)
        if usage.keys is not None:
            self._m.store_keys.labels(backend=self.backend).set(usage.keys)


def _result_of(exc: BaseException) -> str:
    if isinstance(exc, (KeyExists, RevisionMismatch, KeyNotFound)):
        return "conflict"
    if isinstance(exc, StoreUnavailable):
        return "unavailable"
    return "error"


class BaseStore:
    """Validation, metrics and the convenience operations over `_txn`.

    Subclasses implement `_get`, `_range`, `_txn` and the rest of the protocol
    (watch, leases, compaction, close)."""

    prefix: str
    backend_name: str = "base"

    def __init__(self, *, prefix: str, metrics: Metrics | None = None) -> None:
        if not isinstance(prefix, str) or not prefix or not prefix.startswith("/") or not prefix.endswith("/"):
            raise StoreError(f"store prefix must start and end with '/', got {prefix!r}")
        _check_utf8(prefix)
        self.prefix = prefix
        self._metrics = StoreMetrics(self.backend_name, metrics)

    # ------------------------------------------------------------ primitives

    async def _get(self, key: str) -> KeyValue | None:
        result = await self._txn((), (Get(key),), ())
        return result.results[0]

    async def _range(
        self, prefix: str, *, limit: int, start_after: str | None, revision: int | None
    ) -> RangeResult:
        raise NotImplementedError

    async def _txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        raise NotImplementedError

    # ------------------------------------------------------------ public

    async def _timed(self, op: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            result = await fn()
        except BaseException as e:
            self._metrics.observe(op, _result_of(e), started)
            raise
        self._metrics.observe(op, "ok", started)
        return result

    async def get(self, key: str) -> KeyValue | None:
        check_key(self.prefix, key)
        result: KeyValue | None = await self._timed("get", lambda: self._get(key))
        return result

    async def range(
        self,
        prefix: str,
        *,
        limit: int = 0,
        start_after: str | None = None,
        revision: int | None = None,
    ) -> RangeResult:
        check_prefix_arg(self.prefix, prefix)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise StoreError(f"range limit must be an int >= 0, not {limit!r}")
        if start_after is not None and not isinstance(start_after, str):
            raise StoreError(f"start_after must be str or None, not {type(start_after).__name__}")
        if revision is not None and (not isinstance(revision, int) or isinstance(revision, bool) or revision < 0):
            raise StoreError(f"range revision must be an int >= 0 or None, not {revision!r}")
        result: RangeResult = await self._timed(
            "range",
            lambda: self._range(prefix, limit=limit, start_after=start_after, revision=revision or None),
        )
        return result

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        check_txn(self.prefix, compares, (success, failure))
        result: TxnResult = await self._timed("txn", lambda: self._txn(tuple(compares), tuple(success), tuple(failure)))
        return result

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        op = Put(key, value, lease)
        check_txn(self.prefix, (), ((op,),))
        result: TxnResult = await self._timed("put", lambda: self._txn((), (op,), ()))
        kv = result.results[0]
        assert kv is not None
        return kv

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        op = Put(key, value, lease)
        check_txn(self.prefix, (), ((op,),))

        async def run() -> KeyValue:
            r = await self._txn((Compare(key, "create", "=", 0),), (op,), (Get(key),))
            current = r.results[0]
            assert current is not None
            if not r.succeeded:
                raise KeyExists(key, current)
            return current

        kv: KeyValue = await self._timed("create", run)
        return kv

    async def update(
        self, key: str, value: bytes, *, expected_mod_revision: int, lease: int = 0
    ) -> KeyValue:
        op = Put(key, value, lease)
        check_txn(self.prefix, (), ((op,),))
        _check_expected(expected_mod_revision)

        async def run() -> KeyValue:
            r = await self._txn((Compare(key, "mod", "=", expected_mod_revision),), (op,), (Get(key),))
            current = r.results[0]
            if not r.succeeded:
                if current is None:
                    raise KeyNotFound(key)
                raise RevisionMismatch(key, expected_mod_revision, current)
            assert current is not None
            return current

        kv: KeyValue = await self._timed("update", run)
        return kv

    async def delete(self, key: str, *, expected_mod_revision: int | None = None) -> KeyValue:
        check_key(self.prefix, key)
        if expected_mod_revision is not None:
            _check_expected(expected_mod_revision)

        async def run() -> KeyValue:
            if expected_mod_revision is None:
                r = await self._txn((), (Delete(key),), ())
            else:
                r = await self._txn(
                    (Compare(key, "mod", "=", expected_mod_revision),), (Delete(key),), (Get(key),)
                )
            current = r.results[0]
            if current is None:
                raise KeyNotFound(key)
            if not r.succeeded:
                assert expected_mod_revision is not None
                raise RevisionMismatch(key, expected_mod_revision, current)
            return current

        kv: KeyValue = await self._timed("delete", run)
        return kv


def _check_expected(expected: int) -> None:
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 1:
        raise StoreError(f"expected_mod_revision must be an int >= 1, not {expected!r}")


class EventLog:
    """Committed events in revision order, kept in memory, with a wake-up for
    watchers. Each revision holds the events of one txn. `first_revision` is
    the oldest revision whose events are still held; `trim_before` forgets
    older ones (compaction, or a bounded window)."""

    def __init__(self, *, last_revision: int) -> None:
        self._revs: list[int] = []  # one entry per event, non-decreasing
        self._events: list[Event] = []
        self._start = 0  # index of the first live entry (trimmed lazily, in bulk)
        self.last_revision = last_revision
        self.first_revision = last_revision + 1
        self._waiters: set[_Waiter] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._events) - self._start

    def append(self, revision: int, events: Sequence[Event]) -> None:
        for ev in events:
            self._revs.append(revision)
            self._events.append(ev)
        self.last_revision = revision
        if not self._waiters:
            return
        # Wake only the watchers these events concern; move the others'
        # cursors past them, so a quiet watcher never falls behind a
        # compaction for events it would have skipped anyway.
        woken = []
        for waiter in self._waiters:
            prefix = waiter.prefix
            if any(ev.kv.key.startswith(prefix) for ev in events):
                woken.append(waiter)
            else:
                waiter.cursor = revision + 1
        for waiter in woken:
            self._waiters.discard(waiter)
            if not waiter.future.done():
                waiter.future.set_result(None)

    def close(self) -> None:
        self.closed = True
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_result(None)
        self._waiters.clear()

    def events_from(self, revision: int, *, max_events: int = 10_000) -> list[Event] | None:
        """Events with revision >= `revision` (at most about `max_events`,
        never splitting a revision), or None if some are no longer held."""
        if revision < self.first_revision:
            return None
        i = bisect.bisect_left(self._revs, revision, lo=self._start)
        end = min(len(self._events), i + max_events)
        while end < len(self._events) and self._revs[end] == self._revs[end - 1]:
            end += 1
        return self._events[i:end]

    def events_between(self, after: int) -> list[Event]:
        """Events with revision > `after`, oldest first (for range-at-revision)."""
        i = bisect.bisect_right(self._revs, after, lo=self._start)
        return self._events[i:]

    def trim_before(self, revision: int) -> None:
        if revision <= self.first_revision:
            return
        self.first_revision = revision
        self._start = bisect.bisect_left(self._revs, revision, lo=self._start)
        # Drop the dead head in bulk so trimming stays amortised O(1) per event.
        if self._start > 4096 and self._start * 2 > len(self._events):
            del self._events[: self._start]
            del self._revs[: self._start]
            self._start = 0

    def trim_to_size(self, max_events: int) -> None:
        """Forget the oldest revisions until at most about `max_events` remain
        (a cache in front of durable history; never splits a revision)."""
        excess = len(self) - max_events
        if excess > 0:
            self.trim_before(self._revs[self._start + excess - 1] + 1)

    async def wait_for(self, prefix: str, cursor: int) -> int:
        """Wait until an event under `prefix` with revision >= `cursor`
        exists (or the log closes); returns the cursor to read from, moved
        past the revisions that held nothing under `prefix`."""
        if self.closed or self.last_revision >= cursor:
            return cursor
        waiter = _Waiter(prefix, cursor, asyncio.get_running_loop().create_future())
        self._waiters.add(waiter)
        try:
            await waiter.future
        finally:
            self._waiters.discard(waiter)
        return waiter.cursor


class _Waiter:
    __slots__ = ("prefix", "cursor", "future")

    def __init__(self, prefix: str, cursor: int, future: asyncio.Future[None]) -> None:
        self.prefix = prefix
        self.cursor = cursor
        self.future = future


def watch_closed_error(what: str) -> StoreUnavailable:
    return StoreUnavailable(f"{what} was closed while a watch was open")


async def iterate_log(
    log: EventLog,
    prefix: str,
    *,
    cursor: int,
    compact_revision: Callable[[], int],
    load_older: Callable[[str, int], Any] | None,
    on_event: Callable[[], None],
    closed_error: Callable[[], StoreError],
) -> AsyncIterator[Event]:
    """The watch loop shared by memory and sqlite: catch up from `cursor`
    (from the log, or via `load_older` for events the log no longer holds),
    then follow live events. Raises Compacted when `cursor` falls behind the
    compaction point, also for a watcher that was too slow."""
    from federator.store.protocol import Compacted

    while True:
        if log.closed:
            raise closed_error()
        compacted_at = compact_revision()
        if cursor < compacted_at:
            raise Compacted(cursor, compacted_at)
        batch = log.events_from(cursor)
        if batch is None:
            if load_older is None:
                raise Compacted(cursor, max(compacted_at, log.first_revision))
            # Events the in-memory log no longer holds: read them from disk.
            # `load_older` returns the matching events and the next revision
            # to look at (it may have scanned past revisions with no match).
            older, cursor = await load_older(prefix, cursor)
            for ev in older:
                on_event()
                yield ev
            continue
        if not batch:
            cursor = await log.wait_for(prefix, cursor)
            continue
        for ev in batch:
            if ev.kv.key.startswith(prefix):
                on_event()
                yield ev
        cursor = batch[-1].kv.mod_revision + 1


def is_ip_address(host: str) -> bool:
    """An etcd endpoint's host that is an IPv4 literal, or localhost (which the etcd client connects to as 127.0.0.1)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return False
