"""Benchmark of one hub at scale: 100 simulated clusters x 1,000 nodes (issue 15, item 5), then larger.

The simulated clusters run in separate processes, several clusters each (bench/sync.py's `Members`:
HTTPS on loopback, bearer tokens, the same churn driver), with bench/placement.py's federation mix:
60% on-prem InfiniBand A100 clusters (each caching one of 8 datasets), 20% on-prem RoCE H100, 20%
cloud Ethernet H100; 8 GPUs per node. This process is the hub: a SQLite hub store, one MemberCluster
per simulated cluster, the real `member_sync` controller, and the real placement engine; it runs with
`gcpolicy.server_gc` as `federator up` does, and every run is a fresh process (its RSS is its own).

Measured per run, at each size:
- initial sync: from starting the member sync to every cluster Ready (every node, pod and PodGroup
  listed and folded into its snapshot, every watch open); and the CPU seconds the hub and the
  simulators spent on it (`initialSyncHubCpuSeconds`, `initialSyncSimCpuSeconds`): the wall time
  moves with the machine's load, the CPU it took much less;
- hub RSS once every cluster is Ready (`hubRssMiB`), its peak over the run (`hubPeakRssMiB`), and
  memory per node: (RSS when Ready - RSS before the sync) / nodes; the same after a collection and
  glibc's malloc_trim (`hubRssTrimmedMiB`, `hubHeldBytesPerNode`: what the hub holds, without the heap
  the initial LISTs freed but the allocator kept); the simulators' RSS apart;
- placement decisions/s at that size: bench/placement.py's gangs (sizes from the ITP trace) placed by
  the real engine in cycles of 64 over the hub's own synced snapshots, each node first given a random
  load as bench/placement.py does (30% empty, 30% full, the rest 1-7 GPUs in use); and the p99 of one
  gang per cycle;
- watch lag p50/p99 under churn: bench/sync.py's driver and lag probe (`--rate`, default 2,000
  events/s in total across the clusters: 20/s per cluster; the stamp at the member's write -> the
  hub's snapshot), with the simulators' own part (stamp -> socket write, `simEmitP99Ms`) and the
  hub's (socket write -> snapshot, `hubLagP99Ms`) apart;
- the simulator processes run at nice 10 (`--sim-nice`): they stand in for 100 member clusters on
  machines of their own, and on this 2-core machine they would otherwise take the hub's CPU (with
  equal priority the hub waited for a CPU 0.9-1.0 s per s during the churn); nice acts only among the
  bench's own processes (the kernel's autogroups), not against the machine's other tenants;
- with --tracemalloc: where the hub's memory per node goes (the top allocation sites when Ready, in
  bytes per node; this run's timings are not figures: tracing slows the hub several times).

Several sizes (`--nodes 1000,2000,5000`) run in turn, smallest first; the ladder stops at the first
size that fails, or that the machine's available memory cannot hold by the figures of the size before
it (per-node hub and simulator memory, plus a margin for the other tenants), and says why.

Bars (issue 15): at 100 x 1,000, hub RSS <= 4 GB, initial sync <= 60 s, >= 500 decisions/s.

    .venv/bin/python bench/scale.py [--runs 3] [--clusters 100] [--nodes 1000[,2000,...]] [--quick]
        [--sim-procs N] [--sim-nice 10] [--rate 2000] [--seconds 10] [--gangs 1000] [--tracemalloc]
        [--concurrent-lists N] [--json FILE] [--strict]

REAL members: `--members kube` (bench/kubescale.py, whose docstring says what is measured and how) starts
`--clusters` (default 2) real v1.36 members, gives each `--nodes` (default 5,000) kwok nodes created through
the API in bulk, then measures the hub following them: time to synced, hub RSS and CPU, snapshot freshness
(stamped pods -> the hub's snapshot), and every member process's RSS and CPU. One run, in this process.

    .venv/bin/python bench/scale.py --members kube [--clusters 2] [--nodes 5000] [--seconds 20] [--rate 100]
        [--create-concurrency 32] [--node-lease-seconds 120]

Figures, 2 x 5,000 kwok nodes (one run, 28 Nov 2026, 2 cores / 23 GiB shared with other agents, load
average 10-17 during the run; kwok Leases of 120 s):
- nodes created: 9,998 in 23 s (32 creates in flight per member); every node Ready and without the
  node.kubernetes.io/not-ready taint after 570 s: the node lifecycle controller takes the taint off one
  PATCH at a time within kube-controller-manager's default client rate (--kube-api-qps 20), i.e. about
  250 s per 5,000 nodes at best on a quiet machine; nothing of the hub's;
- the hub: synced (10,000 nodes, both members Ready) in 9.7 s, 1.9 CPU s; RSS 275 MiB when Ready
  (about 20 KB per node over the RSS before; 257 MiB and 18 KB per node after a collection and
  malloc_trim), peak 445 MiB (this process also created the nodes and the stamped pods); 0.08 cores
  following both members at rest (kwok's node status heartbeats, ~50 writes/s per member, reach it; its
  ~170 Lease renewals/s per member do not);
- snapshot freshness: 2,000 stamped pods at 100/s, all seen; create -> hub snapshot p50 105 ms, p99 391 ms
  (the member's own admission, etcd write and watch fan-out included);
- each member (5,000 nodes): RSS 1.9 GiB: kube-apiserver 916 MiB (peak 990), kube-controller-manager
  300 MiB, kwok 250-325 MiB (peak 375), etcd 250 MiB, kube-scheduler 165 MiB; CPU to create and ready its
  5,000 nodes about 450 s (kube-apiserver 247, kwok 90, controller-manager 64, etcd 41, scheduler 12); while
  the hub followed it (53 s: rest, then the stamped pods) 44 CPU s, 0.84 cores.
So these machines hold two 5,000-node members beside the hub by memory (4 GiB of 23), but the two take most
of the 2 cores (0.84 cores each while followed, the stamped pods included; not measured at rest apart), and a
third would not leave the hub a core; members of a few nodes (bench/e2e.py --members kube: about 530 MiB
idle) cost little CPU, and several fit beside the hub.

`run(...)` returns the figures as a dict and `main(argv)` is the command line (`federator bench scale`).
Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import sync as syncbench  # noqa: E402
from benchresult import BenchResult  # noqa: E402

#: figure -> (op, threshold) at the size the issue sets (100 x 1,000)
BARS: dict[str, tuple[str, float]] = {
    "hubRssMiB": ("<=", 4096.0),
    "initialSyncSeconds": ("<=", 60.0),
    "decisionsPerSecond": (">=", 500.0),
}
BAR_SIZE = (100, 1000)
QUICK = {"clusters": 20, "nodes": [500], "runs": 1, "seconds": 5.0, "gangs": 300}
#: memory left to the machine's other tenants when judging whether the next size fits
MEMORY_MARGIN_MIB = 4096
UNITS = {"initialSyncSeconds": "s", "initialSyncHubCpuSeconds": "s", "initialSyncSimCpuSeconds": "s", "hubRssMiB": "MiB", "hubRssTrimmedMiB": "MiB", "hubHeldBytesPerNode": "B", "hubPeakRssMiB": "MiB", "hubBytesPerNode": "B",
         "simRssMiB": "MiB", "decisionsPerSecond": "decisions/s", "p99DecisionMs": "ms",
         "lagP50Ms": "ms", "lagP99Ms": "ms", "simEmitP99Ms": "ms", "hubLagP99Ms": "ms",
         "eventsPerSecond": "events/s", "hubRunqueueWaitSPerS": "s/s", "nodes": "nodes"}


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def loaded_views(snapshots: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The snapshots with a random load on every node, as bench/placement.py loads its clusters."""
    from federator.placement import Resources

    gi = 2**30
    views = {}
    for name, snapshot in sorted(snapshots.items()):
        changes = {}
        for node in snapshot.nodes.values():
            draw = rng.random()
            used = 0 if draw < 0.3 else 8 if draw < 0.6 else rng.randint(1, 7)
            if used:
                rdma = node.allocatable.rdma if used == 8 else 0
                changes[node.name] = Resources(used * 8_000, used * 64 * gi, used, rdma)
        views[name] = snapshot.with_allocation_changes(changes)
    return views


def memory_sites(snapshot: Any, baseline: Any, *, nodes: int, top: int = 12) -> list[str]:
    """The allocation sites that grew most between `baseline` and `snapshot`, in bytes per node."""
    lines = []
    stats = snapshot.compare_to(baseline, "lineno")
    total = sum(s.size_diff for s in stats)
    lines.append(f"traced growth {total / max(nodes, 1):,.0f} B/node over {nodes} nodes")
    for stat in stats[:top]:
        frame = stat.traceback[0]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        lines.append(f"{stat.size_diff / max(nodes, 1):8,.0f} B/node {stat.count_diff / max(nodes, 1):6.1f} obj/node  "
                     f"{where}")
    return lines


async def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One run at one size, in this process (the hub); the figures."""
    from federator.runtime.gcpolicy import server_gc
    from federator.obs import configure_logging
    from federator.placement import Profile

    import placement as placementbench

    configure_logging(level="error")
    nodes_per_cluster = args.nodes[0]
    workdir = Path(tempfile.mkdtemp(prefix="federator-bench-scale-"))
    procs = args.sim_procs or max(1, -(-args.clusters // 25))
    started = time.perf_counter()
    members = await syncbench.Members.start(workdir, clusters=args.clusters, nodes=nodes_per_cluster, procs=procs,
                                            rate=args.rate, burst=20, mix=True, nice=args.sim_nice)
    members_started = time.perf_counter() - started
    probe = syncbench.LagProbe()
    extra = {"member_concurrent_lists": args.concurrent_lists} if args.concurrent_lists else {}
    hub = syncbench.HubUnderTest(workdir, on_applied=probe.on_applied, extra=extra)
    figures: dict[str, Any] = {}
    notes: list[str] = []
    gc_settings = contextlib.ExitStack()
    try:
        gc_settings.enter_context(server_gc())  # as `federator up` runs once it serves
        tracing = None
        if args.tracemalloc:
            import tracemalloc

            tracemalloc.start(1)
            tracing = tracemalloc.take_snapshot()
        rss_before = syncbench.rss_mib()
        cpu_before, sim_cpu_before = syncbench.cpu_seconds(), sum(syncbench.cpu_seconds(p) for p in members.pids)
        sync_started = time.perf_counter()
        await hub.start(members.registrations)
        await hub.wait_ready(members.names, members, timeout=args.sync_timeout)
        synced_in = time.perf_counter() - sync_started
        sync_cpu = syncbench.cpu_seconds() - cpu_before
        sim_sync_cpu = sum(syncbench.cpu_seconds(p) for p in members.pids) - sim_cpu_before
        rss_ready = syncbench.rss_mib()
        nodes = hub.nodes()
        if tracing is not None:
            import tracemalloc

            gc.collect()
            notes += memory_sites(tracemalloc.take_snapshot(), tracing, nodes=nodes)
            tracemalloc.stop()
        figures.update({
            "nodes": nodes,
            "initialSyncSeconds": synced_in,
            "initialSyncHubCpuSeconds": sync_cpu,
            "initialSyncSimCpuSeconds": sim_sync_cpu,
            "hubRssMiB": rss_ready,
            "hubBytesPerNode": (rss_ready - rss_before) * 2**20 / max(nodes, 1),
            "simRssMiB": members.rss_mib(),
        })
        # How much of that RSS is heap the sync freed but the allocator kept (the LIST responses): what is
        # left after a collection and glibc's malloc_trim is what the hub holds.
        gc.collect()
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rss_trimmed = syncbench.rss_mib()
        figures["hubRssTrimmedMiB"] = rss_trimmed
        figures["hubHeldBytesPerNode"] = (rss_trimmed - rss_before) * 2**20 / max(nodes, 1)

        rng = random.Random(args.seed)
        views = loaded_views(hub.snapshots, rng)
        gangs = placementbench.make_gangs(args.gangs, placementbench.read_gpu_counts(args.trace), rng)
        placed = placementbench.run_once(views, gangs, Profile(), planted={})
        del views
        figures.update({"decisionsPerSecond": placed.batch_rate, "p99DecisionMs": placed.p99_ms})
        notes.append(f"placement: {args.gangs} gangs, placed {placed.placed}, unplaced {placed.unplaced}")

        churn = await syncbench.measure_churn(members, probe, writer=hub.controller.writer, seconds=args.seconds,
                                              warmup=args.warmup)
        figures.update({
            "eventsPerSecond": churn["events_per_s"],
            "lagP50Ms": churn["lag_p50_ms"],
            "lagP99Ms": churn["lag_p99_ms"],
            "simEmitP99Ms": churn["sim_emit_p99_ms"],
            "hubLagP99Ms": churn["hub_lag_p99_ms"],
            "hubRunqueueWaitSPerS": churn["hub_runqueue_wait_s_per_s"],
        })
        figures["hubPeakRssMiB"] = syncbench.rss_mib("VmHWM")
        notes.append(f"{args.clusters} x {nodes_per_cluster}: simulators in {procs} processes, started in "
                     f"{members_started:.0f} s; churn generated {churn['generated_per_s']:,.0f} events/s, hub CPU "
                     f"{churn['hub_cpu_cores']:.2f} cores, simulators {churn['sim_cpu_cores']:.2f} cores")
    finally:
        await hub.stop()
        await members.stop()
        gc_settings.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"figures": figures, "notes": notes}


def _child_command(args: argparse.Namespace, nodes: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--in-process-run", "--clusters", str(args.clusters),
            "--nodes", str(nodes), "--rate", str(args.rate), "--seconds", str(args.seconds),
            "--warmup", str(args.warmup), "--gangs", str(args.gangs), "--seed", str(args.seed),
            "--trace", str(args.trace), "--sync-timeout", str(args.sync_timeout),
            *(["--sim-procs", str(args.sim_procs)] if args.sim_procs else []), "--sim-nice", str(args.sim_nice),
            *(["--tracemalloc"] if args.tracemalloc else []),
            *(["--concurrent-lists", str(args.concurrent_lists)] if args.concurrent_lists else [])]


def _run_child(args: argparse.Namespace, nodes: int) -> tuple[dict[str, Any] | None, str]:
    """One run in a fresh process: (its result, "") or (None, why it failed)."""
    timeout = args.sync_timeout + 900
    try:
        proc = subprocess.run(_child_command(args, nodes), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"the run did not finish within {timeout:.0f} s"
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        signal_note = f" (killed by signal {-proc.returncode})" if proc.returncode < 0 else ""
        return None, f"exit {proc.returncode}{signal_note}: {' | '.join(tail)[-400:]}"
    return json.loads(lines[-1]), ""


def run(*, clusters: int = 100, nodes: Sequence[int] = (1000,), runs: int = 3, quick: bool = False,
        sim_procs: int = 0, rate: int = 2000, seconds: float = 10.0, warmup: float = 3.0, gangs: int = 1000,
        seed: int = 7, trace: Path | None = None, tracemalloc: bool = False, sync_timeout: float = 900.0,
        concurrent_lists: int = 0, sim_nice: int = 10, progress: Any = print) -> dict[str, Any]:
    """Run the benchmark; {"sizes": [{"clusters", "nodesPerCluster", "runs": [figures...], "median": {...},
    "min": {...}, "max": {...}, "bars": {...}}], "stoppedAt": ..., "stoppedBecause": ..., "notes": [...],
    "machine": ...}. Each run is a fresh process."""
    if quick:
        clusters, nodes, runs = QUICK["clusters"], QUICK["nodes"], QUICK["runs"]
        seconds, gangs = QUICK["seconds"], QUICK["gangs"]
    args = argparse.Namespace(clusters=clusters, rate=rate, seconds=seconds, warmup=warmup, gangs=gangs, seed=seed,
                              trace=trace or _default_trace(), tracemalloc=tracemalloc, sim_procs=sim_procs,
                              sync_timeout=sync_timeout, concurrent_lists=concurrent_lists, sim_nice=sim_nice)
    report: dict[str, Any] = {"sizes": [], "stoppedAt": None, "stoppedBecause": "", "notes": [],
                              "machine": f"{os.cpu_count()} cores, {_mem_total_gib():.0f} GiB, shared"}
    previous: dict[str, float] | None = None
    for size in sorted(nodes):
        if previous is not None:
            need = (previous["hubBytesPerNode"] / 2**20 * clusters * size
                    + previous["simRssMiB"] / previous["nodes"] * clusters * size)
            available = mem_available_mib()
            if need + MEMORY_MARGIN_MIB > available:
                report["stoppedAt"] = [clusters, size]
                report["stoppedBecause"] = (
                    f"{clusters} x {size} would need about {need / 1024:.1f} GiB (hub and simulators at the "
                    f"per-node memory measured at the size before), and the machine has {available / 1024:.1f} GiB "
                    f"available with {MEMORY_MARGIN_MIB / 1024:.0f} GiB left to its other tenants")
                progress(report["stoppedBecause"])
                break
        results, failure = [], ""
        for i in range(runs):
            progress(f"scale {clusters} x {size}: run {i + 1} of {runs} (load {os.getloadavg()[0]:.1f})")
            result, failure = _run_child(args, size)
            if result is None:
                break
            results.append(result["figures"])
            report["notes"] += [f"{clusters}x{size} run {i + 1}: {n}" for n in result["notes"]]
            progress("  " + ", ".join(f"{k}={v:,.1f}" for k, v in result["figures"].items()))
        if failure:
            report["stoppedAt"] = [clusters, size]
            report["stoppedBecause"] = f"{clusters} x {size}: {failure}"
            progress(report["stoppedBecause"])
        if results:
            keys = list(results[0])
            entry: dict[str, Any] = {
                "clusters": clusters, "nodesPerCluster": size, "runs": results,
                "median": {k: statistics.median(r[k] for r in results) for k in keys},
                "min": {k: min(r[k] for r in results) for k in keys},
                "max": {k: max(r[k] for r in results) for k in keys},
            }
            if (clusters, size) == BAR_SIZE:
                entry["bars"] = {k: (entry["median"][k] <= v if op == "<=" else entry["median"][k] >= v)
                                 for k, (op, v) in BARS.items()}
            report["sizes"].append(entry)
            previous = entry["median"]
        if failure:
            break
    return report


def _default_trace() -> Path:
    import placement as placementbench

    return Path(placementbench.DEFAULT_TRACE)


def _mem_total_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _print_report(report: dict[str, Any]) -> None:
    print(f"\nmachine: {report['machine']}; load average now {os.getloadavg()[0]:.1f}")
    for entry in report["sizes"]:
        print(f"{entry['clusters']} clusters x {entry['nodesPerCluster']} nodes, median (min-max) of "
              f"{len(entry['runs'])} run(s):")
        for key, value in entry["median"].items():
            bar = BARS.get(key) if "bars" in entry else None
            verdict = "" if bar is None else f"   bar {bar[0]} {bar[1]:,.0f}: {'met' if entry['bars'][key] else 'MISSED'}"
            print(f"  {key:22s} {value:12,.1f}   ({entry['min'][key]:,.1f}-{entry['max'][key]:,.1f}){verdict}")
    if report["stoppedBecause"]:
        print(f"stopped: {report['stoppedBecause']}")
    for note in report["notes"]:
        print(f"  note: {note}")


def _bench_result(report: dict[str, Any]) -> BenchResult:
    out = BenchResult("scale")
    for entry in report["sizes"]:
        prefix = f"{entry['clusters']}x{entry['nodesPerCluster']}"
        at_bar = "bars" in entry
        for figures in entry["runs"]:
            for key, value in figures.items():
                out.add(f"{prefix}.{key}", value, unit=UNITS.get(key, ""), bar=BARS.get(key) if at_bar else None)
    out.notes += report["notes"]
    if report["stoppedBecause"]:
        out.notes.append(f"stopped: {report['stoppedBecause']}")
    out.notes.append(f"machine: {report['machine']}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", default="1000", help="nodes per cluster; a comma-separated list runs each size")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['clusters']} clusters x {QUICK['nodes'][0]} nodes, one short run")
    parser.add_argument("--sim-procs", type=int, default=0, help="simulator processes (default: 25 clusters each)")
    parser.add_argument("--rate", type=int, default=2000, help="churn events/s across all clusters")
    parser.add_argument("--sim-nice", type=int, default=10,
                        help="nice value of the simulator processes (default 10: see the module docstring)")
    parser.add_argument("--seconds", type=float, default=10.0, help="churn measurement window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--gangs", type=int, default=1000, help="gangs placed in the placement measurement")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trace", type=Path, default=None, help="ITP trace (gang sizes; default ../shared/traces/itp)")
    parser.add_argument("--tracemalloc", action="store_true", help="where the hub's memory per node goes")
    parser.add_argument("--sync-timeout", type=float, default=900.0)
    parser.add_argument("--concurrent-lists", type=int, default=0,
                        help="the hub's member_concurrent_lists (default: the hub's own default)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a bar is missed")
    parser.add_argument("--members", choices=["sim", "kube"], default="sim",
                        help="kube: REAL members with kwok nodes (bench/kubescale.py; one run, in this process; "
                             "--clusters defaults to 2 and --nodes to 5000 there)")
    parser.add_argument("--create-concurrency", type=int, default=32,
                        help="--members kube: node creates in flight per member")
    parser.add_argument("--node-lease-seconds", type=int, default=120,
                        help="--members kube: kwok's node Lease duration (renewed every quarter of it)")
    parser.add_argument("--in-process-run", action="store_true", help=argparse.SUPPRESS)
    given = set(argv if argv is not None else sys.argv[1:])
    args = parser.parse_args(argv)
    if args.members == "kube":
        if not any(a.startswith("--clusters") for a in given):
            args.clusters = 2
        if not any(a.startswith("--nodes") for a in given):
            args.nodes = "5000"
        if not any(a.startswith("--rate") for a in given):
            args.rate = 100
    try:
        args.nodes = [int(n) for n in str(args.nodes).split(",")]
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: expected a number or a comma-separated list of numbers")
    if args.runs < 1 or args.clusters < 1 or min(args.nodes) < 1 or args.gangs < 1 or args.seconds <= 0:
        parser.error("--runs, --clusters, --nodes, --gangs and --seconds must be positive")
    if args.members == "kube":
        import kubescale

        return kubescale.main(args)
    if args.in_process_run:
        args.trace = args.trace or _default_trace()
        result = asyncio.run(one_run(args))
        print(json.dumps(result), flush=True)
        return 0
    report = run(clusters=args.clusters, nodes=args.nodes, runs=args.runs, quick=args.quick, sim_procs=args.sim_procs,
                 rate=args.rate, seconds=args.seconds, warmup=args.warmup, gangs=args.gangs, seed=args.seed,
                 trace=args.trace, tracemalloc=args.tracemalloc, sync_timeout=args.sync_timeout,
                 concurrent_lists=args.concurrent_lists, sim_nice=args.sim_nice)
    _print_report(report)
    _bench_result(report).write(args.json)
    missed = any(not ok for entry in report["sizes"] for ok in entry.get("bars", {}).values())
    return 1 if args.strict and (missed or not report["sizes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
