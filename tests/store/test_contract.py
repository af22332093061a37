"""The store contract: every test runs against memory, sqlite, a real etcd and
a 3-member etcd over mutual TLS (the session's `etcd_tls_cluster`).

Keys live under the test's own prefix (`store.prefix`), so tests that share
the session's etcd never see each other's keys; revisions are compared
relative to what the test itself observed, never as absolute numbers.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from federator.store.protocol import (
    MAX_VALUE_BYTES,
    Compacted,
    Compare,
    Delete,
    Event,
    EventType,
    FutureRevision,
    Get,
    KeyExists,
    KeyNotFound,
    KeyOutsidePrefix,
    LeaseNotFound,
    Put,
    RevisionMismatch,
    Store,
    StoreError,
    ValueTooLarge,
)

WAIT = 15.0  # generous deadline for anything that should happen "soon"


@pytest.fixture(params=["memory", "sqlite", "etcd",
                        pytest.param("etcd-tls", marks=[pytest.mark.etcd, pytest.mark.xdist_group("etcd-tls")])])
def backend(request: pytest.FixtureRequest) -> str:
    """conftest.py's backends plus etcd-tls, here only: the contract is what TLS could break."""
    return str(request.param)


async def collect(store: Store, prefix: str, *, from_revision: int, count: int) -> list[Event]:
    events: list[Event] = []
    async with asyncio.timeout(WAIT):
        async for ev in store.watch(prefix, from_revision=from_revision):
            events.append(ev)
            if len(events) == count:
                return events
    raise AssertionError("watch ended early")


# ---------------------------------------------------------------- basics


async def test_create_get_update_delete(store: Store) -> None:
    k = store.prefix + "a"
    assert await store.get(k) is None
    start = await store.current_revision()
    created = await store.create(k, b"one")
    assert created.value == b"one"
    assert created.version == 1
    assert created.create_revision == created.mod_revision == start + 1
    assert await store.current_revision() == start + 1
    assert await store.get(k) == created

    with pytest.raises(KeyExists) as exists:
        await store.create(k, b"again")
    assert exists.value.current == created

    updated = await store.update(k, b"two", expected_mod_revision=created.mod_revision)
    assert (updated.version, updated.create_revision, updated.mod_revision) == (2, created.create_revision, start + 2)

    with pytest.raises(RevisionMismatch) as stale:
        await store.update(k, b"stale", expected_mod_revision=created.mod_revision)
    assert stale.value.current == updated
    assert (await store.get(k)) == updated

    with pytest.raises(RevisionMismatch):
        await store.delete(k, expected_mod_revision=created.mod_revision)
    deleted = await store.delete(k, expected_mod_revision=updated.mod_revision)
    assert deleted == updated
    assert await store.get(k) is None
    with pytest.raises(KeyNotFound):
        await store.delete(k)
    with pytest.raises(KeyNotFound):
        await store.update(k, b"x", expected_mod_revision=updated.mod_revision)
    assert await store.current_revision() == start + 3

    again = await store.put(k, b"three")
    assert again.version == 1 and again.create_revision == start + 4


async def test_put_overwrites_and_counts_versions(store: Store) -> None:
    k = store.prefix + "p"
    first = await store.put(k, b"1")
    second = await store.put(k, b"2")
    assert second.version == 2 and second.create_revision == first.create_revision
    assert second.mod_revision == first.mod_revision + 1
    assert (await store.get(k)) == second


# ---------------------------------------------------------------- concurrency


async def test_concurrent_cas_on_one_key_has_one_winner_per_revision(store_factory) -> None:  # type: ignore[no-untyped-def]
    # Several store handles (several connections for etcd; one file for sqlite).
    stores = [await store_factory() for _ in range(3)]
    k = stores[0].prefix + "counter"
    initial = await stores[0].create(k, b"0")
    wins_by_expected: Counter[int] = Counter()
    winners: list[int] = []
    losses = 0

    async def contender(store: Store, n: int) -> None:
        nonlocal losses
        for _ in range(n):
            current = await store.get(k)
            assert current is not None
            await asyncio.sleep(0)  # let the others read the same revision (memory never yields)
            try:
                kv = await store.update(k, str(int(current.value) + 1).encode(), expected_mod_revision=current.mod_revision)
            except RevisionMismatch:
                losses += 1
                continue
            wins_by_expected[current.mod_revision] += 1
            winners.append(kv.mod_revision)

    await asyncio.gather(*(contender(stores[i % len(stores)], 15) for i in range(12)))
    final = await stores[0].get(k)
    assert final is not None
    # Exactly one winner per revision; the counter saw every win exactly once.
    assert all(count == 1 for count in wins_by_expected.values())
    assert len(set(winners)) == len(winners)
    assert int(final.value) == len(winners)
    assert final.version == 1 + len(winners)
    assert losses > 0, "contenders never collided: the test did not test anything"
    history = await collect(stores[0], k, from_revision=initial.mod_revision + 1, count=len(winners))
    assert [ev.revision for ev in history] == sorted(winners)
    assert [int(ev.kv.value) for ev in history] == list(range(1, len(winners) + 1))


async def test_watch_is_ordered_under_concurrent_writers(store_factory) -> None:  # type: ignore[no-untyped-def]
    stores = [await store_factory() for _ in range(2)]
    watcher = stores[0]
    start = await watcher.current_revision() + 1
    writers, per_writer = 5, 30
    written: dict[int, tuple[str, bytes]] = {}
    events: list[Event] = []
    ready = asyncio.Event()

    async def watch() -> None:
        async with asyncio.timeout(WAIT):
            async for ev in watcher.watch(watcher.prefix, from_revision=start):
                events.append(ev)
                ready.set()
                if len(events) == writers * per_writer:
                    return

    async def writer(w: int) -> None:
        store = stores[w % len(stores)]
        for i in range(per_writer):
            key = f"{store.prefix}w{w}/{i % 4}"
            kv = await store.put(key, f"{w}:{i}".encode())
            written[kv.mod_revision] = (key, kv.value)
            if random.random() < 0.3:
                await asyncio.sleep(0)

    task = asyncio.create_task(watch())
    await asyncio.gather(*(writer(w) for w in range(writers)))
    await task
    revisions = [ev.revision for ev in events]
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
    assert {ev.revision: (ev.kv.key, ev.kv.value) for ev in events} == written
    for w in range(writers):
        mine = [int(ev.kv.value.split(b":")[1]) for ev in events if ev.kv.value.startswith(f"{w}:".encode())]
        assert mine == list(range(per_writer))
    # prev_kv carries the state before each event (None for a create).
    last: dict[str, bytes] = {}
    for ev in events:
        assert (ev.prev_kv.value if ev.prev_kv else None) == last.get(ev.kv.key)
        last[ev.kv.key] = ev.kv.value


# ---------------------------------------------------------------- watch


async def test_watch_resumes_from_a_revision_then_follows_live(store: Store) -> None:
    p = store.prefix
    kvs = [await store.put(f"{p}k{i}", f"v{i}".encode()) for i in range(10)]
    await store.delete(f"{p}k3")
    resume_at = kvs[5].mod_revision
    got: list[Event] = []

    async def follow() -> None:
        async with asyncio.timeout(WAIT):
            async for ev in store.watch(p, from_revision=resume_at):
                got.append(ev)
                if len(got) == 7:
                    return

    task = asyncio.create_task(follow())
    live = await store.put(f"{p}k0", b"live")
    await task
    assert [ev.revision for ev in got[:5]] == [kv.mod_revision for kv in kvs[5:]]
    assert got[5].type is EventType.DELETE and got[5].kv.key == f"{p}k3"
    assert got[5].kv.value == b"v3" and got[5].prev_kv is not None and got[5].prev_kv.value == b"v3"
    assert got[6].kv == live and got[6].type is EventType.PUT


async def test_watch_filters_by_prefix(store: Store) -> None:
    p = store.prefix
    start = await store.current_revision() + 1
    await store.put(p + "apple", b"1")
    await store.put(p + "banana", b"2")
    await store.put(p + "apricot", b"3")
    got = await collect(store, p + "ap", from_revision=start, count=2)
    assert [ev.kv.key for ev in got] == [p + "apple", p + "apricot"]


async def test_watch_from_zero_sees_only_new_events(store: Store) -> None:
    p = store.prefix
    await store.put(p + "old", b"1")
    got: list[Event] = []
    started = asyncio.Event()

    async def follow() -> None:
        it = store.watch(p, from_revision=0)
        started.set()
        async with asyncio.timeout(WAIT):
            async for ev in it:
                got.append(ev)
                return

    task = asyncio.create_task(follow())
    await started.wait()
    # A watch created with from_revision 0 starts at "now" as seen when it is
    # first iterated; poll-write until it has seen one, then check it is new.
    async with asyncio.timeout(WAIT):
        while not task.done():
            await store.put(p + "new", b"2")
            await asyncio.sleep(0.05)
    assert got[0].kv.key == p + "new"


async def test_compaction_then_watch_from_before_raises_compacted(store: Store) -> None:
    p = store.prefix
    first = await store.put(p + "a", b"1")
    for i in range(5):
        await store.put(p + "a", str(i).encode())
    at = await store.current_revision()
    await store.compact(at)
    assert await store.compact_revision() >= at

    async def watch_from(rev: int) -> list[Event]:
        async with asyncio.timeout(WAIT):  # a hang fails the test
            return [ev async for ev in store.watch(p, from_revision=rev)]

    with pytest.raises(Compacted) as err:
        await watch_from(first.mod_revision)
    assert err.value.compact_revision >= at and err.value.requested == first.mod_revision
    with pytest.raises(Compacted):
        await store.range(p, revision=first.mod_revision)
    # The compact revision itself is still readable and watchable.
    state = await store.range(p, revision=at)
    assert [kv.value for kv in state.kvs] == [b"4"]
    newer = await store.put(p + "b", b"x")
    got = await collect(store, p, from_revision=at, count=2)
    assert got[-1].kv == newer
    with pytest.raises(Compacted):
        await store.compact(first.mod_revision)


async def test_compact_future_revision_is_refused(store: Store) -> None:
    now = await store.current_revision()
    with pytest.raises(FutureRevision):
        await store.compact(now + 100)
    with pytest.raises(FutureRevision):
        await store.range(store.prefix, revision=now + 100)


# ---------------------------------------------------------------- range


async def test_range_limit_and_continuation(store: Store) -> None:
    p = store.prefix
    keys = sorted(f"{p}item/{i:03d}" for i in range(25))
    for k in random.sample(keys, len(keys)):
        await store.put(k, k.encode())
    await store.put(p + "itemx", b"not under item/")
    await store.put(p + "iteL", b"before the prefix")
    pages, start_after = [], None
    while True:
        page = await store.range(p + "item/", limit=10, start_after=start_after)
        assert page.count == 25
        pages.append(page)
        if not page.more:
            break
        start_after = page.kvs[-1].key
    assert [len(pg.kvs) for pg in pages] == [10, 10, 5]
    assert [kv.key for pg in pages for kv in pg.kvs] == keys
    everything = await store.range(p + "item/")
    assert [kv.key for kv in everything.kvs] == keys and not everything.more
    exact = await store.range(p + "item/", limit=25)
    assert len(exact.kvs) == 25 and not exact.more
    empty = await store.range(p + "nothing/")
    assert (empty.kvs, empty.count, empty.more) == ((), 0, False)
    assert (await store.range(p)).count == 27


async def test_range_at_revision(store: Store) -> None:
    p = store.prefix
    a1 = await store.put(p + "a", b"a1")
    b1 = await store.put(p + "b", b"b1")
    snapshot = b1.mod_revision
    await store.put(p + "a", b"a2")
    await store.delete(p + "b")
    await store.put(p + "c", b"c1")
    past = await store.range(p, revision=snapshot)
    assert past.revision == snapshot
    assert [(kv.key, kv.value) for kv in past.kvs] == [(p + "a", b"a1"), (p + "b", b"b1")]
    assert past.kvs[0] == a1
    page = await store.range(p, revision=snapshot, limit=1)
    assert [kv.key for kv in page.kvs] == [p + "a"] and page.more and page.count == 2
    rest = await store.range(p, revision=snapshot, start_after=p + "a")
    assert [kv.key for kv in rest.kvs] == [p + "b"] and not rest.more
    now = await store.range(p)
    assert [(kv.key, kv.value) for kv in now.kvs] == [(p + "a", b"a2"), (p + "c", b"c1")]


# ---------------------------------------------------------------- txn


async def test_txn_runs_one_branch_atomically_in_one_revision(store: Store) -> None:
    p = store.prefix
    a = await store.put(p + "a", b"1")
    before = await store.current_revision()
    r = await store.txn(
        [Compare(p + "a", "value", "=", b"1"), Compare(p + "missing", "create", "=", 0)],
        [Put(p + "x", b"x"), Put(p + "y", b"y"), Delete(p + "a"), Get(p + "a"), Get(p + "x")],
        [Put(p + "failed", b"!")],
    )
    assert r.succeeded and r.revision == before + 1
    x, y, gone, got_a, got_x = r.results
    assert x is not None and y is not None and x.mod_revision == y.mod_revision == before + 1
    assert gone == a
    assert got_a is None and got_x == x  # reads in a txn see its earlier writes
    assert await store.get(p + "failed") is None

    r = await store.txn([Compare(p + "x", "version", ">", 1)], [Put(p + "no", b"")], [Get(p + "x"), Put(p + "f", b"f")])
    assert not r.succeeded and r.results[0] == x and r.results[1] is not None
    assert await store.get(p + "no") is None and (await store.get(p + "f")) == r.results[1]

    # A read-only txn and a delete of nothing do not create a revision.
    now = await store.current_revision()
    r = await store.txn([], [Get(p + "x"), Delete(p + "nothing")])
    assert r.succeeded and r.revision == now and r.results == (x, None)
    assert await store.current_revision() == now


async def test_txn_compare_targets(store: Store) -> None:
    k = store.prefix + "c"
    await store.put(k, b"v1")
    kv = await store.put(k, b"v2")
    table: list[tuple[Compare, bool]] = [
        (Compare(k, "mod", "=", kv.mod_revision), True),
        (Compare(k, "mod", ">", kv.mod_revision - 1), True),
        (Compare(k, "mod", "<", kv.mod_revision), False),
        (Compare(k, "mod", "!=", kv.mod_revision), False),
        (Compare(k, "create", "=", kv.create_revision), True),
        (Compare(k, "create", "=", 0), False),
        (Compare(k, "create", "<", kv.mod_revision), True),
        (Compare(k, "version", "=", 2), True),
        (Compare(k, "version", "<", 2), False),
        (Compare(k, "version", ">", 1), True),
        (Compare(k, "value", "=", b"v2"), True),
        (Compare(k, "value", ">", b"v1"), True),
        (Compare(k, "value", "<", b"v1"), False),
        (Compare(k, "value", "!=", b"v2"), False),
        (Compare(k, "lease", "=", 0), True),
        (Compare(k, "lease", ">", 0), False),
    ]
    for compare, holds in table:
        r = await store.txn([compare], [Get(k)], [])
        assert r.succeeded is holds, compare
    both = await store.txn([table[0][0], table[3][0]], [Put(k, b"no")], [Get(k)])
    assert not both.succeeded and both.results == (kv,)


async def test_compare_on_missing_key(store: Store) -> None:
    k = store.prefix + "absent"
    for c, holds in [
        (Compare(k, "create", "=", 0), True),
        (Compare(k, "mod", "=", 0), True),
        (Compare(k, "version", "=", 0), True),
        (Compare(k, "lease", "=", 0), True),
        (Compare(k, "value", "=", b""), False),  # etcd: a value compare on a missing key fails
    ]:
        assert (await store.txn([c], [])).succeeded is holds, c


async def test_txn_refuses_bad_ops_and_changes_nothing(store: Store) -> None:
    p = store.prefix
    before = await store.current_revision()
    with pytest.raises(StoreError, match="twice"):
        await store.txn([], [Put(p + "d", b"1"), Put(p + "d", b"2")])
    with pytest.raises(StoreError, match="twice"):
        await store.txn([], [Put(p + "d", b"1"), Delete(p + "d")])
    with pytest.raises(StoreError):
        await store.txn([Compare(p + "d", "mod", "~", 1)], [])  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        await store.txn([Compare(p + "d", "value", "=", 1)], [])
    with pytest.raises(StoreError):
        await store.txn([], ["put it"])  # type: ignore[list-item]
    with pytest.raises(LeaseNotFound):
        await store.txn([], [Put(p + "e", b"1"), Put(p + "f", b"1", lease=987654321)])
    assert await store.current_revision() == before
    assert (await store.range(p)).count == 0


# ---------------------------------------------------------------- bad input


async def test_keys_outside_the_prefix_are_refused(store: Store) -> None:
    before = await store.current_revision()
    outside = "/elsewhere/k"
    for call in (
        lambda: store.get(outside),
        lambda: store.put(outside, b"x"),
        lambda: store.create(outside, b"x"),
        lambda: store.update(outside, b"x", expected_mod_revision=1),
        lambda: store.delete(outside),
        lambda: store.range("/elsewhere/"),
        lambda: store.range(store.prefix[:-1]),
        lambda: store.txn([Compare(outside, "mod", "=", 0)], []),
        lambda: store.txn([], [Get(outside)]),
        lambda: store.put(store.prefix, b"the prefix itself is not a key"),
    ):
        with pytest.raises(KeyOutsidePrefix):
            await call()
    with pytest.raises(KeyOutsidePrefix):
        store.watch("/elsewhere/", from_revision=1)
    assert await store.current_revision() == before


async def test_oversized_and_malformed_values_are_refused(store: Store) -> None:
    k = store.prefix + "big"
    before = await store.current_revision()
    with pytest.raises(ValueTooLarge) as err:
        await store.put(k, b"x" * (MAX_VALUE_BYTES + 1))
    assert err.value.size == MAX_VALUE_BYTES + 1 and k in str(err.value)
    with pytest.raises(ValueTooLarge):
        await store.txn([], [Put(store.prefix + "ok", b"1"), Put(k, b"x" * (MAX_VALUE_BYTES + 1))])
    with pytest.raises(StoreError):
        await store.put(k, "text is not bytes")  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        await store.put(store.prefix + "\udcff", b"surrogate key")
    with pytest.raises(StoreError):
        await store.update(k, b"x", expected_mod_revision=0)
    with pytest.raises(StoreError):
        await store.range(store.prefix, limit=-1)
    assert await store.current_revision() == before
    assert await store.get(k) is None
    largest = await store.put(k, b"y" * MAX_VALUE_BYTES)
    assert len(largest.value) == MAX_VALUE_BYTES
    assert (await store.get(k)) == largest


async def test_keys_are_unicode_and_sorted_by_code_point(store: Store) -> None:
    p = store.prefix
    names = ["a", "b", "z", "é", "ü", "日本", "\U0001f600", "A", "_"]
    for n in names:
        await store.put(p + n, n.encode())
    got = [kv.key[len(p):] for kv in (await store.range(p)).kvs]
    assert got == sorted(names)


# ---------------------------------------------------------------- leases


async def test_lease_expiry_removes_attached_keys_with_delete_events(store: Store) -> None:
    p = store.prefix
    lease = await store.lease_grant(1)
    a = await store.put(p + "leased/a", b"a", lease=lease)
    b = await store.put(p + "leased/b", b"b", lease=lease)
    kept = await store.put(p + "kept", b"k")
    assert a.lease == lease and kept.lease == 0
    deletes = await collect(store, p, from_revision=kept.mod_revision + 1, count=2)
    assert {ev.kv.key for ev in deletes} == {a.key, b.key}
    assert all(ev.type is EventType.DELETE for ev in deletes)
    assert await store.get(a.key) is None and await store.get(b.key) is None
    assert (await store.get(kept.key)) == kept
    with pytest.raises(LeaseNotFound):
        await store.lease_keepalive(lease)
    with pytest.raises(LeaseNotFound):
        await store.put(p + "late", b"x", lease=lease)


async def test_lease_keepalive_keeps_keys_and_revoke_removes_them(store: Store) -> None:
    p = store.prefix
    lease = await store.lease_grant(2)  # 2 s: a keepalive every 0.2 s survives a stalled loop
    kv = await store.put(p + "alive", b"1", lease=lease)
    loop = asyncio.get_running_loop()
    until = loop.time() + 4.4  # more than two TTLs
    while loop.time() < until:
        await store.lease_keepalive(lease)
        await asyncio.sleep(0.2)
    assert (await store.get(kv.key)) == kv
    # Re-putting without the lease detaches the key from it.
    detached = await store.put(p + "detached", b"d", lease=lease)
    detached = await store.put(detached.key, b"d2")
    await store.lease_revoke(lease)
    assert await store.get(kv.key) is None
    assert (await store.get(detached.key)) == detached
    with pytest.raises(LeaseNotFound):
        await store.lease_revoke(lease)
    with pytest.raises(StoreError):
        await store.lease_grant(0)


async def test_usage_is_what_the_backend_tells_cheaply_and_is_exported(store: Store, backend: str) -> None:
    from federator.obs import METRICS

    p = store.prefix
    before = await store.usage()
    for i in range(20):
        await store.put(p + f"k{i:02}", b"v" * 1000)
    usage = await store.usage()
    label = "etcd" if backend == "etcd-tls" else backend
    if backend == "memory":
        assert usage.size_bytes is None and before.keys is not None and usage.keys == before.keys + 20
        assert METRICS.store_keys.labels(backend="memory")._value.get() == usage.keys
    else:
        assert usage.keys is None and usage.size_bytes is not None
        if backend == "sqlite":  # 20 kB of values went into the file or its write-ahead log
            assert before.size_bytes is not None and usage.size_bytes >= before.size_bytes + 20_000
        assert usage.size_bytes > 0
        assert METRICS.store_size_bytes.labels(backend=label)._value.get() == usage.size_bytes


async def test_compactions_are_counted_once_each(store: Store, backend: str) -> None:
    from federator.obs import METRICS

    counted = METRICS.store_compactions.labels(backend="etcd" if backend == "etcd-tls" else backend)
    p = store.prefix
    await store.put(p + "a", b"1")
    at = (await store.put(p + "a", b"2")).mod_revision
    start = counted._value.get()
    await store.compact(at)
    assert counted._value.get() == start + 1
    with pytest.raises(Compacted):
        await store.compact(at - 1)
    assert counted._value.get() == start + 1
