"""Periodic compaction of a store's history, for every backend: a bounded window of history.

The store keeps the last `interval` of history: the leader samples the store's revision every
interval/TICKS_PER_INTERVAL and compacts to the newest sample that is at least `interval` old, so between
one interval and one interval plus a tick of history is kept (5 to 6 minutes with the default 5 minutes).
kube-apiserver compacts etcd every `--etcd-compaction-interval` (5 minutes by default) to the revision of
the tick before, which keeps between one and two intervals; sliding the window in fifths keeps at least as
much as kube guarantees a watcher (one interval) while the store's size no longer swings by a whole
interval of history. `Store.compact` does the work: for sqlite it also gives the freed space back
(store/sqlite.py), for memory it trims the event log. What this means for readers: a watch or a paged list
whose resourceVersion is older than the window gets 410 Expired and re-lists, as against kube.

Who compacts: the hub's leader only (hub/app.py runs this as part of each term). Two replicas briefly
compacting at once (a deposed leader that has not yet noticed) is harmless: compaction to a revision the
store already passed raises Compacted, which is taken as done.

This module must never import an API module or the hub; it only drives a
`Store`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from federator.obs import RepeatedFailureLog, get_logger
from federator.store.protocol import Compacted, Store, StoreError

_log = get_logger("store.compaction")

#: Default history window (kube-apiserver's --etcd-compaction-interval default): 5 to 6 minutes are kept.
DEFAULT_COMPACTION_INTERVAL_SECONDS = 300.0


@dataclass(slots=True)
class CompactionRecord:
    """What the compactor did, for logs and tests."""

    #: compactions that moved the store's compact revision
    compactions: int = 0
    #: revision of the last compaction (0: none yet)
    last_revision: int = 0
    #: ticks at which the store did not answer
    failures: int = 0


async def compact_once(store: Store, revision: int) -> bool:
    """Compact `store` to `revision` unless it is compacted that far already. True if this call
    compacted; False if there was nothing to do (another replica did it, or nothing was written)."""
    if revision <= await store.compact_revision():
        return False
    try:
        await store.compact(revision)
    except Compacted:
        return False
    return True


#: Revision samples per interval: the window slides in steps of a fifth of it.
TICKS_PER_INTERVAL = 5


async def run_compactor(store: Store, *, interval_seconds: float, record: CompactionRecord | None = None) -> None:
    """Keep `interval_seconds` of history: every interval/TICKS_PER_INTERVAL, compact `store` to the newest
    revision read at least `interval_seconds` ago (see the module docstring); runs until cancelled. A store
    that does not answer is retried at the next tick (logged once, then summarised)."""
    if not interval_seconds > 0:
        raise ValueError(f"compaction interval must be > 0 seconds, not {interval_seconds!r}")
    record = record if record is not None else CompactionRecord()
    tick = interval_seconds / TICKS_PER_INTERVAL
    failures = RepeatedFailureLog(_log, "store compaction failed; retrying at the next tick",
                                  interval_seconds=interval_seconds)
    loop = asyncio.get_running_loop()
    samples: deque[tuple[float, int]] = deque()  # (loop time, revision), oldest first
    while True:
        try:
            now = loop.time()
            current = await store.current_revision()
            samples.append((now, current))
            # a hair of slack: the sample taken one interval ago is due now even if this tick woke early
            due = now - interval_seconds + tick / 100
            target: int | None = None
            while samples and samples[0][0] <= due:
                target = samples.popleft()[1]
            if target is not None:
                started = loop.time()
                if await compact_once(store, target):
                    record.compactions += 1
                    record.last_revision = target
                    _log.info("store compacted", revision=target, current_revision=current,
                              seconds=round(loop.time() - started, 3))
            failures.succeeded("store compaction works again")
        except StoreError as e:
            record.failures += 1
            failures.failed(e, now=loop.time(), retry_in_seconds=tick)
        await asyncio.sleep(tick)
