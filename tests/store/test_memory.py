"""memory-only behaviour: the bounded history window used by the simulator."""

from __future__ import annotations

import asyncio

import pytest

from federator.store.memory import MemoryStore
from federator.store.protocol import Compacted, Event, RevisionMismatch, StoreError, StoreUnavailable

PREFIX = "/federator/"


async def test_bounded_window_compacts_and_old_watches_get_compacted() -> None:
    store = MemoryStore(retain_revisions=100)
    first = await store.put(PREFIX + "k", b"0")
    for i in range(500):
        await store.put(PREFIX + f"k{i % 7}", str(i).encode())
    now = await store.current_revision()
    assert await store.compact_revision() == now - 99
    with pytest.raises(Compacted) as err:
        async with asyncio.timeout(5):
            async for _ in store.watch(PREFIX, from_revision=first.mod_revision):
                pass
    assert err.value.compact_revision == now - 99
    got: list[Event] = []
    async with asyncio.timeout(5):
        async for ev in store.watch(PREFIX, from_revision=now - 99):
            got.append(ev)
            if len(got) == 100:
                break
    assert [ev.revision for ev in got] == list(range(now - 99, now + 1))
    await store.close()


async def test_a_watcher_that_falls_behind_the_window_gets_compacted_not_stale_data() -> None:
    store = MemoryStore(retain_revisions=50)
    start = await store.current_revision() + 1
    watch = store.watch(PREFIX, from_revision=start)
    await store.put(PREFIX + "a", b"1")
    first = await anext(watch)
    assert first.kv.value == b"1"
    for i in range(200):  # the watcher does not read meanwhile
        await store.put(PREFIX + "a", str(i).encode())
    with pytest.raises(Compacted):
        async with asyncio.timeout(5):
            async for _ in watch:
                pass
    await store.close()


async def test_closed_memory_store_refuses_work() -> None:
    store = MemoryStore()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.put(PREFIX + "k", b"1")
    with pytest.raises(StoreError):
        MemoryStore(retain_revisions=0)


async def test_operations_are_counted_in_the_store_metrics() -> None:
    from federator.obs import Metrics

    metrics = Metrics()
    store = MemoryStore(metrics=metrics)
    kv = await store.put(PREFIX + "k", b"1")
    with pytest.raises(RevisionMismatch):
        await store.update(PREFIX + "k", b"2", expected_mod_revision=kv.mod_revision + 5)
    sample = metrics.registry.get_sample_value
    assert sample("federator_store_operations_total", {"backend": "memory", "op": "put", "result": "ok"}) == 1
    assert sample("federator_store_operations_total", {"backend": "memory", "op": "update", "result": "conflict"}) == 1
    assert sample("federator_store_operation_seconds_count", {"backend": "memory", "op": "put"}) == 1
    await store.close()


async def test_a_quiet_watcher_is_not_compacted_by_unrelated_writes() -> None:
    store = MemoryStore(retain_revisions=20)
    got: list[Event] = []
    waiting = asyncio.Event()

    async def follow() -> None:
        watch = store.watch(PREFIX + "namespaces/", from_revision=await store.current_revision() + 1)
        waiting.set()
        async for ev in watch:
            got.append(ev)
            return

    task = asyncio.create_task(follow())
    await waiting.wait()
    for i in range(200):  # far more unrelated revisions than the window holds, without yielding
        await store.put(PREFIX + f"pods/p{i % 5}", b"x")
    ns = await store.put(PREFIX + "namespaces/default", b"ns")
    async with asyncio.timeout(5):
        await task
    assert got[0].kv == ns
    await store.close()
