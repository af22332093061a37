"""Leader election on store leases, with fencing tokens.

A candidate grants a lease and creates the leader key attached to it, only if
the key is absent. Whoever created it leads until its lease lapses (it stops
refreshing it, or it is revoked) or it resigns; then the key vanishes and the
next candidate creates it anew. The fencing token is the leader key's
create_revision: store revisions only grow, so every new leader holds a larger
token than every earlier one.

Controllers attach the token to their writes with `fenced_txn`, which adds
`Compare(leader_key, "create", "=", token)` to the txn. A deposed leader (its
key expired and was re-created by someone else, or is gone) cannot write: its
txn fails as a whole and `FencedOut` is raised, however late its write
arrives. This is what keeps a paused or partitioned old hub from acting.

On sqlite the store additionally holds an exclusive OS lock on its file (see
sqlite.py), so two hub processes can never write one file; leases left by a
dead process are revoked at open, so a restarted hub takes over at once.

This module must never write anything but the leader key, and never report
leadership it cannot prove by its lease.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from federator.obs import METRICS, Metrics, get_logger
from federator.store._base import BaseStore
from federator.store.forwarding import ForwardsUpkeep
from federator.store.protocol import (
    Compacted,
    Compare,
    Delete,
    EventType,
    FencedOut,
    Get,
    KeyExists,
    KeyValue,
    LeaseNotFound,
    Op,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    TxnResult,
)

_log = get_logger("store.leader")


@dataclass(frozen=True, slots=True)
class FencingToken:
    """Proof of leadership: the leader key and its create_revision."""

    key: str
    revision: int
    holder: str

    def compare(self) -> Compare:
        return Compare(self.key, "create", "=", self.revision)


def default_holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def fenced_txn(
    store: Store,
    token: FencingToken,
    compares: Sequence[Compare],
    success: Sequence[Op],
    failure: Sequence[Op] = (),
) -> TxnResult:
    """`store.txn` that only runs while `token` is still the current leader's.

    Raises FencedOut when the leader key is gone or was re-created by a newer
    leader; nothing of the txn is applied then. The failure branch may only
    read (Get): a deposed leader must not write in either branch."""
    if any(not isinstance(op, Get) for op in failure):
        raise StoreError("fenced_txn: the failure branch may only contain Get ops")
    result = await store.txn([token.compare(), *compares], success, [Get(token.key), *failure])
    if result.succeeded:
        return result
    leader = result.results[0]
    if leader is None or leader.create_revision != token.revision:
        now = f"created at revision {leader.create_revision}" if leader else "absent"
        raise FencedOut(
            f"leadership token {token.revision} on {token.key} is no longer current "
            f"(leader key now {now}); this process is not the leader"
        )
    return TxnResult(succeeded=False, revision=result.revision, results=result.results[1:])


class FencedStore(ForwardsUpkeep, BaseStore):
    """A Store whose every write (put, create, update, delete, txn) is a `fenced_txn` with `token`:
    hand it to whatever runs only while leading (the hub's controllers), and a deposed leader that
    wakes late writes nothing (FencedOut). Reads, watches, leases and compaction go to `inner`.
    It counts what it wrote (`writes`, `last_write_revision`) and what was refused (`refused`), so a
    term's end can be checked against the revision at which its leader key vanished."""

    backend_name = "fenced"

    def __init__(self, inner: Store, token: FencingToken, *, metrics: Metrics | None = None) -> None:
        super().__init__(prefix=inner.prefix, metrics=metrics)
        self.inner = inner
        self.token = token
        self.writes = 0
        self.last_write_revision = 0
        self.refused = 0

    async def _get(self, key: str) -> KeyValue | None:
        return await self.inner.get(key)

    async def _range(self, prefix: str, *, limit: int, start_after: str | None,
                     revision: int | None) -> RangeResult:
        return await self.inner.range(prefix, limit=limit, start_after=start_after, revision=revision)

    async def _txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> TxnResult:
        try:
            result = await fenced_txn(self.inner, self.token, compares, success, failure)
        except FencedOut:
            self.refused += 1
            raise
        if result.succeeded and any(not isinstance(op, Get) for op in success):
            self.writes += 1
            self.last_write_revision = max(self.last_write_revision, result.revision)
        return result

    def forward_to(self) -> Store:
        return self.inner

    async def close(self) -> None:
        """The inner store belongs to whoever opened it: nothing to close here."""


class LeaderElection:
    """One candidate for the leadership called `name`.

    `await campaign()` returns a FencingToken once this candidate leads; a
    keepalive task (named `leader-keepalive:NAME`) then refreshes the lease
    every ttl/3 and checks the key is still ours. `lost` is set when
    leadership is lost; `resign()` gives it up and deletes the key."""

    def __init__(
        self,
        store: Store,
        *,
        name: str = "hub",
        holder: str | None = None,
        ttl_seconds: float = 10.0,
        metrics: Metrics | None = None,
    ) -> None:
        if not name or "/" in name:
            raise StoreError(f"leader election name must be non-empty and contain no '/', not {name!r}")
        if not ttl_seconds > 0:
            raise StoreError(f"leader TTL must be > 0 seconds, not {ttl_seconds!r}")
        self.store = store
        self.name = name
        self.key = f"{store.prefix}leader/{name}"
        self.holder = holder or default_holder_id()
        self.ttl = float(ttl_seconds)
        self.token: FencingToken | None = None
        self.lost = asyncio.Event()
        self._lease = 0
        self._keepalive: asyncio.Task[None] | None = None
        m = metrics or METRICS
        backend = getattr(store, "backend_name", type(store).__name__)
        self._gauge = m.leader.labels(backend=backend)
        self._transitions = {
            event: m.leader_transitions.labels(backend=backend, event=event)
            for event in ("acquired", "lost", "resigned")
        }

    @property
    def is_leader(self) -> bool:
        return self.token is not None and not self.lost.is_set()

    @property
    def keepalive_task(self) -> asyncio.Task[None] | None:
        return self._keepalive

    @property
    def lease(self) -> int:
        return self._lease

    async def current_leader(self) -> KeyValue | None:
        return await self.store.get(self.key)

    async def campaign(self, *, timeout_seconds: float | None = None) -> FencingToken:
        """Wait until this candidate leads (or `timeout_seconds` pass: TimeoutError)."""
        if self.is_leader:
            assert self.token is not None
            return self.token
        async with asyncio.timeout(timeout_seconds):
            while True:
                token = await self._try_acquire()
                if token is not None:
                    return token
                await self._wait_for_vacancy()

    async def try_acquire(self) -> FencingToken | None:
        """One attempt: the token if this candidate now leads, else None."""
        if self.is_leader:
            return self.token
        return await self._try_acquire()

    async def _try_acquire(self) -> FencingToken | None:
        lease = await self.store.lease_grant(self.ttl)
        value = json.dumps({"holder": self.holder, "since": time.time()}).encode()
        try:
            kv = await self.store.create(self.key, value, lease=lease)
        except KeyExists as e:
            await _revoke_quietly(self.store, lease)
            _log.debug("leadership held by another", key=self.key, holder=holder_of(e.current))
            return None
        except BaseException:
            await _revoke_quietly(self.store, lease)
            raise
        self._lease = lease
        self.token = FencingToken(self.key, kv.create_revision, self.holder)
        # The same event, cleared: whoever already waits on `lost` (the hub's leadership watch, started
        # before a campaign that wins later) must hear about this term's loss too.
        self.lost.clear()
        self._gauge.set(1)
        self._transitions["acquired"].inc()
        _log.info("leadership acquired", key=self.key, holder=self.holder, token=kv.create_revision, ttl=self.ttl)
        self._keepalive = asyncio.get_running_loop().create_task(
            self._keep_alive(self.token), name=f"leader-keepalive:{self.name}"
        )
        return self.token

    async def _wait_for_vacancy(self) -> None:
        """Return when the leader key is (probably) gone; at most one TTL later."""
        current = await self.store.get(self.key)
        if current is None:
            return
        try:
            async with asyncio.timeout(self.ttl):
                async for ev in self.store.watch(self.key, from_revision=current.mod_revision + 1):
                    if ev.kv.key == self.key and ev.type is EventType.DELETE:
                        return
        except (TimeoutError, Compacted, StoreUnavailable):
            return  # re-check from scratch

    async def _keep_alive(self, token: FencingToken) -> None:
        interval = self.ttl / 3
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            try:
                await self.store.lease_keepalive(self._lease)
                current = await self.store.get(self.key)
            except LeaseNotFound:
                self._mark_lost(token, "lease expired")
                return
            except StoreError as e:
                # Without a refresh for a whole TTL we must assume the lease lapsed.
                if time.monotonic() - last_ok >= self.ttl:
                    self._mark_lost(token, f"store unreachable for a whole TTL: {e}")
                    return
                _log.warning("leader keepalive failed; retrying", key=self.key, error=str(e),
                             wait_seconds=round(interval, 3))
                continue
            if current is None or current.create_revision != token.revision:
                self._mark_lost(token, "leader key gone or re-created")
                return
            last_ok = time.monotonic()

    def _mark_lost(self, token: FencingToken, why: str) -> None:
        if self.lost.is_set():
            return
        self.lost.set()
        self._gauge.set(0)
        self._transitions["lost"].inc()
        _log.warning("leadership lost", key=self.key, token=token.revision, reason=why)

    async def resign(self) -> None:
        """Give up leadership (if held): stop refreshing, delete our key, revoke the lease."""
        task, self._keepalive = self._keepalive, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        token, self.token = self.token, None
        if token is None:
            return
        was_leader = not self.lost.is_set()
        self.lost.set()
        self._gauge.set(0)
        try:
            # Delete only our own key: a newer leader's key must stay.
            await self.store.txn([token.compare()], [Delete(token.key)])
        except StoreError as e:
            _log.warning("could not delete leader key on resign", key=self.key, error=str(e))
        await _revoke_quietly(self.store, self._lease)
        self._lease = 0
        if was_leader:
            self._transitions["resigned"].inc()
            _log.info("leadership released", key=self.key, token=token.revision)


async def _revoke_quietly(store: Store, lease: int) -> None:
    if not lease:
        return
    try:
        await store.lease_revoke(lease)
    except StoreError:
        pass  # already expired or unreachable: it lapses by itself


def holder_of(kv: KeyValue | None) -> str:
    """Who holds a leader key (its JSON value's holder), "nobody" for no key."""
    if kv is None:
        return "nobody"
    try:
        return str(json.loads(kv.value)["holder"])
    except (ValueError, KeyError, TypeError):
        return "unknown"


__all__ = ["FencedStore", "FencingToken", "LeaderElection", "default_holder_id", "fenced_txn", "holder_of"]
