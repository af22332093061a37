"""etcd-only faults: unreachable etcd, etcd going away and coming back, mid-watch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess, free_port
from federator.store.protocol import Event, StoreUnavailable

PREFIX = "/federator/"


async def test_unreachable_etcd_gives_store_unavailable_in_bounded_time() -> None:
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens here
    async with asyncio.timeout(30):  # a hang fails the test
        with pytest.raises(StoreUnavailable, match=endpoint):
            await EtcdStore.connect([endpoint], connect_timeout_seconds=1.0)


async def test_operations_fail_cleanly_while_etcd_is_down_and_work_when_it_returns(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=1.0)
    try:
        kv = await store.put(PREFIX + "k", b"1")
        etcd.kill()
        async with asyncio.timeout(30):
            with pytest.raises(StoreUnavailable, match="unavailable"):
                await store.put(PREFIX + "k", b"2")
            with pytest.raises(StoreUnavailable):
                await store.get(PREFIX + "k")
        etcd.start()  # same ports, same data
        store_after = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=10.0)
        try:
            assert (await store_after.get(PREFIX + "k")) == kv
        finally:
            await store_after.close()
        async with asyncio.timeout(30):
            while True:  # the old client reconnects by itself
                try:
                    assert (await store.get(PREFIX + "k")) == kv
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.1)
    finally:
        await store.close()


async def test_watch_survives_etcd_restart_without_gaps_or_duplicates(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=30.0)
    try:
        start = await store.current_revision() + 1
        got: list[Event] = []
        three = asyncio.Event()

        async def follow() -> None:
            async for ev in store.watch(PREFIX, from_revision=start):
                got.append(ev)
                if len(got) == 3:
                    three.set()
                if len(got) == 6:
                    return

        task = asyncio.create_task(follow())
        before = [await store.put(PREFIX + f"k{i}", b"before") for i in range(3)]
        async with asyncio.timeout(30):
            await three.wait()
        etcd.kill()
        etcd.start()
        after = [await store.put(PREFIX + f"k{i}", b"after") for i in range(3)]
        async with asyncio.timeout(30):
            await task
        assert [ev.kv for ev in got] == before + after
    finally:
        await store.close()


async def test_watch_raises_store_unavailable_when_etcd_stays_away(
    etcd_factory: Callable[[], EtcdProcess],
) -> None:
    etcd = etcd_factory()
    store = await EtcdStore.connect([etcd.endpoint], retry_budget_seconds=1.0)
    try:
        created = asyncio.Event()

        async def follow() -> None:
            it = store.watch(PREFIX, from_revision=0)
            created.set()
            async for _ in it:
                pass

        task = asyncio.create_task(follow())
        await created.wait()
        await store.put(PREFIX + "k", b"1")
        etcd.kill()
        async with asyncio.timeout(30):  # never a silent hang
            with pytest.raises(StoreUnavailable, match="watch"):
                await task
    finally:
        await store.close()
