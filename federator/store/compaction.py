"""Periodic compaction of a store's history: kube-apiserver's compactor, for every backend.

kube-apiserver compacts etcd every `--etcd-compaction-interval` (5 minutes by
default): at each tick it compacts to the revision it read at the tick before,
so the store keeps between one and two intervals of history. `run_compactor`
does the same through `Store.compact`, which for sqlite also gives the freed
space back (store/sqlite.py) and for memory trims its event log. What this
means for readers: a watch or a paged list whose resourceVersion is older
than the last compaction gets 410 Expired and re-lists, as against kube.

Who compacts: the hub's leader only (hub.py runs this as part of each term).
Two replicas briefly compacting at once (a deposed leader that has not yet
noticed) is harmless: compaction to a revision the store already passed
raises Compacted, which is taken as done.

This module must never import an API module or the hub; it only drives a
`Store`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from federator.obs import RepeatedFailureLog, get_logger
from federator.store.protocol import Compacted, Store, StoreError

_log = get_logger("store.compaction")

#: Default seconds between compactions (kube-apiserver's --etcd-compaction-interval default): history
#: between 5 and 10 minutes old is kept.
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


async def run_compactor(store: Store, *, interval_seconds: float, record: CompactionRecord | None = None) -> None:
    """Every `interval_seconds`, compact `store` to the revision read one interval earlier; runs until
    cancelled. A store that does not answer is retried at the next tick (logged once, then summarised)."""
    if interval_seconds <= 0:
        raise ValueError(f"compaction interval must be > 0 seconds, not {interval_seconds!r}")
    record = record if record is not None else CompactionRecord()
    failures = RepeatedFailureLog(_log, "store compaction failed; retrying at the next interval",
                                  interval_seconds=interval_seconds)
    loop = asyncio.get_running_loop()
    previous: int | None = None
    while True:
        try:
            current = await store.current_revision()
            if previous is not None:
                started = loop.time()
                if await compact_once(store, previous):
                    record.compactions += 1
                    record.last_revision = previous
                    _log.info("store compacted", revision=previous, current_revision=current,
                              seconds=round(loop.time() - started, 3))
            previous = current
            failures.succeeded("store compaction works again")
        except StoreError as e:
            record.failures += 1
            failures.failed(e, now=loop.time(), retry_in_seconds=interval_seconds)
        await asyncio.sleep(interval_seconds)
