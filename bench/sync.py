"""Benchmark of member-cluster sync: a hub following 20 simulated clusters of 500 nodes under churn.

The simulated clusters run in separate processes (--sim-procs, default 2; so the hub's RSS is its
own), serving HTTPS on loopback with bearer tokens; a driver in each churns pods through its clusters' storage:
pods created bound to a random node (ADDED), finished (MODIFIED, phase Succeeded) and deleted
(DELETED), at a steady total rate. This process is the hub: a SQLite hub store, the real
`member_sync` controller, one MemberCluster per simulated cluster (kubeconfigPath). Both sides run
with the garbage-collector settings `federator up` and `federator sim` use (`gcpolicy.server_gc`;
--no-server-gc for the interpreter's defaults).

Measured per run, over a window after every cluster is Ready:
- events/s ingested by the hub (watch events folded into snapshots);
- member-event-to-snapshot lag p50/p99: the driver stamps each pod write with its wall-clock time
  (annotation on create, status.message on finish); the hub reads it when the new snapshot is
  published (same host, same clock);
- where that lag goes, per event: each simulator process also records when it wrote the event to
  the watch stream's socket (`sim_emit_*`: stamp -> socket write, the member's own lag: its event
  loop and its share of the CPU); `wire_*` is socket write -> the hub's read of the chunk (the
  kernel, and the hub's loop not getting to the socket: busy or waiting for a CPU);
  `hub_processing_*` the hub's read -> snapshot published; `hub_lag_*` = socket write -> snapshot
  published, i.e. the lag minus the simulator's part;
- hub RSS (VmRSS, and the peak VmHWM) with 20 x 500 = 10,000 nodes;
- checkpoint store writes/s (transactions), and keys and bytes written/s;
- to read the numbers on a shared machine: CPU used by the hub and the members, how long the hub
  and the members waited for a CPU (run-queue wait, /proc schedstat; `sim_runqueue_wait_s_per_s`
  is per simulator process) and how late the hub's event loop ran a 5 ms timer (loop stall): lag
  measured while the hub or a member is starved of CPU is the machine's, not the sync's.

Bars (issue 4): >= 5,000 events/s ingested; p99 lag <= 100 ms; hub RSS <= 1 GB for 10,000 nodes;
checkpoint writes <= 200/s at any churn.

    .venv/bin/python bench/sync.py [--runs 3] [--clusters 20] [--nodes 500] [--rate 6000] [--seconds 10]
        [--sim-procs 2] [--burst 20] [--hub-store URL] [--profile] [--no-server-gc]

The pieces (`Members`, `HubUnderTest`, `LagProbe`, `measure_churn`) are reused by bench/scale.py.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchresult, when imported from elsewhere

STAMP = "bench.federator.dev/sent"
# How the stamps appear in an encoded watch event (the simulator scans its socket writes for them).
_STAMP_MARKS = (b'"' + STAMP.encode() + b'":"', b'"message":"')


def rss_mib(field: str = "VmRSS", pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
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


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def cluster_name(i: int) -> str:
    return f"bench-{i:02d}"


def cluster_shape(i: int, *, mix: bool) -> dict[str, Any]:
    """What cluster i offers. Without `mix` every cluster is on-prem InfiniBand A100 with tainted nodes (the
    sync benchmark's cluster); with it, bench/placement.py's federation: 60% on-prem InfiniBand A100 with a
    dataset, 20% on-prem RoCE H100, 20% cloud Ethernet H100, untainted."""
    if not mix:
        return {"product": "A100-SXM4-40GB", "fabric": "infiniband", "cloud": False, "tainted": True,
                "datasets": [{"name": "imagenet-22k", "size": "1400Gi"}]}
    kind = i % 5
    if kind <= 2:
        return {"product": "A100-SXM4-40GB", "fabric": "infiniband", "cloud": False, "tainted": False,
                "datasets": [{"name": f"dataset-{i % 8}", "size": "500Gi"}]}
    return {"product": "H100-80GB-HBM3", "fabric": "roce" if kind == 3 else "ethernet", "cloud": kind == 4,
            "tainted": False, "datasets": []}


def profile_doc(name: str, nodes: int, shape: dict[str, Any] | None = None) -> dict[str, Any]:
    shape = shape or cluster_shape(0, mix=False)
    rdma = shape["fabric"] != "ethernet"
    pool: dict[str, Any] = {
        "name": "a100" if shape["product"].startswith("A100") else "h100", "count": nodes, "cpu": "128",
        "memory": "1Ti", "gpus": 8, "gpuProduct": shape["product"], "gpuMemoryMiB": 40960,
        "rdmaHca": 1000 if rdma else 0, "reserved": {"cpu": "2", "memory": "16Gi"},
    }
    if shape["tainted"]:
        pool["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return {
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "cloud", "provider": "bench", "region": "bench"} if shape["cloud"]
        else {"type": "on-prem", "region": "bench"},
        "network": {"fabric": shape["fabric"], "bandwidthGbps": 200 if rdma else 50},
        "schedulers": [{"type": "volcano"}, {"type": "default"}],
        "datasets": shape["datasets"],
        "nodePools": [pool],
    }


# ---------------------------------------------------------------- the simulated clusters (child process)


def _record_emits(emits: dict[str, float]) -> None:
    """Note when each stamped event is written to a watch stream's socket (this process only)."""
    from aiohttp import web

    original = web.StreamResponse.write

    async def write(self: web.StreamResponse, data: bytes) -> None:
        if data:
            now = time.time()
            for mark in _STAMP_MARKS:
                i = data.find(mark)
                while i >= 0:
                    j = i + len(mark)
                    k = data.find(b'"', j)
                    if k < 0:
                        break
                    emits.setdefault(data[j:k].decode(), now)
                    i = data.find(mark, k)
        await original(self, data)

    web.StreamResponse.write = write  # type: ignore[method-assign]


async def sim_worker(args: argparse.Namespace) -> None:
    from federator.dev.certs import ensure_dev_tls
    from federator.dev.clusters import registration_for
    from federator.runtime.gcpolicy import server_gc
    from federator.obs import configure_logging
    from federator.sim import kinds
    from federator.sim.profile import parse_profile
    from federator.sim.server import SimCluster

    configure_logging(level="warning")
    if args.sim_nice:
        os.nice(args.sim_nice)
    workdir = Path(args.dir)
    tls = ensure_dev_tls(workdir)
    emits: dict[str, float] = {}
    _record_emits(emits)
    indices = range(args.first, args.first + args.clusters)
    sims: list[SimCluster] = []
    registrations = {}
    for i in indices:
        name = cluster_name(i)
        sim = SimCluster(parse_profile(profile_doc(name, args.nodes, cluster_shape(i, mix=args.mix)), source="bench"),
                         run_controllers=False, tls=tls, bookmark_interval=5.0)
        await sim.start()
        registrations[name] = registration_for(sim.profile, kubeconfig=sim.write_kubeconfig(
            workdir / f"{name}.kubeconfig"))
        sims.append(sim)
    gc_settings = contextlib.ExitStack()
    if args.server_gc:
        gc_settings.enter_context(server_gc())  # as `federator sim` runs its clusters
    print(json.dumps({"ready": registrations}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    command = (await reader.readline()).decode().strip()
    if command != "go":
        return
    rng = random.Random(7)
    live: list[list[tuple[str, str]]] = [[] for _ in sims]  # per cluster: (name, phase) FIFO of live pods
    counter = 0
    events = 0
    stop = asyncio.Event()
    window: list[float] = []

    async def commands() -> None:
        # "stop T0 T1": stop, and report the emits of events stamped within [T0, T1]; EOF: stop
        line = (await reader.readline()).decode().split()
        if line[:1] == ["stop"] and len(line) == 3:
            window.extend(float(x) for x in line[1:])
        stop.set()

    command_task = loop.create_task(commands())
    started = time.perf_counter()
    rate = args.rate
    target_live = 40  # pods kept per cluster: create, finish, delete in turn

    async def one_op(i: int) -> None:
        nonlocal counter
        sim, pods = sims[i], live[i]
        if len(pods) < target_live or rng.random() < 0.34:
            counter += 1
            name = f"p{counter}"
            node = f"{sim.profile.node_pools[0].name}-{rng.randrange(args.nodes):04d}"
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
    await command_task
    if window:
        t0, t1 = window
        emitted = [[stamp, at] for stamp, at in emits.items() if t0 <= float(stamp) <= t1]
    else:
        emitted = []
    print(json.dumps({"generated": events, "seconds": elapsed, "emits": emitted}), flush=True)
    for sim in sims:
        await sim.stop()
    gc_settings.close()


# ---------------------------------------------------------------- the members, seen from the hub's process


class Members:
    """Simulator processes serving `clusters` simulated clusters between them (several clusters each)."""

    def __init__(self, workdir: Path, children: list[asyncio.subprocess.Process],
                 registrations: dict[str, dict[str, Any]]) -> None:
        self.workdir = workdir
        self.children = children
        self.registrations = registrations

    @property
    def names(self) -> list[str]:
        return list(self.registrations)

    @classmethod
    async def start(cls, workdir: Path, *, clusters: int, nodes: int, procs: int, rate: int, burst: int = 20,
                    mix: bool = False, server_gc: bool = True, nice: int = 0, ready_timeout: float = 1800) -> Members:
        from federator.dev.certs import ensure_dev_tls

        ensure_dev_tls(workdir)  # one CA for every simulated cluster, made before the workers start
        children = []
        per_proc = -(-clusters // procs)
        for first in range(0, clusters, per_proc):
            count = min(per_proc, clusters - first)
            children.append(await asyncio.create_subprocess_exec(
                sys.executable, str(Path(__file__).resolve()), "--sim-worker", "--dir", str(workdir),
                "--first", str(first), "--clusters", str(count), "--nodes", str(nodes),
                "--rate", str(rate * count // clusters), "--burst", str(burst),
                *(["--mix"] if mix else []), *([] if server_gc else ["--no-server-gc"]), "--sim-nice", str(nice),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=2**28,
            ))
        members = cls(workdir, children, {})
        try:
            for child in children:
                assert child.stdout is not None
                line = await asyncio.wait_for(child.stdout.readline(), timeout=ready_timeout)
                if not line:
                    raise RuntimeError(f"simulator process {child.pid} exited before serving (exit {child.returncode})")
                members.registrations.update(json.loads(line)["ready"])
        except BaseException:
            await members.stop()
            raise
        return members

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def alive(self) -> bool:
        return all(c.returncode is None for c in self.children)

    def rss_mib(self) -> float:
        return sum(rss_mib(pid=p) for p in self.pids if Path(f"/proc/{p}").exists())

    async def go(self) -> None:
        """Start the churn."""
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()

    async def stop(self, window: tuple[float, float] | None = None) -> dict[str, Any]:
        """Stop the churn and the processes; what they generated, and the socket-write time of every event
        stamped within `window` (stamp -> wall time)."""
        generated = {"generated": 0, "seconds": 0.0, "emits": {}}
        for child in self.children:
            if child.stdin is not None and not child.stdin.is_closing():
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if window is not None:
                        child.stdin.write(f"stop {window[0]!r} {window[1]!r}\n".encode())
                        await child.stdin.drain()
                    child.stdin.close()
        for child in self.children:
            try:
                if child.stdout is not None and child.returncode is None:
                    line = await asyncio.wait_for(child.stdout.readline(), timeout=120)
                    with contextlib.suppress(ValueError):
                        done = json.loads(line or b"{}")
                        generated["generated"] += done.get("generated", 0)
                        generated["seconds"] = max(generated["seconds"], done.get("seconds", 0.0))
                        generated["emits"].update(dict(done.get("emits") or []))
            except asyncio.TimeoutError:
                pass
            finally:
                with contextlib.suppress(ProcessLookupError):
                    child.terminate()
                await child.wait()
        return generated


# ---------------------------------------------------------------- the hub (this process)


class LagProbe:
    """The hub's `member_on_applied` hook: per stamped event, when the hub read it and when it was applied."""

    def __init__(self) -> None:
        self.measuring = False
        self.ingested = 0
        #: (stamp, read by the hub (wall), snapshot published (wall))
        self.samples: list[tuple[str, float, float]] = []

    def on_applied(self, cluster: str, resource: str, events: Any, received_at: float) -> None:
        if not self.measuring:
            return
        self.ingested += len(events)
        now = time.time()
        # received_at is loop.time(); as wall time it splits the lag into before and inside the hub
        received_wall = now - (asyncio.get_running_loop().time() - received_at)
        for kind, obj in events:
            stamp = None
            if kind == "ADDED":
                stamp = (obj.get("metadata", {}).get("annotations") or {}).get(STAMP)
            elif kind == "MODIFIED":
                stamp = (obj.get("status") or {}).get("message")
            if stamp:
                self.samples.append((stamp, received_wall, now))

    def figures(self, emits: dict[str, float]) -> dict[str, float]:
        """Lag percentiles (ms), total and per part; `emits` maps stamps to the simulator's socket write."""
        total, sim, wire, hub, hub_lag = [], [], [], [], []
        for stamp, received, applied in self.samples:
            try:
                sent = float(stamp)
            except ValueError:
                continue
            total.append(applied - sent)
            hub.append(applied - received)
            emitted = emits.get(stamp)
            if emitted is not None:
                sim.append(emitted - sent)
                wire.append(received - emitted)
                hub_lag.append(applied - emitted)
        out: dict[str, float] = {}
        for name, values in (("lag", total), ("sim_emit", sim), ("wire", wire), ("hub_processing", hub),
                             ("hub_lag", hub_lag)):
            values.sort()
            out[f"{name}_p50_ms"] = 1000 * percentile(values, 0.5)
            out[f"{name}_p99_ms"] = 1000 * percentile(values, 0.99)
        out["lag_max_ms"] = 1000 * total[-1] if total else float("nan")
        out["lag_samples"] = len(total)
        out["emit_matched"] = len(sim)
        return out


class HubUnderTest:
    """The hub side: a hub store, the MemberClusters and the real member_sync controller in this process."""

    def __init__(self, workdir: Path, *, store_url: str = "", checkpoint_interval: float = 0.5,
                 on_applied: Callable[..., None] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.workdir = workdir
        self.extra = dict(extra or {})
        self.store_url = store_url or f"sqlite://{workdir / 'hub.db'}"
        self.checkpoint_interval = checkpoint_interval
        self.on_applied = on_applied
        self._cm: Any = None
        self.hub: Any = None

    async def start(self, registrations: dict[str, dict[str, Any]]) -> None:
        """Open the store, register every cluster and start syncing them (returns at once)."""
        from federator.apiserver.storage import ObjectStorage
        from federator.controllers.context import HubContext, HubSettings
        from federator.hub.app import build_pipeline
        from federator.controllers.membercluster import member_sync
        from federator.hub.kinds import hub_registry
        from federator.obs import Metrics
        from federator.store.open import open_store

        store = await open_store(self.store_url, prefix="/hub/")
        registry = hub_registry()
        storage = ObjectStorage(store, registry)
        knobs: dict[str, Any] = {"state_dir": self.workdir, "checkpoint_interval_seconds": self.checkpoint_interval,
                                 **self.extra}
        if self.on_applied is not None:
            knobs["member_on_applied"] = self.on_applied
        self.hub = HubContext(store=store, storage=storage, registry=registry, metrics=Metrics(),
                              settings=HubSettings.from_mapping(knobs))
        build_pipeline(self.hub)
        rt = self.hub.kind("MemberCluster")
        for registration in registrations.values():
            await storage.create(rt, registration, namespace=None)
        self._cm = contextlib.asynccontextmanager(member_sync)(self.hub)
        await self._cm.__aenter__()

    @property
    def controller(self) -> Any:
        return self.hub.parts.running.member_sync

    @property
    def snapshots(self) -> dict[str, Any]:
        return dict(self.hub.parts.members.snapshots)

    def nodes(self) -> int:
        return sum(len(s.snapshot.nodes) for s in self.controller.syncs.values())

    async def wait_ready(self, names: Sequence[str], members: Members, *, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        controller = self.controller
        while len(controller.syncs) < len(names) or not all(s.health.ready for s in controller.syncs.values()):
            if time.perf_counter() > deadline or not members.alive():
                states = {n: [c["reason"] for c in s.health.status_conditions()] for n, s in controller.syncs.items()}
                ready = sum(s.health.ready for s in controller.syncs.values())
                raise RuntimeError(f"{ready}/{len(names)} clusters Ready after {timeout:.0f} s "
                                   f"(simulators alive: {members.alive()}): {dict(list(states.items())[:5])}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self._cm is not None:
            await self._cm.__aexit__(None, None, None)  # a final checkpoint flush
            self._cm = None
        if self.hub is not None:
            await self.hub.storage.close()
            await self.hub.store.close()


class DirectWatchers:
    """The least a hub could do, for the ratio: one plain watch of the pods of every cluster (aiohttp, the
    kubeconfig's CA and token), each line parsed and its stamp read, nothing else. Run in place of the hub,
    against the same members and churn, it measures the lag this machine imposes on any reader."""

    def __init__(self, probe: LagProbe) -> None:
        self.probe = probe
        self.tasks: list[asyncio.Task[None]] = []
        self.session: Any = None
        self.ready = 0

    async def start(self, registrations: dict[str, dict[str, Any]]) -> None:
        import base64
        import ssl

        import aiohttp
        import yaml

        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None))
        for registration in registrations.values():
            config = yaml.safe_load(Path(registration["spec"]["connection"]["kubeconfigPath"]).read_text())
            cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
            context = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            self.tasks.append(asyncio.create_task(self._watch(cluster["server"], user["token"], context)))

    async def _watch(self, server: str, token: str, context: Any) -> None:
        import orjson

        headers = {"Authorization": f"Bearer {token}"}
        async with self.session.get(f"{server}/api/v1/pods", headers=headers, ssl=context) as listed:
            rv = (await listed.json())["metadata"]["resourceVersion"]
        url = f"{server}/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        loop = asyncio.get_running_loop()
        async with self.session.get(url, headers=headers, ssl=context) as response:
            self.ready += 1
            pending = b""
            async for chunk in response.content.iter_any():
                received = loop.time()
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                events = []
                for line in lines:
                    event = orjson.loads(line)
                    if event["type"] != "BOOKMARK":
                        events.append((event["type"], event["object"]))
                self.probe.on_applied("", "pods", events, received)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.session is not None:
            await self.session.close()


async def measure_churn(members: Members, probe: LagProbe, *, writer: Any = None, seconds: float, warmup: float,
                        profile: bool = False) -> dict[str, float]:
    """Start the members' churn, measure over `seconds` after `warmup`, stop the members; the figures
    (`writer`: the hub's CheckpointWriter, whose writes are counted)."""
    await members.go()
    await asyncio.sleep(warmup)

    def written() -> tuple[int, int, int]:
        return (writer.flushes, writer.keys_written, writer.bytes_written) if writer is not None else (0, 0, 0)

    flushes0, keys0, bytes0 = written()
    stalls: list[float] = []

    async def watch_loop() -> None:
        # how late a 5 ms timer fires: time the hub's event loop was busy elsewhere or waited for a CPU
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(0.005)
            stalls.append(loop.time() - started - 0.005)

    stall_task = asyncio.create_task(watch_loop(), name="bench-loop-stalls")
    pids = members.pids
    cpu_hub0, cpu_sim0 = cpu_seconds(), sum(cpu_seconds(p) for p in pids)
    waited0, sim_waited0 = run_delay_seconds(), sum(run_delay_seconds(p) for p in pids)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)  # CPU time: waiting for a CPU is not charged to code
        profiler.enable()
    probe.measuring = True
    t0_wall, t0 = time.time(), time.perf_counter()
    await asyncio.sleep(seconds)
    probe.measuring = False
    window = time.perf_counter() - t0
    t1_wall = time.time()
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    stall_task.cancel()
    stalls.sort()
    hub_cores = (cpu_seconds() - cpu_hub0) / window
    hub_waiting = (run_delay_seconds() - waited0) / window
    sim_cores = (sum(cpu_seconds(p) for p in pids) - cpu_sim0) / window
    sim_waiting = (sum(run_delay_seconds(p) for p in pids) - sim_waited0) / window / max(1, len(pids))
    flushes1, keys1, bytes1 = written()
    flushes, keys, written_bytes = flushes1 - flushes0, keys1 - keys0, bytes1 - bytes0
    # the window's events that were still in flight when it closed are matched too: stop a little later
    await asyncio.sleep(0.5)
    generated = await members.stop(window=(t0_wall, t1_wall))
    result = {
        "events_per_s": probe.ingested / window,
        "generated_per_s": generated["generated"] / max(generated["seconds"], 1e-9),
        **probe.figures(generated["emits"]),
        "checkpoint_txn_per_s": flushes / window,
        "checkpoint_keys_per_s": keys / window,
        "checkpoint_kib_per_s": written_bytes / window / 1024,
        "hub_loop_stall_p99_ms": 1000 * percentile(stalls, 0.99),
        "hub_loop_stall_max_ms": 1000 * stalls[-1] if stalls else float("nan"),
        "hub_cpu_cores": hub_cores,
        "hub_runqueue_wait_s_per_s": hub_waiting,
        "sim_cpu_cores": sim_cores,
        "sim_runqueue_wait_s_per_s": sim_waiting,
    }
    return result


async def one_run(args: argparse.Namespace, run: int) -> dict[str, float]:
    from federator.runtime.gcpolicy import server_gc

    workdir = Path(tempfile.mkdtemp(prefix="federator-bench-sync-"))
    members = await Members.start(workdir, clusters=args.clusters, nodes=args.nodes, procs=args.sim_procs,
                                  rate=args.rate, burst=args.burst, server_gc=args.server_gc, nice=args.sim_nice)
    probe = LagProbe()
    hub = HubUnderTest(workdir, store_url=args.hub_store, checkpoint_interval=args.checkpoint_interval,
                       on_applied=probe.on_applied)
    direct = DirectWatchers(probe)
    gc_settings = contextlib.ExitStack()
    nodes = relists = 0
    try:
        if args.server_gc:
            gc_settings.enter_context(server_gc())  # as `federator up` runs once it serves
        rss_before = rss_mib()
        sync_started = time.perf_counter()
        if args.direct:
            await direct.start(members.registrations)
            while direct.ready < len(members.names):
                await asyncio.sleep(0.05)
        else:
            await hub.start(members.registrations)
            await hub.wait_ready(members.names, members, timeout=300)
            nodes = hub.nodes()
        synced_in = time.perf_counter() - sync_started
        figures = await measure_churn(members, probe, writer=None if args.direct else hub.controller.writer,
                                      seconds=args.seconds, warmup=args.warmup, profile=args.profile)
        rss = rss_mib()
        if not args.direct:
            relists = sum(r.lists for s in hub.controller.syncs.values() for r in s.reflectors.values())
    finally:
        await direct.stop()
        await hub.stop()
        await members.stop()
        gc_settings.close()
    result = {
        **figures,
        "rss_mib": rss,
        "rss_peak_mib": rss_mib("VmHWM"),
        "rss_before_sync_mib": rss_before,
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

    configure_logging(level="error")
    # kill -USR2 <pid> prints where every task is waiting
    asyncio.get_running_loop().add_signal_handler(__import__("signal").SIGUSR2, _dump_tasks)
    results = []
    for run in range(args.runs):
        # every run is a fresh hub in a fresh process: RSS of run N must not include run N-1
        if args.runs > 1 and not args.in_process_run:
            cmd = [sys.executable, __file__, "--runs", "1", "--in-process-run", "--child-json",
                   "--clusters", str(args.clusters), "--nodes", str(args.nodes), "--rate", str(args.rate),
                   "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                   "--checkpoint-interval", str(args.checkpoint_interval), "--sim-procs", str(args.sim_procs),
                   "--burst", str(args.burst), *(["--hub-store", args.hub_store] if args.hub_store else []),
                   *([] if args.server_gc else ["--no-server-gc"]), *(["--direct"] if args.direct else []),
                   "--sim-nice", str(args.sim_nice)]
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE)
            out, _ = await proc.communicate()
            lines = out.decode().splitlines()
            print(lines[0] if lines else "(no output)", flush=True)
            results.append(json.loads(lines[-1]))
        else:
            results.append(await one_run(args, run))
    if args.child_json:
        print(json.dumps(results[0]))
        return
    keys = list(results[0])
    print(f"\nmedians (min-max) over {len(results)} run(s), {args.clusters} clusters x {args.nodes} nodes, "
          f"target churn {args.rate} events/s, load average {os.getloadavg()[0]:.1f}:")
    for key in keys:
        values = [r[key] for r in results]
        print(f"  {key:28s} {statistics.median(values):10.1f}   ({min(values):.1f}-{max(values):.1f})")
    med = {k: statistics.median(r[k] for r in results) for k in keys}
    bars = [
        ("events/s ingested >= 5000", med["events_per_s"] >= 5000),
        ("p99 lag <= 100 ms", med["lag_p99_ms"] <= 100),
        ("hub RSS <= 1024 MiB", med["rss_peak_mib"] <= 1024),
        ("checkpoint writes <= 200/s", med["checkpoint_txn_per_s"] <= 200),
    ]
    for name, ok in bars:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if args.json is not None:
        from benchresult import BenchResult

        out = BenchResult("sync")
        bar_of = {"events_per_s": (">=", 5000.0), "lag_p99_ms": ("<=", 100.0), "rss_peak_mib": ("<=", 1024.0),
                  "checkpoint_txn_per_s": ("<=", 200.0)}
        for result in results:
            for key, value in result.items():
                out.add(key, value, unit=_unit(key), bar=bar_of.get(key))
        out.notes.append(f"{args.clusters} clusters x {args.nodes} nodes, target churn {args.rate} events/s, "
                         f"simulators at nice {args.sim_nice}{', in place of the hub: plain watch readers' if args.direct else ''}; "
                         f"load average {os.getloadavg()[0]:.1f} at the end; {os.cpu_count()} cores, shared")
        out.write(args.json)


def _unit(key: str) -> str:
    for suffix, unit in (("_ms", "ms"), ("_mib", "MiB"), ("_per_s", "/s"), ("_s", "s"), ("_cores", "cores")):
        if key.endswith(suffix):
            return unit
    return ""


def main(argv: Sequence[str] | None = None) -> int:
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
    parser.add_argument("--no-server-gc", dest="server_gc", action="store_false",
                        help="run the hub and the members with the interpreter's GC defaults")
    parser.add_argument("--sim-nice", type=int, default=0, metavar="N",
                        help="run the simulators at this nice value (they stand in for member clusters on other "
                             "machines; 10 lets the hub have the CPU first, as it would on a machine of its own)")
    parser.add_argument("--direct", action="store_true",
                        help="no hub: plain watch readers in its place (the lag any reader sees here, for the ratio)")
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mix", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sim-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in-process-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--child-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sim_worker:
        asyncio.run(sim_worker(args))
    else:
        asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    faulthandler.register(__import__("signal").SIGUSR1)
    sys.exit(main())
