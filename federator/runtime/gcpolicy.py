"""Garbage-collector settings for the long-running servers (the hub, the simulator).

CPython's cyclic collector runs a full (generation 2) pass whenever enough
container objects survived younger passes. A full pass walks every tracked
object: with the hub's job cache, member-object index and snapshots in the
heap (a few hundred MB) it held the event loop for 50-150 ms, every few
seconds under load, collecting nothing (measured with bench/e2e.py and
FEDERATOR_BENCH_GC_LOG=1). Every request and watch event in flight waited
that long; it was the whole tail of the submit-to-member latency.

`server_gc()` (entered once the process has loaded its modules and built its
app) therefore:

- freezes what exists at that point (`gc.freeze()`: imported modules,
  registries, the app; all long-lived and never garbage) so no pass walks it;
- raises the thresholds so that young passes are rarer and a full pass is
  much rarer (Instagram's and many servers' practice); cyclic garbage is
  still collected, later. With generation-0 thresholds of 10,000, 50,000
  and 100,000 the e2e bench (30 s at 50/s, then a 2,000-job burst, two runs
  each) gave 187-190, 202-205 and 208-215 jobs/s and p99 35-36, 41-44 and
  34-36 ms: more frequent young passes cost throughput, and larger ones did
  not lengthen the tail.

Leaving the context restores the previous thresholds and unfreezes. It
never disables the collector, and it changes nothing but GC settings.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["SERVER_THRESHOLDS", "server_gc"]

#: (generation 0, generation 1, generation 2) thresholds while a server runs
SERVER_THRESHOLDS = (100_000, 20, 100)


@contextlib.contextmanager
def server_gc(thresholds: tuple[int, int, int] = SERVER_THRESHOLDS) -> Iterator[None]:
    """Freeze the current heap and raise the collector's thresholds until the context ends."""
    previous = gc.get_threshold()
    gc.collect()  # what is garbage now should not be frozen
    gc.freeze()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
