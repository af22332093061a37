"""sqlite-only behaviour: crash safety under kill -9, reopen, and clear errors
for corrupt, unwritable and locked files."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from federator.store.protocol import Compacted, EventType, KeyOutsidePrefix, StoreError, StoreUnavailable
from federator.store.sqlite import SqliteStore

from .sqlite_crash_writer import check

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("sqlite_crash_writer.py")
PREFIX = "/federator/"


def _start_writer(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(db), PREFIX],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.parametrize("round_", range(2))
async def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, round_: int) -> None:
    db = tmp_path / "hub.db"
    child = _start_writer(db)
    acked: dict[str, int] = {}
    max_rev = 0
    assert child.stdout is not None
    target = random.randint(200, 1200)  # kill at a random point of the stream
    count = 0
    try:
        async with asyncio.timeout(60):
            while count < target:
                line = await asyncio.to_thread(child.stdout.readline)
                if not line:
                    raise AssertionError(f"writer died: {child.stderr.read() if child.stderr else ''}")
                if line.startswith("ack "):
                    _, key, n, rev = line.split()
                    acked[key] = max(acked.get(key, -1), int(n))
                    max_rev = max(max_rev, int(rev))
                    count += 1
    finally:
        child.send_signal(signal.SIGKILL)
    # Lines printed before the kill were acknowledged too.
    rest, _ = await asyncio.to_thread(child.communicate)
    for line in rest.splitlines():
        if line.startswith("ack "):
            _, key, n, rev = line.split()
            acked[key] = max(acked.get(key, -1), int(n))
            max_rev = max(max_rev, int(rev))
    assert child.returncode == -signal.SIGKILL

    store = await SqliteStore.open(db, prefix=PREFIX)
    try:
        assert await store.current_revision() >= max_rev
        everything = await store.range(PREFIX)
        found = {kv.key: check(kv.key, kv.value) for kv in everything.kvs}  # nothing torn
        for key, n in acked.items():
            assert key in found, f"acknowledged write to {key} lost"
            assert found[key] >= n, f"{key}: acknowledged #{n}, found #{found[key]}"
        # The file still takes writes and its history is whole.
        kv = await store.put(PREFIX + "after", b"ok")
        assert kv.mod_revision == await store.current_revision()
    finally:
        await store.close()


async def test_reopen_keeps_data_revisions_history_and_revokes_orphan_leases(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    store = await SqliteStore.open(db)
    first = await store.put(PREFIX + "a", b"1")
    await store.put(PREFIX + "a", b"2")
    lease = await store.lease_grant(60)
    leased = await store.put(PREFIX + "leased", b"l", lease=lease)
    await store.put(PREFIX + "b", b"3")
    await store.compact(first.mod_revision + 1)
    rev = await store.current_revision()
    await store.close()

    store = await SqliteStore.open(db)
    try:
        assert await store.compact_revision() == first.mod_revision + 1
        # The lease's holder died with the old process: its key is gone, by
        # a DELETE at the next revision.
        assert await store.current_revision() == rev + 1
        assert await store.get(PREFIX + "leased") is None
        assert [kv.value for kv in (await store.range(PREFIX)).kvs] == [b"2", b"3"]
        events = []
        async with asyncio.timeout(10):
            async for ev in store.watch(PREFIX, from_revision=first.mod_revision + 1):
                events.append(ev)
                if len(events) == 4:
                    break
        assert [(e.type, e.kv.key) for e in events] == [
            (EventType.PUT, PREFIX + "a"), (EventType.PUT, PREFIX + "leased"),
            (EventType.PUT, PREFIX + "b"), (EventType.DELETE, PREFIX + "leased"),
        ]
        assert events[3].prev_kv == leased
        with pytest.raises(Compacted):
            await store.range(PREFIX, revision=first.mod_revision)
        kv = await store.put(PREFIX + "c", b"4")
        assert kv.mod_revision == rev + 2
    finally:
        await store.close()


async def test_retained_window_compacts_automatically(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "hub.db", retain_revisions=40)
    try:
        first = await store.put(PREFIX + "k", b"0")
        for i in range(100):
            await store.put(PREFIX + "k", str(i).encode())
        assert await store.compact_revision() > first.mod_revision
        with pytest.raises(Compacted):
            async with asyncio.timeout(10):
                async for _ in store.watch(PREFIX, from_revision=first.mod_revision):
                    pass
        recent = await store.current_revision() - 20
        assert (await store.range(PREFIX, revision=recent)).kvs[0].mod_revision == recent
    finally:
        await store.close()


async def test_a_garbage_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    garbage = os.urandom(8192)
    db.write_bytes(garbage)
    with pytest.raises(StoreError, match=str(db)) as err:
        await SqliteStore.open(db)
    assert "corrupt or not a federator store" in str(err.value)
    assert db.read_bytes() == garbage


async def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not a federator store"):
        await SqliteStore.open(db)
    assert db.read_bytes() == before


async def test_a_damaged_store_file_gives_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    store = await SqliteStore.open(db)
    for i in range(300):
        await store.put(PREFIX + f"k{i:04d}", os.urandom(500))
    await store.close()  # checkpoints the WAL into the main file
    size = db.stat().st_size
    with open(db, "r+b") as f:  # scribble over pages in the middle of the file
        f.seek(size // 2)
        f.write(os.urandom(4096 * 2))
    with pytest.raises(StoreError, match=str(db)):
        store = await SqliteStore.open(db)
        try:
            await store.range(PREFIX)  # if open did not notice, the read must
        finally:
            await store.close()


async def test_unwritable_paths_give_store_unavailable_naming_the_path(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    for bad in (not_a_dir / "hub.db", tmp_path / "missing" / "dir" / "hub.db"):
        with pytest.raises(StoreUnavailable, match=str(bad)):
            await SqliteStore.open(bad)
    assert not (tmp_path / "missing").exists()


async def test_second_opener_is_refused_while_another_process_holds_the_file(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    child = _start_writer(db)
    try:
        assert child.stdout is not None
        async with asyncio.timeout(30):
            while (await asyncio.to_thread(child.stdout.readline)).strip() != "ready":
                pass
        with pytest.raises(StoreUnavailable, match=rf"{db}.*in use by another process \(pid {child.pid}\)"):
            await SqliteStore.open(db)
    finally:
        child.kill()
        child.communicate()
    # Once the holder is gone (even by kill -9), the file opens again.
    store = await SqliteStore.open(db)
    await store.close()


async def test_second_open_in_one_process_is_refused(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "hub.db")
    try:
        with pytest.raises(StoreUnavailable, match="already open in this process"):
            await SqliteStore.open(tmp_path / "hub.db")
        assert await store.put(PREFIX + "still", b"fine")
    finally:
        await store.close()


async def test_a_sqlite_lock_held_by_another_connection_is_a_clear_bounded_error(tmp_path: Path) -> None:
    db = tmp_path / "hub.db"
    store = await SqliteStore.open(db, busy_timeout_seconds=0.2)
    before = await store.put(PREFIX + "k", b"1")
    intruder = sqlite3.connect(db, isolation_level=None)
    intruder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match=rf"{db} is locked"):
            await store.put(PREFIX + "k", b"2")
        assert await store.current_revision() == before.mod_revision
    finally:
        intruder.execute("ROLLBACK")
        intruder.close()
    after = await store.put(PREFIX + "k", b"3")  # recovers, no revision skipped
    assert after.mod_revision == before.mod_revision + 1 and after.version == 2
    await store.close()


async def test_closed_store_refuses_work_and_ends_watches(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "hub.db")
    watch = store.watch(PREFIX, from_revision=0)

    async def drain() -> None:
        async for _ in watch:
            pass

    task = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await store.close()
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(task, 10)
    with pytest.raises(StoreUnavailable):
        await store.put(PREFIX + "k", b"1")
    with pytest.raises(KeyOutsidePrefix):
        await store.get("/other/k")
