"""Compaction that keeps the store bounded (issue 16, item 7).

- sqlite compacts in short steps and gives the freed pages back (the file shrinks), lets writes through
  between the steps, counts one compaction per call, and converts a file made before incremental vacuum;
- `run_compactor` (a window of history: every fifth of the interval, compact to the newest revision at least
  one interval old) on every backend, and two replicas compacting one etcd at once;
- `--compaction-interval`: parsed, refused with one line, nothing written;
- on a running hub: the leader's compaction loop runs (the metric counts it), a watch from before the window
  gets kube's 410 Expired, and the hub's own watchers re-list after the watch cache falls behind a compaction.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from federator.controllers.jobcache import JobCache
from federator.controllers.settings import CompactionSettings, HubSettings
from federator.hub.app import compaction_interval_flag, store_compaction
from federator.obs import METRICS
from federator.store import sqlite as sqlite_module
from federator.store.compaction import CompactionRecord, compact_once, run_compactor
from federator.store.etcd import EtcdStore
from federator.store.etcd_process import EtcdProcess
from federator.store.memory import MemoryStore
from federator.store.protocol import Compacted, Store
from federator.store.sqlite import SqliteStore

from ..hub.hubtest_support import jobs_url, start_hub
from ..hub.hubtest_support import job as example_job

PREFIX = "/federator/"
VALUE = b"x" * 4096


async def _fill(store: Store, revisions: int, *, keys: int = 20) -> int:
    """`revisions` writes of 4 KiB values over `keys` keys; the last revision."""
    rev = 0
    for i in range(revisions):
        rev = (await store.put(f"{store.prefix}k{i % keys:03d}", VALUE + str(i).encode())).mod_revision
    return rev


async def _wait(what: str, check: Any, *, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)
    assert await check(), what


def _db_pages(path: Path) -> tuple[int, int]:
    """(auto_vacuum mode, file size) of a closed store file."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA auto_vacuum").fetchone()[0], path.stat().st_size
    finally:
        conn.close()


# ---------------------------------------------------------------- sqlite gives space back


async def test_sqlite_compaction_shrinks_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "_COMPACT_STEP", 100)
    monkeypatch.setattr(sqlite_module, "_VACUUM_STEP_PAGES", 64)
    db = tmp_path / "hub.db"
    store = await SqliteStore.open(db)
    last = await _fill(store, 1500)
    await store.close()  # the last connection checkpoints the WAL into the file
    mode, full = _db_pages(db)
    assert mode == 2  # INCREMENTAL, from the start
    assert full > 1500 * 4096  # the history (values and previous values) is in the file

    store = await SqliteStore.open(db)
    await store.compact(last)
    assert await store.compact_revision() == last
    kept = await store.range(PREFIX)
    assert len(kept.kvs) == 20 and kept.kvs[0].value.startswith(VALUE)
    await store.close()
    _, compacted = _db_pages(db)
    # 20 live keys of 4 KiB: what is left is the current state, not the 6 MiB of history.
    assert compacted < full / 5, (full, compacted)


async def test_sqlite_compaction_lets_writes_through_and_counts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_COMPACT_STEP", 50)
    store = await SqliteStore.open(tmp_path / "hub.db")
    try:
        first = await store.put(PREFIX + "first", b"1")
        target = await _fill(store, 1000)
        counted = METRICS.store_compactions.labels(backend="sqlite")
        before = counted._value.get()
        compaction = asyncio.create_task(store.compact(target))
        await asyncio.sleep(0)  # the first step is queued
        written = await store.put(PREFIX + "during", b"2")
        # 20 steps of 50 revisions: a write queued behind the first one ran long before the last.
        assert not compaction.done()
        assert written.mod_revision == target + 1
        await compaction
        assert counted._value.get() == before + 1
        assert await store.compact_revision() == target
        with pytest.raises(Compacted):
            await store.range(PREFIX, revision=first.mod_revision)
        with pytest.raises(Compacted):
            async with asyncio.timeout(10):
                async for _ in store.watch(PREFIX, from_revision=first.mod_revision):
                    pass
        assert (await store.range(PREFIX, revision=target)).revision == target
        # compacting to a revision already passed is refused, and counted nowhere
        with pytest.raises(Compacted):
            await store.compact(target - 1)
        assert counted._value.get() == before + 1
    finally:
        await store.close()


async def test_a_store_file_made_before_incremental_vacuum_is_converted(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    store = await SqliteStore.open(db)
    last = await _fill(store, 50)
    await store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=0")
    conn.execute("VACUUM")
    conn.close()
    assert _db_pages(db)[0] == 0

    store = await SqliteStore.open(db)
    try:
        assert await store.current_revision() == last
        assert len((await store.range(PREFIX)).kvs) == 20
        await store.compact(last)
    finally:
        await store.close()
    assert _db_pages(db)[0] == 2


# ---------------------------------------------------------------- the compactor, every backend


async def test_the_compactor_keeps_a_window_of_history(store: Store) -> None:
    record = CompactionRecord()
    first = await store.put(store.prefix + "a", b"0")
    task = asyncio.create_task(run_compactor(store, interval_seconds=0.2, record=record))
    written: list[int] = [first.mod_revision]

    async def compacted_twice() -> bool:
        written.append((await store.put(store.prefix + "a", str(len(written)).encode())).mod_revision)
        return record.compactions >= 2

    try:
        await _wait("two compactions", compacted_twice)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert record.failures == 0
    compacted_to = await store.compact_revision()
    assert compacted_to == record.last_revision
    # history from the last compaction point on is kept, and nothing newer than what was written is forgotten
    assert first.mod_revision < compacted_to <= written[-1]
    with pytest.raises(Compacted):
        async with asyncio.timeout(10):
            async for _ in store.watch(store.prefix, from_revision=first.mod_revision):
                pass
    seen = []
    async with asyncio.timeout(10):
        async for event in store.watch(store.prefix, from_revision=compacted_to):
            seen.append(event.revision)
            if event.revision >= written[-1]:
                break
    assert seen[0] >= compacted_to and seen[-1] == written[-1]


async def test_the_compactor_survives_a_store_that_does_not_answer() -> None:
    store = MemoryStore()
    await store.close()
    record = CompactionRecord()
    task = asyncio.create_task(run_compactor(store, interval_seconds=0.05, record=record))

    async def failed_twice() -> bool:
        return record.failures >= 2

    try:
        await _wait("two failed ticks", failed_twice)
        assert not task.done()  # still running: it retries at the next tick
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    with pytest.raises(ValueError, match="must be > 0"):
        await run_compactor(MemoryStore(), interval_seconds=0)


async def test_two_replicas_compacting_one_etcd_both_succeed(etcd_server: EtcdProcess, unique_prefix: str) -> None:
    a = await EtcdStore.connect([etcd_server.endpoint], prefix=unique_prefix, retry_budget_seconds=5)
    b = await EtcdStore.connect([etcd_server.endpoint], prefix=unique_prefix, retry_budget_seconds=5)
    try:
        await a.put(unique_prefix + "k", b"1")
        target = (await b.put(unique_prefix + "k", b"2")).mod_revision
        # both replicas think they lead for a moment (a deposed one that has not noticed yet)
        done = await asyncio.gather(compact_once(a, target), compact_once(b, target))
        assert sorted(done) == [False, True] or done == [True, True]  # etcd may take the same revision twice
        assert await a.compact_revision() >= target
        assert not await compact_once(a, target)  # and again: nothing to do, no error
        # each replica's compactor on its own tick: neither fails
        records = [CompactionRecord(), CompactionRecord()]
        tasks = [asyncio.create_task(run_compactor(s, interval_seconds=0.1, record=r))
                 for s, r in zip((a, b), records, strict=True)]

        async def compacted_again() -> bool:
            await a.put(unique_prefix + "k", b"3")
            return await a.compact_revision() > target and all(r.failures == 0 for r in records)

        try:
            await _wait("a later compaction", compacted_again)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert all(r.failures == 0 for r in records)
    finally:
        await a.close()
        await b.close()


# ---------------------------------------------------------------- the flag


@pytest.mark.parametrize(("value", "seconds"), [(None, 300.0), ("5m", 300.0), ("30s", 30.0), ("0", 0.0),
                                                ("1h", 3600.0), ("90", 90.0)])
def test_compaction_interval_flag(value: str | None, seconds: float) -> None:
    assert compaction_interval_flag(argparse.Namespace(compaction_interval=value)) == seconds


@pytest.mark.parametrize("value", ["soon", "-5s", "0.5s", "25h", "1e400", "nan", "5m\udcff", "9" * 400])
def test_a_wrong_compaction_interval_is_refused(value: str) -> None:
    with pytest.raises(ValueError) as err:
        compaction_interval_flag(argparse.Namespace(compaction_interval=value))
    assert str(err.value).startswith("--compaction-interval ")


def test_federator_up_refuses_a_wrong_interval_before_anything_starts(tmp_path: Path) -> None:
    import subprocess
    import sys

    state = tmp_path / "state"
    for extra in ([], ["--no-sim"]):
        result = subprocess.run(
            [sys.executable, "-m", "federator.cli", "up", "--state-dir", str(state), "--listen", "127.0.0.1:0",
             "--compaction-interval", "whenever", *extra],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            "error: --compaction-interval 'whenever': not a duration (examples: 30s, 2m, 1h, 90)"]
        assert not state.exists()


# ---------------------------------------------------------------- on a running hub


async def test_the_leader_compacts_and_an_old_watch_gets_410(tmp_path: Path) -> None:
    settings = HubSettings(state_dir=tmp_path / "state", compaction=CompactionSettings(interval_seconds=0.2))
    async with start_hub(tmp_path, controllers=[store_compaction], settings=settings) as hub:
        status, created = await hub.request("POST", jobs_url("default"), body=example_job("default", "old"))
        assert status == 201
        old_rv = created["metadata"]["resourceVersion"]
        counted = hub.metrics.store_compactions.labels(backend="sqlite")
        store = hub.context.store

        async def compacted_past_it() -> bool:
            status, _ = await hub.request("PATCH", jobs_url("default", "old"), body={"metadata": {"labels": {
                "n": str(await store.current_revision())}}}, headers={"Content-Type": "application/merge-patch+json"})
            assert status == 200
            return counted._value.get() >= 1 and await store.compact_revision() > int(old_rv) + 1

        await _wait("a compaction past the job's first revision", compacted_past_it)

        # kube's answer to a watch from before the window: 200, one ERROR event with a 410 Expired Status
        status, body = await hub.request("GET", jobs_url("default") + f"?watch=1&resourceVersion={old_rv}")
        assert status == 200
        # (one event line decodes as one JSON document; more would not)
        events = [body] if isinstance(body, dict) else [json.loads(x) for x in body.splitlines() if x.strip()]
        assert [e["type"] for e in events] == ["ERROR"]
        assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
        # a list at that exact revision: 410 too; a fresh watch works
        status, body = await hub.request(
            "GET", jobs_url("default") + f"?resourceVersion={old_rv}&resourceVersionMatch=Exact")
        assert status == 410 and body["reason"] == "Expired"
        status, listing = await hub.request("GET", jobs_url("default"))
        assert status == 200 and [j["metadata"]["name"] for j in listing["items"]] == ["old"]
        status, text = await hub.request("GET", "/metrics", who="viewer")
        assert status == 200
        line = next(x for x in text.splitlines() if x.startswith('federator_store_compactions_total{backend="sqlite"}'))
        assert float(line.split()[-1]) >= 1


async def test_the_hubs_watchers_relist_after_the_watch_cache_falls_behind_a_compaction(tmp_path: Path) -> None:
    # The memory store compacts without letting the loop run: writes and a compaction made in one go leave the
    # watch cache's store watch behind the compaction point, as an etcd compaction racing a reconnect does.
    async with start_hub(tmp_path, store_url="memory://") as hub:
        storage, rt = hub.context.storage, hub.context.kind("TrainingJob")
        await storage.create(rt, example_job("default", "a"), namespace="default")
        cache = JobCache(hub.context)
        task = asyncio.create_task(cache.run())
        try:
            async def has(*names: str) -> bool:
                return sorted(j["metadata"]["name"] for j in cache.jobs.values()) == sorted(names)

            await _wait("the job cache lists a", lambda: has("a"))
            feed = storage.feed(rt)
            epoch = feed.epoch
            # Job b as the storage would write it, put and compacted past by the memory store itself: neither
            # call lets the loop run, so the watch cache cannot read b's event before it is compacted away.
            made = [await storage.create(rt, example_job("default", name), namespace="default", dry_run=True)
                    for name in ("b", "c")]
            memory = hub.state.base.store.target if hub.state.base else None  # type: ignore[attr-defined]
            assert isinstance(memory, MemoryStore)
            for obj in made:
                obj["metadata"].pop("resourceVersion", None)
                written = await memory.put(storage.object_key(rt, "default", obj["metadata"]["name"]),
                                           orjson.dumps(obj))
            await memory.compact(written.mod_revision)  # b's revision is gone
            await _wait("the job cache re-listed and has b and c", lambda: has("a", "b", "c"))
            assert feed.epoch > epoch  # the cache reset (and re-listed) rather than reading past the compaction
            # and it keeps following live changes afterwards
            await storage.create(rt, example_job("default", "d"), namespace="default")
            await _wait("the job cache follows d", lambda: has("a", "b", "c", "d"))
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
