"""SqliteStore: the hub's embedded default backend, one SQLite file in WAL mode.

Durability. The file runs with journal_mode=WAL and synchronous=NORMAL. A
commit appends its pages to the -wal file with write(2) before we acknowledge
it; the bytes then live in the kernel's page cache, which belongs to the OS,
not to our process, so a kill -9 (or any crash of the hub process) loses no
acknowledged write: the next open replays the WAL. What NORMAL gives up is
an fsync per commit, i.e. durability against power loss or a kernel crash
(checkpoints still fsync). Pass synchronous="FULL" to fsync every commit when
that matters more than write throughput. A torn WAL tail (a frame written
half) is detected by its checksum and discarded, so nothing torn is ever read.

Concurrency. One dedicated thread owns the one connection; every read and
write is a job on its queue, so the event loop never blocks on SQLite.
Consecutive write jobs commit together (group commit: one BEGIN IMMEDIATE ...
COMMIT for the whole run, each txn still its own revision, all acknowledged
after that COMMIT). A read is never run inside an uncommitted group.

Single writer. The store takes an exclusive OS lock (flock on PATH.lock) at
open, so a second hub process on the same file fails fast with an error that
names the path and the holder's pid, instead of two processes interleaving
revisions. Because of that lock, the process holding it knows every lease in
the file belonged to a dead predecessor: they are revoked at open (their keys
deleted, with DELETE events), which also frees the leader key at once.

Watch. Commits are published in-process to an `EventLog` that caches the
most recent events; a watch from older revisions first replays them from the
`log` table, then follows live events. Compaction deletes old `log` rows.

Space. The file runs with auto_vacuum=INCREMENTAL (a file made before that is
converted once, by a VACUUM at open). `compact()` deletes history in steps of
_COMPACT_STEP revisions and then returns the freed pages to the file system
in steps of _VACUUM_STEP_PAGES pages, each step its own short write
transaction, so writes queued meanwhile run between the steps instead of
waiting for the whole compaction. The write-ahead log is checkpointed by the
worker every _CHECKPOINT_EVERY commits or once it holds _WAL_CHECKPOINT_BYTES,
whichever comes first, and cut back to _WAL_LIMIT_BYTES after a checkpoint
(journal_size_limit), so neither file grows without bound while something
compacts (the hub's compaction loop, store/compaction.py).

This module must never be opened by two processes on one file at once, and
must never acknowledge a write before its COMMIT returned.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import queue
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

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

_log = get_logger("store.sqlite")

#: PRAGMA application_id of a federator store file ("FEDR").
_APPLICATION_ID = 0x46454452
_SCHEMA_VERSION = 1
_PUT, _DELETE = 0, 1
#: Group commit bound: how many queued write jobs share one COMMIT.
_MAX_GROUP = 256
#: How many recent events the in-memory watch cache keeps.
_CACHED_EVENTS = 20_000
#: Revisions replayed from disk per step of a catching-up watch.
_REPLAY_SPAN = 2_000
#: Revisions of history one compaction step deletes (one short write transaction).
_COMPACT_STEP = 2_000
#: Free pages one incremental-vacuum step gives back (4 MiB at the default page size; ~60 ms on a loaded
#: 2-core machine: sqlite3 frees one page per statement step, see _w_vacuum).
_VACUUM_STEP_PAGES = 1_024
#: What the write-ahead log is cut back to after a checkpoint (PRAGMA journal_size_limit).
_WAL_LIMIT_BYTES = 16 * 1024 * 1024
#: A write-ahead log this big is checkpointed even before _CHECKPOINT_EVERY commits (its size is looked at
#: every _WAL_SIZE_EVERY commits: one stat). Small commits of big pages (a status write touches a few
#: pages of kv, the log table and their indexes) would otherwise grow it to ~30 MiB between checkpoints.
_WAL_CHECKPOINT_BYTES = 8 * 1024 * 1024
_WAL_SIZE_EVERY = 50
#: PRAGMA auto_vacuum value of INCREMENTAL.
_AUTO_VACUUM_INCREMENTAL = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    create_rev INTEGER NOT NULL,
    mod_rev INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_lease ON kv(lease) WHERE lease != 0;
CREATE TABLE IF NOT EXISTS log (
    rev INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    type INTEGER NOT NULL,
    value BLOB,
    create_rev INTEGER,
    version INTEGER,
    lease INTEGER,
    prev_value BLOB,
    prev_create_rev INTEGER,
    prev_mod_rev INTEGER,
    prev_version INTEGER,
    prev_lease INTEGER,
    PRIMARY KEY (rev, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY,
    ttl REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

_Sync = Literal["NORMAL", "FULL"]


@dataclass(slots=True)
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    writes: bool


class _Stop:
    pass


@dataclass(slots=True)
class _Read:
    value: Any


_DEFER = object()
#: Commits between two WAL checkpoints (run by the worker thread).
_CHECKPOINT_EVERY = 1000


@dataclass(slots=True)
class _WriteOutcome:
    result: Any
    revision: int
    events: list[Event]
    compact_revision: int
    #: a step of a compact() call that is not its last: the call counts one compaction, not one per step
    partial_compaction: bool = False


_Outcome = _WriteOutcome | _Read | BaseException


class SqliteStore(BaseStore):
    """The store protocol on one SQLite file. Build it with `await SqliteStore.open(path)`."""

    backend_name = "sqlite"

    def __init__(self, *, path: Path, prefix: str, metrics: Metrics | None, retain_revisions: int | None) -> None:
        super().__init__(prefix=prefix, metrics=metrics)
        self.path = path
        self._retain = retain_revisions
        self._loop = asyncio.get_running_loop()
        self._jobs: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._closed = False
        # Connection state: used by the worker thread, or inline on the loop
        # thread while it holds _conn_lock and no job is outstanding.
        self._conn_lock = threading.Lock()
        self._outstanding = 0  # jobs submitted and not yet delivered (loop side)
        self._commits_since_checkpoint = 0
        self._busy_budget = 2.0
        self._w_conn: sqlite3.Connection | None = None
        self._w_revision = 0
        self._w_compact = 0
        # Loop-side state, updated in the commit callback.
        self._revision = 0
        self._compact_revision = 0
        self._log: EventLog = EventLog(last_revision=0)
        self._leases: dict[int, tuple[float, float]] = {}  # id -> (ttl, deadline on loop clock)
        self._lease_changed = asyncio.Event()
        self._expiry_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        synchronous: _Sync = "NORMAL",
        busy_timeout_seconds: float = 2.0,
        retain_revisions: int | None = None,
        metrics: Metrics | None = None,
    ) -> SqliteStore:
        """Open (creating if needed) the store file at `path`. Raises
        StoreUnavailable for a path that cannot be written or a file another
        process holds, StoreError for a file that is corrupt or not a store."""
        if synchronous not in ("NORMAL", "FULL"):
            raise StoreError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        if retain_revisions is not None and retain_revisions < 1:
            raise StoreError(f"retain_revisions must be >= 1 or None, not {retain_revisions!r}")
        store = cls(path=Path(path), prefix=prefix, metrics=metrics, retain_revisions=retain_revisions)
        store._busy_budget = busy_timeout_seconds
        store._take_file_lock()
        try:
            store._start_worker()
            orphans: list[Event]
            revision, compact, orphans = await store._submit(
                lambda conn: store._w_open(conn, synchronous, busy_timeout_seconds), writes=False
            )
        except BaseException:
            await store._shutdown()
            raise
        store._revision = revision
        store._compact_revision = compact
        store._log = EventLog(last_revision=revision)
        if orphans:
            _log.info("revoked leases of a previous process", path=str(store.path), keys_deleted=len(orphans))
        _log.info("sqlite store open", path=str(store.path), revision=revision, compact_revision=compact)
        return store

    def _take_file_lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreUnavailable(
                f"cannot open sqlite store {self.path}: {e.strerror} ({lock_path}); "
                "check that the directory exists and is writable"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            if holder == str(os.getpid()):
                raise StoreUnavailable(f"sqlite store {self.path} is already open in this process") from None
            raise StoreUnavailable(
                f"sqlite store {self.path} is in use by another process (pid {holder}); "
                "only one hub may write a store file (sqlite is single-replica; run hub replicas on etcd: "
                "--store etcd://HOST:PORT,HOST:PORT,...)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _start_worker(self) -> None:
        self._thread = threading.Thread(target=self._worker, name=f"sqlite-store:{self.path.name}", daemon=True)
        self._thread.start()

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
        await self._shutdown()
        _log.info("sqlite store closed", path=str(self.path), revision=self._revision)

    async def _shutdown(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._jobs.put(_Stop())
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ------------------------------------------------------------ worker thread

    def _connect(self, busy_timeout_seconds: float) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise StoreUnavailable(
                f"cannot open sqlite store {self.path}: {e}; check that the path is a writable file"
            ) from None
        return conn

    def _worker(self) -> None:
        pending: list[_Job] = []
        stop = False
        while not stop:
            batch: list[_Job | _Stop] = [self._jobs.get()]
            while len(batch) < _MAX_GROUP:
                try:
                    batch.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            with self._conn_lock:
                for job in batch:
                    if isinstance(job, _Stop):
                        stop = True
                        break
                    if job.writes:
                        pending.append(job)
                        continue
                    # A read never runs inside an uncommitted group.
                    self._flush(pending)
                    pending = []
                    self._run_read(job)
                self._flush(pending)
                pending = []
        if self._w_conn is not None:
            self._w_conn.close()
            self._w_conn = None

    def _run_read(self, job: _Job) -> None:
        try:
            result = job.fn(self._w_conn)  # type: ignore[arg-type]  # None only for the open job
        except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
            failed: list[tuple[_Job, _Outcome]] = [(job, self._translate(e))]
            self._loop.call_soon_threadsafe(self._delivered, failed)
        else:
            done: list[tuple[_Job, _Outcome]] = [(job, _Read(result))]
            self._loop.call_soon_threadsafe(self._delivered, done)

    def _begin(self, conn: sqlite3.Connection, *, wait: bool) -> bool:
        """BEGIN IMMEDIATE. The connection never blocks inside SQLite (busy
        timeout 0): the worker retries a busy file here with capped
        exponential backoff and jitter, the loop thread (wait=False) gives
        up at once and hands the job to the worker."""
        retry_until = time.monotonic() + self._busy_budget
        delay = 0.01
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                if not wait:
                    return False
                remaining = retry_until - time.monotonic()
                if remaining <= 0:
                    raise
                pause = min(remaining, random.uniform(delay / 2, delay))
                _log.warning("sqlite store locked by another connection; retrying",
                             path=str(self.path), wait_seconds=round(pause, 3))
                self._metrics.retry("begin")
                time.sleep(pause)
                delay = min(delay * 2, 0.5)

    def _flush(self, jobs: list[_Job]) -> None:
        """Run consecutive write jobs in one transaction, then acknowledge them."""
        if not jobs:
            return
        try:
            outcomes = self._write_group(jobs, wait=True)
        except BaseException as e:  # noqa: BLE001 - the whole group failed; nothing was committed
            error = self._translate(e)
            failed: list[tuple[_Job, _Outcome]] = [(job, error) for job in jobs]
            self._loop.call_soon_threadsafe(self._delivered, failed)
            return
        assert outcomes is not None
        done: list[tuple[_Job, _Outcome]] = list(zip(jobs, outcomes, strict=True))
        self._loop.call_soon_threadsafe(self._delivered, done)

    def _write_group(self, jobs: Sequence[_Job], *, wait: bool) -> list[_WriteOutcome | StoreError] | None:
        """One transaction for all `jobs` (caller holds _conn_lock). None if
        the file was busy and wait=False; raises if the transaction failed."""
        conn = self._w_conn
        if conn is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        start_rev, start_compact = self._w_revision, self._w_compact
        outcomes: list[_WriteOutcome | StoreError] = []
        try:
            if not self._begin(conn, wait=wait):
                return None
            # A savepoint per job lets one job's refusal (say LeaseNotFound)
            # leave the others of its group intact; a lone job needs none.
            grouped = len(jobs) > 1
            for job in jobs:
                if grouped:
                    conn.execute("SAVEPOINT job")
                saved = (self._w_revision, self._w_compact)
                try:
                    outcome = job.fn(conn)
                except StoreError as e:
                    conn.execute("ROLLBACK TO job" if grouped else "ROLLBACK")
                    self._w_revision, self._w_compact = saved
                    outcomes.append(e)
                else:
                    outcomes.append(outcome)
                if grouped:
                    conn.execute("RELEASE job")
            if conn.in_transaction:
                conn.execute("COMMIT")
        except BaseException:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._w_revision, self._w_compact = start_rev, start_compact
            raise
        return outcomes

    def _translate(self, e: BaseException) -> BaseException:
        if isinstance(e, StoreError):
            return e
        if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
            return StoreUnavailable(
                f"sqlite store {self.path} is locked by another process ({e}); "
                "is a second hub or a sqlite3 shell holding it?"
            )
        if isinstance(e, sqlite3.DatabaseError) and (
            "not a database" in str(e) or "malformed" in str(e) or "corrupt" in str(e)
        ):
            return StoreError(f"sqlite store {self.path} is corrupt or not a federator store: {e}")
        if isinstance(e, sqlite3.OperationalError) and ("readonly" in str(e) or "unable to open" in str(e)):
            return StoreUnavailable(f"sqlite store {self.path} cannot be written: {e}")
        if isinstance(e, sqlite3.Error):
            return StoreUnavailable(f"sqlite store {self.path} failed: {type(e).__name__}: {e}")
        return e

    # ------------------------------------------------------------ loop side

    def _submit(self, fn: Callable[[sqlite3.Connection], Any], *, writes: bool) -> asyncio.Future[Any]:
        if self._closed and self._thread is None:
            raise StoreUnavailable(f"sqlite store {self.path} is closed")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._outstanding += 1
        self._jobs.put(_Job(fn, future, writes))
        return future

    def _try_inline(self, fn: Callable[[sqlite3.Connection], Any], *, writes: bool) -> Any:
        """Run a short job on the loop thread when the worker is idle: saves
        two thread hand-offs per operation. Returns _DEFER when it cannot
        (work is queued, or the file is busy), and the caller submits it.
        Jobs run here never wait: the connection's busy timeout is 0."""
        if self._outstanding or self._w_conn is None or not self._conn_lock.acquire(blocking=False):
            return _DEFER
        try:
            if not writes:
                try:
                    return fn(self._w_conn)
                except sqlite3.Error as e:
                    raise self._translate(e) from None
            try:
                outcomes = self._write_group([_Job(fn, None, True)], wait=False)  # type: ignore[arg-type]
            except sqlite3.Error as e:
                raise self._translate(e) from None
        finally:
            self._conn_lock.release()
        if outcomes is None:
            return _DEFER
        outcome = outcomes[0]
        if isinstance(outcome, StoreError):
            raise outcome
        self._publish(outcome)
        return outcome.result

    async def _run(self, fn: Callable[[sqlite3.Connection], Any], *, writes: bool, inline: bool = True) -> Any:
        self._check_open()
        if inline:
            result = self._try_inline(fn, writes=writes)
            if result is not _DEFER:
                return result
        return await self._submit(fn, writes=writes)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self.path} is closed")

    def _publish(self, outcome: _WriteOutcome) -> None:
        if outcome.events:
            self._log.append(outcome.revision, outcome.events)
            self._log.trim_to_size(_CACHED_EVENTS)
            self._commits_since_checkpoint += 1
            due = self._commits_since_checkpoint >= _CHECKPOINT_EVERY or (
                self._commits_since_checkpoint % _WAL_SIZE_EVERY == 0 and self._wal_bytes() >= _WAL_CHECKPOINT_BYTES)
            if due and not self._closed:
                # The connection does not auto-checkpoint (that would stall
                # an inline write); the worker does it, off the loop.
                self._commits_since_checkpoint = 0
                self._submit(self._w_checkpoint, writes=False)
        self._revision = max(self._revision, outcome.revision)
        if outcome.compact_revision > self._compact_revision and not outcome.partial_compaction:
            self._metrics.compacted()
        self._compact_revision = max(self._compact_revision, outcome.compact_revision)

    def _delivered(self, outcomes: list[tuple[_Job, _Outcome]]) -> None:
        """Runs on the loop after the worker finished jobs: publish events
        first, then wake the callers, so a writer that then watches sees its
        own write."""
        for _, outcome in outcomes:
            if isinstance(outcome, _WriteOutcome):
                self._publish(outcome)
        for job, outcome in outcomes:
            self._outstanding -= 1
            if isinstance(outcome, BaseException):
                _reject(job.future, outcome)
            elif isinstance(outcome, _Read):
                _resolve(job.future, outcome.value)
            else:
                _resolve(job.future, outcome.result)

    def _wal_bytes(self) -> int:
        try:
            return self.path.with_name(self.path.name + "-wal").stat().st_size
        except OSError:
            return 0

    def _w_checkpoint(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    # ------------------------------------------------------------ worker: open

    def _w_open(
        self, conn: sqlite3.Connection | None, synchronous: str, busy_timeout_seconds: float
    ) -> tuple[int, int, list[Event]]:
        conn = self._connect(busy_timeout_seconds)
        try:
            result = self._w_prepare(conn, synchronous)
        except BaseException:
            conn.close()
            raise
        self._w_conn = conn
        return result

    def _w_prepare(self, conn: sqlite3.Connection, synchronous: str) -> tuple[int, int, list[Event]]:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and app_id != _APPLICATION_ID:
                raise StoreError(
                    f"sqlite store {self.path} is not a federator store "
                    f"(application_id {app_id:#x}, tables {sorted(tables)})"
                )
            if not tables:
                # Only before the first table (and before WAL mode writes the header) does this take.
                conn.execute(f"PRAGMA auto_vacuum={_AUTO_VACUUM_INCREMENTAL}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreUnavailable(f"sqlite store {self.path} cannot use WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
            if not tables:
                # One transaction, so a crash here leaves no half-made store.
                conn.executescript(
                    "BEGIN IMMEDIATE;" + _SCHEMA
                    + f"PRAGMA application_id={_APPLICATION_ID}; PRAGMA user_version={_SCHEMA_VERSION};"
                    "INSERT INTO meta(name, value) VALUES ('revision', 1), ('compact_revision', 0); COMMIT;"
                )
            self._begin(conn, wait=True)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != _SCHEMA_VERSION:
                raise StoreError(
                    f"sqlite store {self.path} has schema version {version}; this federator reads {_SCHEMA_VERSION}"
                )
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            last_logged = conn.execute("SELECT MAX(rev) FROM log").fetchone()[0] or 0
            self._w_revision = max(int(meta.get("revision", 1)), last_logged)
            self._w_compact = int(meta.get("compact_revision", 0))
            # Every lease in the file belongs to a process that no longer
            # holds the file lock, so none of them can be kept alive.
            orphans: list[Event] = []
            for (lease_id,) in conn.execute("SELECT id FROM lease").fetchall():
                orphans += self._w_revoke(conn, lease_id).events
            conn.execute("COMMIT")
            # Check the file reads end to end once, so a damaged page shows
            # at open rather than in the middle of serving.
            check = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                raise StoreError(f"sqlite store {self.path} is corrupt: {check}")
            if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != _AUTO_VACUUM_INCREMENTAL:
                # A file made before compaction gave space back: convert it once (VACUUM rewrites the
                # whole file, before the store serves anything).
                _log.info("converting the sqlite store to incremental vacuum (once; rewrites the file)",
                          path=str(self.path))
                started = time.monotonic()
                conn.execute(f"PRAGMA auto_vacuum={_AUTO_VACUUM_INCREMENTAL}")
                conn.execute("VACUUM")
                _log.info("sqlite store converted to incremental vacuum", path=str(self.path),
                          seconds=round(time.monotonic() - started, 3))
            # From now on the connection never blocks inside SQLite: see _begin.
            conn.execute("PRAGMA busy_timeout=0")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise self._translate(e) from None
        return self._w_revision, self._w_compact, orphans

    # ------------------------------------------------------------ worker: reads

    @staticmethod
    def _row_kv(row: tuple[Any, ...]) -> KeyValue:
        return KeyValue(row[0], bytes(row[1]), row[2], row[3], row[4], row[5])

    def _w_get(self, conn: sqlite3.Connection, key: str) -> KeyValue | None:
        row = conn.execute(
            "SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else self._row_kv(row)

    def _w_range(
        self, conn: sqlite3.Connection, prefix: str, limit: int, start_after: str | None, revision: int | None
    ) -> RangeResult:
        end = prefix_end(prefix)
        current = self._w_revision
        if revision is not None and revision != current:
            if revision > current:
                raise FutureRevision(revision, current)
            if revision < self._w_compact:
                raise Compacted(revision, self._w_compact)
            return self._w_range_past(conn, prefix, end, limit, start_after, revision)
        count = conn.execute("SELECT COUNT(*) FROM kv WHERE key >= ? AND key < ?", (prefix, end)).fetchone()[0]
        lo = prefix if start_after is None or start_after < prefix else start_after
        op = ">=" if start_after is None or start_after < prefix else ">"
        sql = f"SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE key {op} ? AND key < ? ORDER BY key"
        if limit:
            rows = conn.execute(sql + " LIMIT ?", (lo, end, limit + 1)).fetchall()
            more = len(rows) > limit
            rows = rows[:limit]
        else:
            rows = conn.execute(sql, (lo, end)).fetchall()
            more = False
        return RangeResult(kvs=tuple(self._row_kv(r) for r in rows), revision=current, more=more, count=count)

    def _w_range_past(
        self, conn: sqlite3.Connection, prefix: str, end: str, limit: int, start_after: str | None, revision: int
    ) -> RangeResult:
        # Roll back from the present: the state of a key at `revision` is the
        # prev of its first logged change after `revision`.
        rolled: dict[str, KeyValue | None] = {}
        rows = conn.execute(
            "SELECT key, prev_value, prev_create_rev, prev_mod_rev, prev_version, prev_lease FROM log "
            "WHERE rev > ? AND key >= ? AND key < ? ORDER BY rev DESC, seq DESC",
            (revision, prefix, end),
        )
        for key, pv, pc, pm, pver, pl in rows:
            rolled[key] = None if pm is None else KeyValue(key, bytes(pv), pc, pm, pver, pl)
        state = {
            r[0]: self._row_kv(r)
            for r in conn.execute(
                "SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE key >= ? AND key < ?",
                (prefix, end),
            )
            if r[0] not in rolled
        }
        for k, kv in rolled.items():
            if kv is not None:
                state[k] = kv
        ordered = sorted(state)
        count = len(ordered)
        if start_after is not None:
            ordered = [k for k in ordered if k > start_after]
        more = bool(limit) and len(ordered) > limit
        if limit:
            ordered = ordered[:limit]
        return RangeResult(kvs=tuple(state[k] for k in ordered), revision=revision, more=more, count=count)

    def _w_events(self, conn: sqlite3.Connection, prefix: str, start: int, stop: int) -> list[Event]:
        events = []
        for row in conn.execute(
            "SELECT rev, key, type, value, create_rev, version, lease, "
            "prev_value, prev_create_rev, prev_mod_rev, prev_version, prev_lease FROM log "
            "WHERE rev >= ? AND rev < ? AND key >= ? AND key < ? ORDER BY rev, seq",
            (start, stop, prefix, prefix_end(prefix)),
        ):
            rev, key, typ, value, create, version, lease, pv, pc, pm, pver, pl = row
            prev = None if pm is None else KeyValue(key, bytes(pv), pc, pm, pver, pl)
            if typ == _PUT:
                events.append(Event(EventType.PUT, KeyValue(key, bytes(value), create, rev, version, lease), prev))
            else:
                assert prev is not None
                events.append(Event(EventType.DELETE, replace(prev, mod_revision=rev), prev))
        return events

    # ------------------------------------------------------------ worker: writes

    def _w_txn(
        self, conn: sqlite3.Connection, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> _WriteOutcome:
        ok = all(compare_holds(c, self._w_get(conn, c.key)) for c in compares)
        ops = success if ok else failure
        for op in ops:
            if isinstance(op, Put) and op.lease:
                if conn.execute("SELECT 1 FROM lease WHERE id = ?", (op.lease,)).fetchone() is None:
                    raise LeaseNotFound(op.lease)
        rev = self._w_revision + 1
        events: list[Event] = []
        results: list[KeyValue | None] = []
        for op in ops:
            if isinstance(op, Get):
                results.append(self._w_get(conn, op.key))
            elif isinstance(op, Put):
                prev = self._w_get(conn, op.key)
                value = bytes(op.value)
                if prev is None:
                    kv = KeyValue(op.key, value, rev, rev, 1, op.lease)
                else:
                    kv = KeyValue(op.key, value, prev.create_revision, rev, prev.version + 1, op.lease)
                conn.execute(
                    "INSERT OR REPLACE INTO kv(key, value, create_rev, mod_rev, version, lease) VALUES (?,?,?,?,?,?)",
                    (kv.key, value, kv.create_revision, rev, kv.version, kv.lease),
                )
                self._w_log(conn, rev, len(events), _PUT, kv, prev)
                events.append(Event(EventType.PUT, kv, prev))
                results.append(kv)
            else:
                assert isinstance(op, Delete)
                ev = self._w_delete(conn, op.key, rev, len(events))
                if ev is not None:
                    events.append(ev)
                results.append(ev.prev_kv if ev is not None else None)
        if events:
            self._w_revision = rev
            self._w_autocompact(conn)
        return self._outcome(TxnResult(succeeded=ok, revision=self._w_revision, results=tuple(results)), events)

    def _outcome(self, result: Any, events: list[Event]) -> _WriteOutcome:
        return _WriteOutcome(result, self._w_revision, events, self._w_compact)

    def _w_delete(self, conn: sqlite3.Connection, key: str, rev: int, seq: int) -> Event | None:
        prev = self._w_get(conn, key)
        if prev is None:
            return None
        conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        gone = replace(prev, mod_revision=rev)
        self._w_log(conn, rev, seq, _DELETE, gone, prev)
        return Event(EventType.DELETE, gone, prev)

    @staticmethod
    def _w_log(conn: sqlite3.Connection, rev: int, seq: int, typ: int, kv: KeyValue, prev: KeyValue | None) -> None:
        if typ == _DELETE:
            # A delete's kv is its prev with the new mod_revision: store it once.
            row: tuple[Any, ...] = (rev, seq, kv.key, typ, None, None, None, None)
        else:
            row = (rev, seq, kv.key, typ, kv.value, kv.create_revision, kv.version, kv.lease)
        if prev is None:
            row += (None, None, None, None, None)
        else:
            row += (prev.value, prev.create_revision, prev.mod_revision, prev.version, prev.lease)
        conn.execute("INSERT INTO log VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", row)

    def _w_autocompact(self, conn: sqlite3.Connection) -> None:
        # Compact in steps of 1/8 of the window so the delete stays amortised.
        if self._retain is None:
            return
        target = self._w_revision - self._retain + 1
        if target - self._w_compact >= max(1, self._retain // 8):
            self._w_compact_to(conn, target)

    def _w_compact_to(self, conn: sqlite3.Connection, revision: int) -> None:
        conn.execute("DELETE FROM log WHERE rev < ?", (revision,))
        conn.execute("UPDATE meta SET value = ? WHERE name = 'compact_revision'", (revision,))
        # The revision counter must survive even if every log row goes.
        conn.execute("UPDATE meta SET value = ? WHERE name = 'revision'", (self._w_revision,))
        self._w_compact = revision

    def _w_compact_step(self, conn: sqlite3.Connection, revision: int, *, first: bool) -> _WriteOutcome:
        """One step of compact(revision): forget at most _COMPACT_STEP revisions of history. The first
        step checks the revision; a later one finding the store already compacted past it does nothing.
        The result is True once the store is compacted to `revision`."""
        if first:
            if revision > self._w_revision:
                raise FutureRevision(revision, self._w_revision)
            if revision < self._w_compact:
                raise Compacted(revision, self._w_compact)
        if revision <= self._w_compact:
            return self._outcome(True, [])
        oldest = conn.execute("SELECT MIN(rev) FROM log").fetchone()[0]
        step_to = min(revision, max(self._w_compact, oldest or revision) + _COMPACT_STEP)
        self._w_compact_to(conn, step_to)
        outcome = self._outcome(step_to >= revision, [])
        outcome.partial_compaction = step_to < revision
        return outcome

    def _w_vacuum(self, conn: sqlite3.Connection, pages: int) -> _WriteOutcome:
        """Give up to `pages` free pages back to the file system (the file shrinks at commit); the result is
        how many free pages are left (0 also when none could be freed). One page per statement: Python's
        sqlite3 steps a statement that returns no columns once, and each step of incremental_vacuum frees
        one page."""
        before = conn.execute("PRAGMA freelist_count").fetchone()[0]
        for _ in range(min(pages, before)):
            conn.execute("PRAGMA incremental_vacuum(1)")
        after: int = conn.execute("PRAGMA freelist_count").fetchone()[0]
        return self._outcome(after if after < before else 0, [])

    def _w_lease_grant(self, conn: sqlite3.Connection, ttl: float) -> _WriteOutcome:
        while True:
            lease_id = secrets.randbits(62) or 1
            if conn.execute("SELECT 1 FROM lease WHERE id = ?", (lease_id,)).fetchone() is None:
                break
        conn.execute("INSERT INTO lease(id, ttl) VALUES (?, ?)", (lease_id, ttl))
        return self._outcome(lease_id, [])

    def _w_revoke(self, conn: sqlite3.Connection, lease_id: int) -> _WriteOutcome:
        if conn.execute("DELETE FROM lease WHERE id = ?", (lease_id,)).rowcount == 0:
            raise LeaseNotFound(lease_id)
        keys = [r[0] for r in conn.execute("SELECT key FROM kv WHERE lease = ? ORDER BY key", (lease_id,))]
        rev = self._w_revision + 1
        events = [ev for seq, key in enumerate(keys) if (ev := self._w_delete(conn, key, rev, seq)) is not None]
        if events:
            self._w_revision = rev
        return self._outcome(None, events)

    # ------------------------------------------------------------ protocol

    async def _get(self, key: str) -> KeyValue | None:
        self._check_open()
        result: KeyValue | None = await self._run(lambda conn: self._w_get(conn, key), writes=False)
        return result

    async def _range(
        self, prefix: str, *, limit: int, start_after: str | None, revision: int | None
    ) -> RangeResult:
        self._check_open()
        # Small pages inline; a whole-prefix range may be large: the worker reads it.
        result: RangeResult = await self._run(
            lambda conn: self._w_range(conn, prefix, limit, start_after, revision),
            writes=False, inline=0 < limit <= 100,
        )
        return result

    async def _txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        self._check_open()
        now = self._loop.time()
        for op in (*success, *failure):
            if isinstance(op, Put) and op.lease:
                held = self._leases.get(op.lease)
                if held is None or held[1] <= now:
                    raise LeaseNotFound(op.lease)
        result: TxnResult = await self._run(
            lambda conn: self._w_txn(conn, compares, success, failure), writes=True
        )
        return result

    def watch(self, prefix: str, *, from_revision: int) -> AsyncIterator[Event]:
        """Events under `prefix` with revision >= from_revision, then live
        ones; from_revision <= 0 means "only what happens from now on"."""
        check_prefix_arg(self.prefix, prefix)
        if not isinstance(from_revision, int) or isinstance(from_revision, bool):
            raise StoreError(f"from_revision must be an int, not {from_revision!r}")
        self._check_open()
        cursor = from_revision if from_revision > 0 else self._revision + 1

        async def load_older(watch_prefix: str, start: int) -> tuple[list[Event], int]:
            stop = min(start + _REPLAY_SPAN, self._log.first_revision)
            events: list[Event] = await self._submit(
                lambda conn: self._w_events(conn, watch_prefix, start, stop), writes=False
            )
            return events, stop

        return iterate_log(
            self._log,
            prefix,
            cursor=cursor,
            compact_revision=lambda: self._compact_revision,
            load_older=load_older,
            on_event=self._metrics.watch_events.inc,
            closed_error=lambda: watch_closed_error(f"sqlite store {self.path}"),
        )

    async def current_revision(self) -> int:
        self._check_open()
        return self._revision

    async def compact(self, revision: int) -> None:
        self._check_open()
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise StoreError(f"compact revision must be an int, not {revision!r}")
        await self._timed("compact", lambda: self._compact_in_steps(revision))

    async def _compact_in_steps(self, revision: int) -> None:
        """compact(): history deleted, then free pages given back, in short write transactions (see the
        module docstring: Space); other writes queue between the steps, never behind the whole of it."""
        longest = 0.0  # the longest step, in the worker: how long a write queued behind it can wait for it
        steps = vacuum_steps = 0

        def timed(fn: Callable[[sqlite3.Connection], _WriteOutcome]) -> Callable[[sqlite3.Connection], _WriteOutcome]:
            def run(conn: sqlite3.Connection) -> _WriteOutcome:
                nonlocal longest
                started = time.perf_counter()
                try:
                    return fn(conn)
                finally:
                    longest = max(longest, time.perf_counter() - started)
            return run

        def step(first: bool) -> Callable[[sqlite3.Connection], _WriteOutcome]:
            return timed(lambda conn: self._w_compact_step(conn, revision, first=first))

        done = await self._run(step(True), writes=True, inline=False)
        steps = 1
        while not done:
            done = await self._run(step(False), writes=True, inline=False)
            steps += 1
        vacuum = timed(lambda conn: self._w_vacuum(conn, _VACUUM_STEP_PAGES))
        while not self._closed:
            left = await self._run(vacuum, writes=True, inline=False)
            vacuum_steps += 1
            if not left:
                break
        _log.info("sqlite store compacted", path=str(self.path), revision=revision, steps=steps,
                  vacuum_steps=vacuum_steps, longest_step_ms=round(longest * 1000, 1))

    async def compact_revision(self) -> int:
        self._check_open()
        return self._compact_revision

    async def usage(self) -> StoreUsage:
        """The database file plus its write-ahead log (one stat each; the history log is in the file)."""
        self._check_open()
        size = 0
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                size += path.stat().st_size
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StoreUnavailable(f"sqlite store {self.path}: cannot stat {path.name}: {e.strerror}") from None
        usage = StoreUsage(size_bytes=size)
        self._metrics.usage(usage)
        return usage

    async def lease_grant(self, ttl_seconds: float) -> int:
        self._check_open()
        if not isinstance(ttl_seconds, (int, float)) or isinstance(ttl_seconds, bool) or not ttl_seconds > 0:
            raise StoreError(f"lease TTL must be a number of seconds > 0, not {ttl_seconds!r}")
        lease_id: int = await self._run(lambda conn: self._w_lease_grant(conn, float(ttl_seconds)), writes=True)
        self._leases[lease_id] = (float(ttl_seconds), self._loop.time() + ttl_seconds)
        self._ensure_expiry_task()
        return lease_id

    async def lease_keepalive(self, lease: int) -> None:
        self._check_open()
        check_lease_id(lease)
        held = self._leases.get(lease)
        now = self._loop.time()
        if held is None:
            raise LeaseNotFound(lease)
        if held[1] <= now:
            await self._revoke(lease)
            raise LeaseNotFound(lease)
        self._leases[lease] = (held[0], now + held[0])
        self._lease_changed.set()

    async def lease_revoke(self, lease: int) -> None:
        self._check_open()
        check_lease_id(lease)
        if lease not in self._leases:
            raise LeaseNotFound(lease)
        await self._revoke(lease)

    async def _revoke(self, lease: int) -> None:
        self._leases.pop(lease, None)
        self._lease_changed.set()
        try:
            await self._run(lambda conn: self._w_revoke(conn, lease), writes=True)
        except LeaseNotFound:
            pass

    def _ensure_expiry_task(self) -> None:
        if self._expiry_task is None or self._expiry_task.done():
            self._expiry_task = self._loop.create_task(self._expire_leases(), name="sqlite-store-lease-expiry")
        self._lease_changed.set()

    async def _expire_leases(self) -> None:
        while not self._closed:
            now = self._loop.time()
            for lease_id in [i for i, (_, deadline) in self._leases.items() if deadline <= now]:
                _log.debug("lease expired", lease=lease_id)
                try:
                    await self._revoke(lease_id)
                except StoreError as e:
                    # Retried on the next pass; the lease stays expired
                    # for writers meanwhile (they check the deadline).
                    _log.warning("lease expiry failed; retrying", lease=lease_id, error=str(e))
                    self._leases.setdefault(lease_id, (0.0, now))
                    await asyncio.sleep(0.5)
            self._lease_changed.clear()
            if not self._leases:
                await self._lease_changed.wait()
                continue
            nearest = min(deadline for _, deadline in self._leases.values())
            try:
                await asyncio.wait_for(self._lease_changed.wait(), timeout=max(0.0, nearest - self._loop.time()))
            except TimeoutError:
                pass


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
