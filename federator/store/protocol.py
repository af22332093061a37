"""The revisioned key-value store protocol, shaped like etcd v3's data model.

Every backend (memory, sqlite, etcd) implements `Store` and passes the one
contract suite in tests/store/test_contract.py. Keys are str, values bytes.
One store-wide revision increases by one per committed write transaction;
every key remembers its create_revision, mod_revision and version.

This module defines types only. It must never import a backend, an API
module or anything that does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

#: Largest value a backend accepts (etcd's default request limit is 1.5 MiB).
MAX_VALUE_BYTES = 1_400_000


# ---------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


class EventType(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class Event:
    """One change. For DELETE, `kv.value` is the last value before the delete and
    `kv.mod_revision` is the revision of the delete; `prev_kv` is the state
    before this event (None for a create)."""

    type: EventType
    kv: KeyValue
    prev_kv: KeyValue | None = None

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: tuple[KeyValue, ...]
    #: the store revision the range was served at
    revision: int
    #: True when `limit` cut the result; continue with start_after=kvs[-1].key
    more: bool
    #: number of keys in the whole range (ignoring limit and start_after)
    count: int


# ---------------------------------------------------------------- transactions


CompareTarget = Literal["mod", "create", "version", "value", "lease"]
CompareOp = Literal["=", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class Compare:
    """A guard on one key. A missing key has mod=create=version=lease=0, so
    `Compare(k, "create", "=", 0)` means "k does not exist". As in etcd, a
    compare on the *value* of a missing key is always false."""

    key: str
    target: CompareTarget
    op: CompareOp
    value: int | bytes


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


@dataclass(frozen=True, slots=True)
class Get:
    key: str


Op = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    #: store revision after the txn (unchanged if nothing was written)
    revision: int
    #: one entry per op of the branch that ran: the KeyValue for Get (or None),
    #: the new KeyValue for Put, the deleted KeyValue (or None) for Delete
    results: tuple[KeyValue | None, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class StoreUsage:
    """How big a store is, as far as its backend can tell cheaply (None: it cannot)."""

    size_bytes: int | None = None
    keys: int | None = None


# ---------------------------------------------------------------- errors


class StoreError(Exception):
    """Base of every error a store raises. Messages are for humans."""


class StoreMisconfigured(StoreError):
    """The store cannot be used as it was named: a malformed URL, TLS files that are missing or wrong, or an
    etcd that refused the TLS handshake. Retrying does not help; the operator must change a flag."""


class KeyExists(StoreError):
    def __init__(self, key: str, current: KeyValue) -> None:
        super().__init__(f"key {key!r} already exists (mod_revision {current.mod_revision})")
        self.key = key
        self.current = current


class KeyNotFound(StoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} not found")
        self.key = key


class RevisionMismatch(StoreError):
    """A compare-and-swap lost: the key's mod_revision is not the expected one."""

    def __init__(self, key: str, expected: int, current: KeyValue | None) -> None:
        actual = current.mod_revision if current else 0
        super().__init__(
            f"key {key!r} was modified: expected mod_revision {expected}, found {actual}"
        )
        self.key = key
        self.expected = expected
        self.current = current


class Compacted(StoreError):
    """The requested revision is older than what the store retains."""

    def __init__(self, requested: int, compact_revision: int) -> None:
        super().__init__(
            f"revision {requested} has been compacted; oldest retained is {compact_revision}"
        )
        self.requested = requested
        self.compact_revision = compact_revision


class FutureRevision(StoreError):
    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"revision {requested} is newer than the store's {current}")
        self.requested = requested
        self.current = current


class ValueTooLarge(StoreError):
    def __init__(self, key: str, size: int, limit: int = MAX_VALUE_BYTES) -> None:
        super().__init__(f"value for {key!r} is {size} bytes; limit is {limit}")
        self.key = key
        self.size = size
        self.limit = limit


class KeyOutsidePrefix(StoreError):
    def __init__(self, key: str, prefix: str) -> None:
        super().__init__(f"key {key!r} is outside this store's prefix {prefix!r}")
        self.key = key
        self.prefix = prefix


class LeaseNotFound(StoreError):
    def __init__(self, lease: int) -> None:
        super().__init__(f"lease {lease} not found or expired")
        self.lease = lease


class StoreUnavailable(StoreError):
    """The backend cannot be reached (after bounded retries) or refuses writes."""


class FencedOut(StoreError):
    """A write carried a fencing token of a leader that has been deposed."""


# ---------------------------------------------------------------- protocol


@runtime_checkable
class Store(Protocol):
    """Async revisioned KV store. All keys must start with `prefix`."""

    prefix: str

    async def get(self, key: str) -> KeyValue | None: ...

    async def range(
        self,
        prefix: str,
        *,
        limit: int = 0,
        start_after: str | None = None,
        revision: int | None = None,
    ) -> RangeResult:
        """Keys starting with `prefix`, in key order. `limit` 0 means all.
        `revision` reads the state as of that revision (Compacted if too old)."""
        ...

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        """Unconditional write; returns the new KeyValue."""
        ...

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> KeyValue:
        """Create if absent, else raise KeyExists."""
        ...

    async def update(
        self, key: str, value: bytes, *, expected_mod_revision: int, lease: int = 0
    ) -> KeyValue:
        """CAS: write only if the key's mod_revision equals the expected one,
        else raise RevisionMismatch (KeyNotFound if the key is absent)."""
        ...

    async def delete(self, key: str, *, expected_mod_revision: int | None = None) -> KeyValue:
        """Delete (guarded if expected_mod_revision is given). Returns the
        deleted KeyValue; raises KeyNotFound or RevisionMismatch."""
        ...

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """All compares true -> run `success`, else `failure`; atomically, at
        most one new revision."""
        ...

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        """Events on keys under `prefix` with revision >= from_revision, in
        revision order, then live ones. Raises Compacted (from the iterator)
        when from_revision is older than the oldest retained revision, also
        later for a watcher that fell behind a bounded history. from_revision
        <= 0 means "only events after the watch starts". When the store is
        closed or unreachable past its retry budget, the iterator raises
        StoreUnavailable; it never ends silently."""
        ...

    async def current_revision(self) -> int: ...

    async def compact(self, revision: int) -> None:
        """Forget history older than `revision`."""
        ...

    async def compact_revision(self) -> int:
        """The oldest revision still retained for watch and range (the last
        compaction point; 0 if the store was never compacted)."""
        ...

    async def usage(self) -> StoreUsage:
        """How big the store is, from what the backend can report cheaply (the sqlite file and its
        write-ahead log, etcd's dbSize, the memory store's key count), also exported as the store
        gauges of obs.METRICS. StoreUnavailable when the backend does not answer."""
        ...

    async def lease_grant(self, ttl_seconds: float) -> int: ...

    async def lease_keepalive(self, lease: int) -> None:
        """Refresh the lease's TTL; LeaseNotFound if it already expired."""
        ...

    async def lease_revoke(self, lease: int) -> None: ...

    async def close(self) -> None: ...
