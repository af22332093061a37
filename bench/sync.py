"""Benchmark of member-cluster sync: a hub following 20 simulated clusters of 500 nodes under churn.

The simulated clusters run in separate processes (--sim-procs, default 2; so the hub's RSS is its
own), serving HTTPS on loopback with bearer tokens; a driver in each churns pods through its clusters' storage:
pods created bound to a random node (ADDED), finished (MODIFIED, phase Succeeded) and deleted
(DELETED), at a steady total rate. This process is the hub: a SQLite hub store, the real
`member_sync` controller, one MemberCluster per simulated cluster (kubeconfigPath).

Measured per run, over a window after every cluster is Ready:
- events/s ingested by the hub (watch events folded into snapshots);
- member-event-to-snapshot lag p50/p99: the driver stamps each pod write with its wall-clock time
  (annotation on create, status.message on finish); the hub reads it when the new snapshot is
  published (same host, same clock);
- hub RSS (VmRSS, and the peak VmHWM) with 20 x 500 = 10,000 nodes;
- checkpoint store writes/s (transactions), and keys and bytes written/s;
- to read the numbers on a shared machine: CPU used by the hub and the members, how long the hub
  waited for a CPU (run-queue wait, /proc schedstat) and how late its event loop ran a 5 ms timer
  (loop stall): lag measured while the hub or a member is starved of CPU is the machine's, not
  the sync's. `hub_processing_p99_ms` is the hub's own part (chunk read -> snapshot published).

Bars (issue 4): >= 5,000 events/s ingested; p99 lag <= 100 ms; hub RSS <= 1 GB for 10,000 nodes;
checkpoint writes <= 200/s at any churn.

    .venv/bin/python bench/sync.py [--runs 3] [--clusters 20] [--nodes 500] [--rate 6000] [--seconds 10]
        [--sim-procs 2] [--burst 20] [--hub-store URL] [--profile]

Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAMP = "bench.federator.dev/sent"


def rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_delay_seconds(pid: int | str = "self") -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (Linux schedstat)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[1]) / 1e9
    return total


def profile_doc(name: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "bench"},
        "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "volcano"}, {"type": "default"}],
        "datasets": [{"name": "imagenet-22k", "size": "1400Gi"}],
        "nodePools": [{"name": "a100", "count": nodes, "cpu": "128", "memory": "1Ti", "gpus": 8,
                       "gpuProduct": "A100-SXM4-40GB", "gpuMemoryMiB": 40960, "rdmaHca": 1000,
                       "reserved": {"cpu": "2", "memory": "16Gi"},
                       "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}],
    }


# ---------------------------------------------------------------- the simulated clusters (child process)


async def sim_worker(args: argparse.Namespace) -> None:
    from federator.devcerts import ensure_dev_tls
    from federator.obs import configure_logging
    from federator.sim import kinds
    from federator.sim.profile import parse_profile
    from federator.sim.server import SimCluster

    configure_logging(level="warning")
    workdir = Path(args.dir)
    tls = ensure_dev_tls(workdir)
    names = [f"bench-{i:02d}" for i in range(args.first, args.first + args.clusters)]
    sims: list[SimCluster] = []
    for name in names:
        sim = SimCluster(parse_profile(profile_doc(name, args.nodes), source="bench"), run_controllers=False,
                         tls=tls, bookmark_interval=5.0)
        await sim.start()
        sim.write_kubeconfig(workdir / f"{name}.kubeconfig")
        sims.append(sim)
    print(json.dumps({"ready": names}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    command = (await reader.readline()).decode().strip()
    if command != "go":
        return
    rng = random.Random(7)
    live: list[list[tuple[str, str]]] = [[] for _ in sims]  # per cluster: (name, phase) FIFO of live pods
    counter = 0
    events = 0
    stop = asyncio.Event()
    stdin_closed = loop.create_task(reader.read())
    stdin_closed.add_done_callback(lambda _: stop.set())
    started = time.perf_counter()
    rate = args.rate
    target_live = 40  # pods kept per cluster: create, finish, delete in turn

    async def one_op(i: int) -> None:
        nonlocal counter
        sim, pods = sims[i], live[i]
        if len(pods) < target_live or rng.random() < 0.34:
            counter += 1
            name = f"p{counter}"
            node = f"a100-{rng.randrange(args.nodes):04d}"
            await sim.storage.create(kinds.PODS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "annotations": {STAMP: repr(time.time())},
                             "labels": {"federator.dev/job-uid": f"job-{counter % 50}", "federator.dev/epoch": "1"}},
                "spec": {"nodeName": node, "schedulerName": "bench", "restartPolicy": "Never",
                         "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "c", "image": "trainer:1", "resources": {
                             "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]},
            }, namespace="default")
            pods.append((name, "Pending"))
            return
        name, phase = pods.pop(0)
        if phase == "Pending":
            def finish(obj: dict[str, Any]) -> dict[str, Any]:
                obj["status"]["phase"] = "Succeeded"
                obj["status"]["message"] = repr(time.time())
                return obj

            await sim.storage.guaranteed_update(kinds.PODS, namespace="default", name=name, mutate=finish,
                                                subresource="status")
            pods.append((name, "Succeeded"))
        else:
            await sim.storage.delete(kinds.PODS, namespace="default", name=name, grace_period_seconds=0)

    while not stop.is_set():
        due = int(rate * (time.perf_counter() - started)) - events
        if due <= 0:
            await asyncio.sleep(0.002)
            continue
        for _ in range(min(due, 200)):
            await one_op(events % len(sims))
            events += 1
            if events % args.burst == 0:
                await asyncio.sleep(0)  # let the watch streams flush between bursts of writes
    elapsed = time.perf_counter() - started
    print(json.dumps({"generated": events, "seconds": elapsed}), flush=True)
    for sim in sims:
        await sim.stop()


# ---------------------------------------------------------------- the hub (this process)


async def one_run(args: argparse.Namespace, run: int) -> dict[str, float]:
    from federator.apiserver.storage import ObjectStorage
    from federator.controllers.context import HubContext, HubSettings
    from federator.controllers.membercluster import member_sync
    from federator.hubapi import hub_registry
    from federator.obs import Metrics
    from federator.store.open import open_store

    workdir = Path(tempfile.mkdtemp(prefix="federator-bench-sync-"))
    from federator.devcerts import ensure_dev_tls

    ensure_dev_tls(workdir)  # one CA for every simulated cluster, made before the workers start
    children = []
    per_proc = -(-args.clusters // args.sim_procs)
    for first in range(0, args.clusters, per_proc):
        count = min(per_proc, args.clusters - first)
        children.append(await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--sim-worker", "--dir", str(workdir), "--first", str(first),
            "--clusters", str(count), "--nodes", str(args.nodes), "--rate", str(args.rate * count // args.clusters),
            "--burst", str(args.burst),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=2**20,
        ))
    names: list[str] = []
    for child in children:
        assert child.stdout is not None
        names += json.loads(await asyncio.wait_for(child.stdout.readline(), timeout=600))["ready"]

    lags: list[float] = []
    processing: list[float] = []
    ingested = [0]
    measuring = [False]

    def on_applied(cluster: str, resource: str, events: Any, received_at: float) -> None:
        if not measuring[0]:
            return
        ingested[0] += len(events)
        now = time.time()
        # received_at is loop.time(); convert to wall time to split the lag into transport and processing
        received_wall = now - (asyncio.get_running_loop().time() - received_at)
        processing.append(now - received_wall)
        for kind, obj in events:
            stamp = None
            if kind == "ADDED":
                stamp = (obj.get("metadata", {}).get("annotations") or {}).get(STAMP)
            elif kind == "MODIFIED":
                stamp = (obj.get("status") or {}).get("message")
            if stamp:
                with contextlib.suppress(ValueError):
                    lags.append(now - float(stamp))

    store_url = args.hub_store or f"sqlite://{workdir / 'hub.db'}"
    store = await open_store(store_url, prefix="/hub/")
    registry = hub_registry()
    storage = ObjectStorage(store, registry)
    metrics = Metrics()
    hub = HubContext(store=store, storage=storage, registry=registry, metrics=metrics,
                     settings=HubSettings(state_dir=workdir, checkpoint_interval_seconds=args.checkpoint_interval,
                                          extra={"member_on_applied": on_applied}))
    rt = hub.kind("MemberCluster")
    for name in names:
        await storage.create(rt, {
            "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name},
            "spec": {"connection": {"kubeconfigPath": str(workdir / f"{name}.kubeconfig")},
                     "location": {"type": "onPrem"},
                     "network": {"type": "rdma", "rdmaKind": "infiniband", "bandwidthGbps": 200.0},
                     "scheduler": {"name": "volcano"}}}, namespace=None)
    rss_before = rss_mib()
    sync_started = time.perf_counter()
    cm = contextlib.asynccontextmanager(member_sync)(hub)
    await cm.__aenter__()
    try:
        controller = hub.shared["member_sync_controller"]
        deadline = time.perf_counter() + 300
        while not all(s.health.ready for s in controller.syncs.values()) or len(controller.syncs) < len(names):
            if time.perf_counter() > deadline or any(c.returncode is not None for c in children):
                states = {n: [c["reason"] for c in s.health.status_conditions()] for n, s in controller.syncs.items()}
                raise RuntimeError(f"clusters not Ready after 300 s: {states}")
            await asyncio.sleep(0.05)
        synced_in = time.perf_counter() - sync_started
        nodes = sum(len(s.snapshot.nodes) for s in controller.syncs.values())
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        await asyncio.sleep(args.warmup)
        writer = controller.writer
        flushes0, keys0, bytes0 = writer.flushes, writer.keys_written, writer.bytes_written
        stalls: list[float] = []

        async def watch_loop() -> None:
            # how late a 5 ms timer fires: time the hub's event loop was busy elsewhere
            loop = asyncio.get_running_loop()
            while True:
                started = loop.time()
                await asyncio.sleep(0.005)
                stalls.append(loop.time() - started - 0.005)

        stall_task = asyncio.create_task(watch_loop(), name="bench-loop-stalls")
        cpu_hub0, cpu_sim0 = cpu_seconds(), sum(cpu_seconds(c.pid) for c in children)
        waited0 = run_delay_seconds()
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        measuring[0] = True
        t0 = time.perf_counter()
        await asyncio.sleep(args.seconds)
        measuring[0] = False
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        window = time.perf_counter() - t0
        stall_task.cancel()
        stalls.sort()
        hub_cores = (cpu_seconds() - cpu_hub0) / window
        hub_waiting = (run_delay_seconds() - waited0) / window
        sim_cores = (sum(cpu_seconds(c.pid) for c in children) - cpu_sim0) / window
        flushes = writer.flushes - flushes0
        keys = writer.keys_written - keys0
        written = writer.bytes_written - bytes0
        rss = rss_mib()
        relists = sum(r.lists for s in controller.syncs.values() for r in s.reflectors.values())
    finally:
        # the hub stops first (a final checkpoint flush), then the members
        await cm.__aexit__(None, None, None)
        await storage.close()
        await store.close()
        generated = {"generated": 0, "seconds": 0.0}
        for child in children:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.close()
            try:
                done = json.loads(await asyncio.wait_for(child.stdout.readline(), timeout=60) or b"{}")
                generated["generated"] += done.get("generated", 0)
                generated["seconds"] = max(generated["seconds"], done.get("seconds", 0.0))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    child.terminate()
                await child.wait()
    lags.sort()
    processing.sort()
    result = {
        "events_per_s": ingested[0] / window,
        "generated_per_s": generated.get("generated", 0) / max(generated.get("seconds", 1.0), 1e-9),
        "lag_p50_ms": 1000 * lags[len(lags) // 2] if lags else float("nan"),
        "lag_p99_ms": 1000 * lags[int(len(lags) * 0.99)] if lags else float("nan"),
        "lag_max_ms": 1000 * lags[-1] if lags else float("nan"),
        "hub_processing_p99_ms": 1000 * processing[int(len(processing) * 0.99)] if processing else float("nan"),
        "rss_mib": rss,
        "rss_peak_mib": rss_mib("VmHWM"),
        "rss_before_sync_mib": rss_before,
        "checkpoint_txn_per_s": flushes / window,
        "checkpoint_keys_per_s": keys / window,
        "checkpoint_kib_per_s": written / window / 1024,
        "hub_loop_stall_p99_ms": 1000 * stalls[int(len(stalls) * 0.99)] if stalls else float("nan"),
        "hub_loop_stall_max_ms": 1000 * stalls[-1] if stalls else float("nan"),
        "hub_cpu_cores": hub_cores,
        "hub_runqueue_wait_s_per_s": hub_waiting,
        "sim_cpu_cores": sim_cores,
        "initial_sync_s": synced_in,
        "nodes": nodes,
        "lists_total": relists,
    }
    print(f"run {run + 1}: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in result.items()), flush=True)
    return result


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(limit=6, file=sys.stderr)


async def main_async(args: argparse.Namespace) -> None:
    from federator.obs import configure_logging

    configure_logging(level="warning")
    # kill -USR2 <pid> prints where every task is waiting
    asyncio.get_running_loop().add_signal_handler(__import__("signal").SIGUSR2, _dump_tasks)
    results = []
    for run in range(args.runs):
        # every run is a fresh hub in a fresh process: RSS of run N must not include run N-1
        if args.runs > 1 and not args.in_process_run:
            cmd = [sys.executable, __file__, "--runs", "1", "--in-process-run", "--json",
                   "--clusters", str(args.clusters), "--nodes", str(args.nodes), "--rate", str(args.rate),
                   "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                   "--checkpoint-interval", str(args.checkpoint_interval), "--sim-procs", str(args.sim_procs),
                   "--burst", str(args.burst), *(["--hub-store", args.hub_store] if args.hub_store else [])]
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE)
            out, _ = await proc.communicate()
            lines = out.decode().splitlines()
            print(lines[0] if lines else "(no output)", flush=True)
            results.append(json.loads(lines[-1]))
        else:
            results.append(await one_run(args, run))
    if args.json:
        print(json.dumps(results[0]))
        return
    keys = list(results[0])
    print(f"\nmedians over {len(results)} run(s), {args.clusters} clusters x {args.nodes} nodes, "
          f"target churn {args.rate} events/s:")
    for key in keys:
        print(f"  {key:24s} {statistics.median(r[key] for r in results):10.1f}")
    med = {k: statistics.median(r[k] for r in results) for k in keys}
    bars = [
        ("events/s ingested >= 5000", med["events_per_s"] >= 5000),
        ("p99 lag <= 100 ms", med["lag_p99_ms"] <= 100),
        ("hub RSS <= 1024 MiB", med["rss_peak_mib"] <= 1024),
        ("checkpoint writes <= 200/s", med["checkpoint_txn_per_s"] <= 200),
    ]
    for name, ok in bars:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rate", type=int, default=6000, help="total churn events/s the members generate")
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--checkpoint-interval", type=float, default=0.5)
    parser.add_argument("--profile", action="store_true", help="cProfile the hub during the window (stderr)")
    parser.add_argument("--burst", type=int, default=20, help="member writes between yields to its watch streams")
    parser.add_argument("--hub-store", default="", help="hub store URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--sim-procs", type=int, default=2, help="processes serving the simulated clusters")
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--sim-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in-process-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sim_worker:
        asyncio.run(sim_worker(args))
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    faulthandler.register(__import__("signal").SIGUSR1)
    main()
