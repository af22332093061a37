"""Benchmark of the member-cluster simulator: one process serving 20
clusters of 500 nodes each over real sockets (TLS, bearer token).

Measures, per run (medians over --runs):
- LIST latency of all nodes over HTTP, for a 500-node cluster and for a
  5,000-node cluster (time to the full response body, and with JSON decode);
- watch events/s delivered to 20 concurrent watchers, one Events watch per
  cluster: "replay" (1,000 events per cluster written first, the watchers
  then resume from the resourceVersion before them: delivery alone) and
  "live" (watchers open while the in-process writers write: bounded by the
  writers); and 20 live watchers on one cluster (fan-out);
- pods bound/s by the gang scheduler: 4,000 one-GPU pods in Volcano gangs
  of 10 (filling every GPU of a 500-node cluster) created first, then the
  scheduler started (includes its initial list);
- RSS of the process serving 20 x 500 nodes (before and after the load).

Bars (issue 3): LIST 5,000 nodes <= 1 s; >= 10,000 watch events/s
aggregate; >= 500 pods/s bound; 20 x 500 nodes within 2 GB RSS.

    .venv/bin/python bench/sim.py [--runs 3] [--clusters 20] [--nodes 500] [--quick] [--json FILE]

`--quick`: 4 clusters of 100 nodes, LIST of a 1,000-node cluster, 800 pods, 200 watch events per
cluster (each unless given); the bars are for the full sizes, so a quick run's figures carry none.
`--json FILE`: every run's figures in the format of bench/benchresult.py (`federator bench` reads it).

Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import signal
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path
from federator.dev.certs import ensure_dev_tls  # noqa: E402
from federator.obs import METRICS, configure_logging, get_logger  # noqa: E402
from federator.sim import kinds  # noqa: E402
from federator.sim.profile import ClusterProfile, parse_profile  # noqa: E402
from federator.sim.scheduler import run_gang_scheduler  # noqa: E402
from federator.sim.server import SimCluster  # noqa: E402


def bench_profile(name: str, nodes: int) -> ClusterProfile:
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "bench"},
        "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "volcano"}, {"type": "default"}],
        "kubelet": {"startDelaySeconds": 1},
        "datasets": [{"name": "imagenet-22k", "size": "1400Gi"}],
        "nodePools": [{"name": "a100", "count": nodes, "cpu": "128", "memory": "1Ti", "gpus": 8,
                       "gpuProduct": "A100-SXM4-40GB", "gpuMemoryMiB": 40960, "rdmaHca": 1000,
                       "reserved": {"cpu": "2", "memory": "16Gi"},
                       "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}],
    })


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Http:
    def __init__(self, ca_pem: bytes) -> None:
        ctx = ssl.create_default_context(cadata=ca_pem.decode())
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                             timeout=aiohttp.ClientTimeout(total=None, sock_read=None))

    async def close(self) -> None:
        await self.session.close()


async def measure_list(http: Http, cluster: SimCluster, *, repeats: int) -> tuple[float, float, int]:
    """Median seconds to the full body, and with JSON decode; item count."""
    headers = {"Authorization": f"Bearer {cluster.token}", "Accept": "application/json"}
    body_times, decode_times = [], []
    count = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        async with http.session.get(f"{cluster.url}/api/v1/nodes", headers=headers) as r:
            body = await r.read()
            assert r.status == 200, r.status
        t1 = time.perf_counter()
        doc = json.loads(body)
        t2 = time.perf_counter()
        count = len(doc["items"])
        body_times.append(t1 - t0)
        decode_times.append(t2 - t0)
    return statistics.median(body_times), statistics.median(decode_times), count


async def _watch_count(http: Http, cluster: SimCluster, path: str, expected: int, started: asyncio.Event,
                       done: list[float]) -> int:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    got = 0
    async with http.session.get(f"{cluster.url}{path}", headers=headers) as r:
        assert r.status == 200, r.status
        started.set()
        async for line in r.content:
            if not line.strip():
                continue
            if b'"type":"BOOKMARK"' in line or b'"type": "BOOKMARK"' in line:
                continue
            got += 1
            if got >= expected:
                done.append(time.perf_counter())
                break
    return got


def _event(i: int, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"bench.{i:08d}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": f"p{i}", "apiVersion": "v1"},
            "reason": "Bench", "message": "benchmark event", "type": "Normal", "count": 1,
            "source": {"component": "bench"}}


async def _ensure_ns(cluster: SimCluster, ns: str) -> None:
    try:
        await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": ns}}, namespace=None)
    except Exception:  # noqa: BLE001 - exists already
        pass


async def measure_watch(http: Http, clusters: Sequence[SimCluster], *, per_cluster: int, ns: str,
                        fanout_on: SimCluster | None = None, watchers: int = 20,
                        replay: bool = False) -> float:
    """Aggregate events/s delivered to the watchers (one per cluster, or
    `watchers` on `fanout_on`); every watched cluster gets `per_cluster` new
    Events written in-process. Live: the watchers are open while the writes
    happen (so the writers' speed bounds the figure). Replay: the writes
    happen first and the watchers then resume from the resourceVersion before
    them, as a reconnecting reflector does (delivery alone is timed)."""
    targets = [fanout_on] * watchers if fanout_on is not None else list(clusters)
    written = [fanout_on] if fanout_on is not None else list(clusters)
    for c in written:
        await _ensure_ns(c, ns)
    rvs = {id(c): await c.storage.current_resource_version() for c in written}

    async def write(c: SimCluster) -> None:
        for i in range(per_cluster):
            await c.storage.create(kinds.EVENTS, _event(i, ns), namespace=ns)

    if replay:
        await asyncio.gather(*(write(c) for c in written))
    started = [asyncio.Event() for _ in targets]
    done: list[float] = []
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(_watch_count(
        http, c, f"/api/v1/namespaces/{ns}/events?watch=1&resourceVersion={rvs[id(c)]}", per_cluster, s, done))
        for c, s in zip(targets, started, strict=True)]
    if not replay:
        await asyncio.wait_for(asyncio.gather(*(s.wait() for s in started)), 60)
        t0 = time.perf_counter()
        await asyncio.gather(*(write(c) for c in written))
    counts = await asyncio.wait_for(asyncio.gather(*tasks), 300)
    elapsed = max(done) - t0
    return sum(counts) / elapsed


async def measure_binding(cluster: SimCluster, *, pods: int, gang: int) -> float:
    """Pods bound/s: `pods` pods in Volcano gangs of `gang` exist first;
    the scheduler then starts and binds them all."""
    ns = "bench-bind"
    gpus = cluster.profile.gpu_count
    if pods > gpus:
        raise SystemExit(f"--pods {pods}: the cluster has only {gpus} GPUs (one per pod)")
    await _ensure_ns(cluster, ns)
    for g in range(pods // gang):
        name = f"g{g:05d}"
        await cluster.storage.create(kinds.VOLCANO_PODGROUPS, {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": {"minMember": gang}}, namespace=ns)
        for j in range(gang):
            await cluster.storage.create(kinds.PODS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{j}", "namespace": ns,
                             "annotations": {"scheduling.k8s.io/group-name": name}},
                "spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                         "containers": [{"name": "w", "image": "trainer:1", "resources": {"requests": {
                             "cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1", "rdma/hca": "1"}}}]}},
                namespace=ns)
    counter = METRICS.sim_pods_bound.labels(cluster=cluster.name)
    before = counter._value.get()
    stop = asyncio.Event()
    t0 = time.perf_counter()
    task = asyncio.create_task(run_gang_scheduler(storage=cluster.storage, registry=cluster.registry,
                                                  cluster=cluster.profile, stop=stop, logger=get_logger("bench")))
    try:
        deadline = t0 + 600
        while counter._value.get() - before < pods:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {counter._value.get() - before} of {pods} pods bound in 600 s")
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        await task
    return pods / elapsed


def progress(what: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {what} (rss {rss_mib():.0f} MiB)", file=sys.stderr, flush=True)


async def one_run(args: argparse.Namespace, tls_dir: Path) -> dict[str, float]:
    tls = ensure_dev_tls(tls_dir)
    result: dict[str, float] = {}
    base_rss = rss_mib()
    clusters = [SimCluster(bench_profile(f"bench-{i:02d}", args.nodes), tls=tls, run_controllers=False)
                for i in range(args.clusters)]
    t0 = time.perf_counter()
    for c in clusters:
        await c.start()
    result["start_20x500_s"] = time.perf_counter() - t0
    progress(f"{args.clusters} clusters started")
    result["rss_20x500_mib"] = rss_mib()
    result["rss_20x500_delta_mib"] = result["rss_20x500_mib"] - base_rss
    http = Http(tls.ca_pem())
    try:
        result["list_500_s"], result["list_500_decoded_s"], n = await measure_list(http, clusters[0],
                                                                                   repeats=args.list_repeats)
        assert n == args.nodes, n
        progress("LIST measured")
        result["watch_events_per_s_20_clusters"] = await measure_watch(
            http, clusters, per_cluster=args.watch_events, ns="bench-replay", replay=True)
        result["watch_events_per_s_20_clusters_live"] = await measure_watch(
            http, clusters, per_cluster=args.watch_events, ns="bench-live")
        progress("watch (20 clusters) measured")
        result["watch_events_per_s_fanout_20_live"] = await measure_watch(
            http, clusters, per_cluster=args.watch_events, ns="bench-fanout", fanout_on=clusters[1])
        progress("watch (fan-out) measured")
        result["pods_bound_per_s"] = await measure_binding(clusters[2], pods=args.pods, gang=args.gang)
        result["rss_after_load_mib"] = rss_mib()
        progress("binding measured")
        big = SimCluster(bench_profile("bench-big", args.big_nodes), tls=tls, run_controllers=False)
        await big.start()
        try:
            result["list_5000_s"], result["list_5000_decoded_s"], n = await measure_list(
                http, big, repeats=args.list_repeats)
            assert n == args.big_nodes, n
        finally:
            await big.stop()
    finally:
        await http.close()
        for c in clusters:
            await c.stop()
    return result


BARS = {
    "list_5000_s": ("<=", 1.0),
    "watch_events_per_s_20_clusters": (">=", 10_000),
    "pods_bound_per_s": (">=", 500),
    "rss_20x500_mib": ("<=", 2048),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--big-nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=4000,
                        help="one-GPU pods to bind (4,000 fill the 500 x 8 GPUs exactly)")
    parser.add_argument("--gang", type=int, default=10)
    parser.add_argument("--watch-events", type=int, default=1000, help="events written per watched cluster")
    parser.add_argument("--list-repeats", type=int, default=5)
    parser.add_argument("--state-dir", default=str(ROOT / ".federator" / "bench-sim"))
    parser.add_argument("--quick", action="store_true",
                        help="4 x 100 nodes, LIST of 1,000, 800 pods, 200 watch events (each unless given)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--single-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        given = {a.split("=", 1)[0] for a in sys.argv[1:]}
        for flag, value in (("--clusters", 4), ("--nodes", 100), ("--big-nodes", 1000), ("--pods", 800),
                            ("--watch-events", 200), ("--list-repeats", 3)):
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), value)
    configure_logging(level="warning")
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> shows where a run is
    if args.single_run:
        print(json.dumps(asyncio.run(one_run(args, Path(args.state_dir)))), flush=True)
        return 0
    # One process per run: RSS must start from scratch (aiohttp's middleware
    # LRU keeps stopped apps reachable, and freed memory is not handed back).
    runs: list[dict[str, float]] = []
    forwarded = [a for a in sys.argv[1:] if a != "--single-run"]
    for i in range(args.runs):
        done = subprocess.run([sys.executable, __file__, *forwarded, "--single-run"], stdout=subprocess.PIPE,
                              text=True, check=False)
        if done.returncode != 0:
            print(f"run {i + 1} failed with exit code {done.returncode}", file=sys.stderr)
            return 2
        r = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append(r)
        print(f"run {i + 1}/{args.runs}: " + ", ".join(f"{k}={v:.3f}" for k, v in r.items()), flush=True)
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\nmedians over {args.runs} runs ({args.clusters} clusters x {args.nodes} nodes; "
          f"{args.big_nodes}-node cluster for LIST; {args.pods} pods in gangs of {args.gang}):")
    ok = True
    for k, v in medians.items():
        bar = BARS.get(k)
        verdict = ""
        if bar is not None:
            passed = v <= bar[1] if bar[0] == "<=" else v >= bar[1]
            ok &= passed
            verdict = f"   bar {bar[0]} {bar[1]:g}: {'PASS' if passed else 'MISS'}"
        print(f"  {k:34s} {v:12.3f}{verdict}")
    result = BenchResult("sim")
    result.add_runs(runs, bars=None if args.quick else BARS)
    result.notes.append(f"{args.clusters} clusters x {args.nodes} nodes; {args.big_nodes}-node cluster for LIST; "
                        f"{args.pods} pods in gangs of {args.gang}; {args.watch_events} watch events per cluster")
    result.write(args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
