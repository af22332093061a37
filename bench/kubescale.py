"""`bench/scale.py --members kube`: how many REAL nodes one hub follows (issue 25 item 5), and what the real
members cost.

Two real v1.36 members (federator/dev/kube.py: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok), each started with one node, then given `--nodes` kwok nodes in all: the Node objects of the profile
(`federator.sim.profile.initial_nodes`: A100 nodes as the simulator makes them) are created through the API with
the admin kubeconfig, `--create-concurrency` requests at a time per member, and the bench waits until kwok has
made every one Ready and the node lifecycle controller has taken every not-ready taint off. Only then does
the hub start (this process: a SQLite hub store, one MemberCluster per member with the admin's kubeconfig,
the real member_sync controller, as bench/scale.py's simulated run), so that the figures are the hub's:

- initialSyncSeconds: hub start -> both members Ready in the hub (every node and pod listed into its
  snapshot, every watch open), with the hub's CPU seconds for it;
- hubRssMiB when Ready and after a collection and malloc_trim (hubRssTrimmedMiB), hubBytesPerNode and
  hubHeldBytesPerNode (growth over the RSS before the hub started), hubPeakRssMiB at the end;
- snapshot freshness: `--rate` stamped pods per second in all (bench/sync.py's STAMP annotation: the
  wall time of the create), bound straight to random nodes (kwok runs them), for `--seconds`; the lag from
  the create to the hub's snapshot (lagP50Ms, lagP99Ms), read by bench/sync.py's LagProbe;
- each member's processes: VmRSS and peak (VmHWM) in MiB and CPU seconds, per component, for the node
  creation and for the time the hub followed them (the kwok node Leases and status heartbeats go on under
  it: with 5,000 nodes a member writes about 170 Leases/s and 50 node statuses/s).

kwok's node Leases last `--node-lease-seconds` (default 120, renewed every quarter of it) and the node
lifecycle controller's grace is 4 leases: with the harness's 10 s Leases, 2 x 5,000 nodes would be 4,000
Lease writes/s on two cores. The hub process creates the nodes too (aiohttp): its RSS before the hub starts
is taken after a collection and malloc_trim. Never part of the test run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import random
import shutil
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import sync as syncbench

_CLK_TCK = 100.0


def _profile(name: str, nodes: int) -> Any:
    from federator.sim.profile import parse_profile

    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "cloud", "provider": "gcp", "region": "europe-west4"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 100},
        "schedulers": [{"type": "native"}],
        "kubelet": {"startDelaySeconds": 0.5, "terminationSeconds": 0.1},
        "nodePools": [{"name": "a100", "count": nodes, "cpu": "64", "memory": "512Gi", "gpus": 8,
                       "gpuProduct": "NVIDIA-A100-SXM4-80GB", "maxPods": 110}],
    }, source="bench/kubescale.py")


def usage(members: list[Any]) -> dict[str, dict[str, dict[str, float]]]:
    """member -> component -> {rssMiB, peakRssMiB, cpuSeconds} from /proc."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for member in members:
        for component, pid in member.processes.items():
            try:
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            values = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in status
                      if line.startswith(("VmRSS:", "VmHWM:"))}
            found.setdefault(member.name, {})[component] = {
                "rssMiB": values.get("VmRSS", 0.0), "peakRssMiB": values.get("VmHWM", 0.0),
                "cpuSeconds": (int(fields[11]) + int(fields[12])) / _CLK_TCK}
    return found


def _ssl(member: Any) -> ssl.SSLContext:
    tls = member.home / "tls"
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    context.load_cert_chain(tls / "admin.crt", tls / "admin.key")
    return context


async def create_nodes(member: Any, nodes: int, *, concurrency: int) -> int:
    """Create the member's nodes that are not there yet (the profile's, `nodes` in all), `concurrency` at a time;
    how many were created."""
    import aiohttp

    from federator.sim.profile import initial_nodes

    wanted = initial_nodes(_profile(member.name, nodes))
    connector = aiohttp.TCPConnector(ssl=_ssl(member), limit=concurrency)
    created = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{member.server}/api/v1/nodes") as resp:
            have = {n["metadata"]["name"] for n in (await resp.json())["items"]}
        queue = [n for n in wanted if n["metadata"]["name"] not in have]

        async def worker() -> None:
            nonlocal created
            while queue:
                node = queue.pop()
                for attempt in range(5):
                    async with session.post(f"{member.server}/api/v1/nodes", json=node) as resp:
                        if resp.status in (201, 409):
                            created += resp.status == 201
                            break
                        if resp.status < 500 and resp.status != 429:
                            raise RuntimeError(f"{member.name}: creating {node['metadata']['name']}: "
                                               f"{resp.status} {(await resp.text())[:300]}")
                    await asyncio.sleep(0.2 * 2**attempt)
                else:
                    raise RuntimeError(f"{member.name}: creating {node['metadata']['name']} kept failing")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return created


async def nodes_ready(member: Any, nodes: int, *, timeout: float) -> float:
    """Wait until the member has `nodes` nodes, all Ready and without a node.kubernetes.io taint; seconds waited."""
    import aiohttp

    started = time.perf_counter()
    last = ""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=_ssl(member))) as session:
        while True:
            async with session.get(f"{member.server}/api/v1/nodes") as resp:
                items = (await resp.json())["items"]
            ready = sum(1 for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                                for c in n["status"].get("conditions") or ()))
            tainted = sum(1 for n in items if any(t["key"].startswith("node.kubernetes.io/")
                                                  for t in n["spec"].get("taints") or ()))
            if len(items) >= nodes and ready >= nodes and not tainted:
                return time.perf_counter() - started
            last = f"{len(items)} nodes, {ready} Ready, {tainted} tainted"
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{member.name}: not every node Ready within {timeout:.0f} s: {last}")
            await asyncio.sleep(2.0)


async def stamped_pods(members: list[Any], probe: Any, *, rate: float, seconds: float, nodes: int,
                       namespace: str = "default") -> int:
    """Create `rate` stamped pods/s across the members for `seconds`, each bound to a random node; how many."""
    import aiohttp

    from federator.sim.profile import initial_nodes

    names = [n["metadata"]["name"] for n in initial_nodes(_profile("x", nodes))]
    sessions = {m.name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=_ssl(m), limit=32))
                for m in members}
    rng = random.Random(7)
    sent = 0
    tasks: list[asyncio.Task[None]] = []

    async def one(member: Any, index: int) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"stamp-{index}", "namespace": namespace,
                            "annotations": {syncbench.STAMP: repr(time.time())}},
               "spec": {"nodeName": rng.choice(names), "restartPolicy": "Always",
                        "containers": [{"name": "c", "image": "app:1",
                                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        async with sessions[member.name].post(f"{member.server}/api/v1/namespaces/{namespace}/pods",
                                              json=pod) as resp:
            await resp.read()

    probe.measuring = True
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            due = started + sent / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one(members[sent % len(members)], sent)))
            sent += 1
        await asyncio.gather(*tasks)
        await asyncio.sleep(2.0)  # the last ones reach the hub
    finally:
        probe.measuring = False
        for session in sessions.values():
            await session.close()
    return sent


class _Alive:
    def __init__(self, members: list[Any]) -> None:
        self.members = members

    def alive(self) -> bool:
        return all(len(m.processes) == 5 for m in self.members)


def _registration(member: Any) -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": member.name},
            "spec": {"connection": {"kubeconfigPath": str(member.admin_kubeconfig), "context": member.name},
                     "location": {"type": "cloud", "provider": "gcp", "region": "europe-west4"},
                     "network": {"type": "ethernet", "bandwidthGbps": 100.0},
                     "scheduler": {"name": "native"}, "labels": {"tier": "research"}, "costPerGpuHour": 3.0}}


def _trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


async def one_run(args: Any) -> dict[str, Any]:
    """One run: `args.clusters` real members of `args.nodes[0]` nodes each, then the hub; the figures."""
    from federator.dev.kube import KubeMember, kube_binaries
    from federator.obs import configure_logging
    from federator.runtime.gcpolicy import server_gc

    configure_logging(level="error")
    nodes = args.nodes[0]
    binaries = await asyncio.to_thread(kube_binaries, timeout=1800)
    workdir = Path(tempfile.mkdtemp(prefix="federator-bench-kubescale-"))
    members: list[KubeMember] = []
    figures: dict[str, Any] = {}
    notes: list[str] = []
    hub = None
    try:
        started = time.perf_counter()
        for i in range(args.clusters):
            member = KubeMember(_profile(f"kube-scale-{i}", 1), directory=workdir / "kube", binaries=binaries,
                                node_lease_seconds=args.node_lease_seconds,
                                node_monitor_grace_seconds=4.0 * args.node_lease_seconds)
            members.append(member)
            member.start()
        figures["membersStartSeconds"] = time.perf_counter() - started
        before = usage(members)
        started = time.perf_counter()
        created = await asyncio.gather(*(create_nodes(m, nodes, concurrency=args.create_concurrency)
                                         for m in members))
        figures["nodeCreateSeconds"] = time.perf_counter() - started
        await asyncio.gather(*(nodes_ready(m, nodes, timeout=args.sync_timeout) for m in members))
        figures["nodesReadySeconds"] = time.perf_counter() - started
        after_create = usage(members)
        notes.append(f"created {sum(created)} nodes in {figures['nodeCreateSeconds']:.0f} s "
                     f"({args.create_concurrency} at a time per member); all Ready and untainted after "
                     f"{figures['nodesReadySeconds']:.0f} s")
        _trim()
        probe = syncbench.LagProbe()
        hub = syncbench.HubUnderTest(workdir, on_applied=probe.on_applied)
        with server_gc():
            rss_before = syncbench.rss_mib()
            cpu_before = syncbench.cpu_seconds()
            members_cpu_before = {m: sum(c["cpuSeconds"] for c in comps.values())
                                  for m, comps in usage(members).items()}
            sync_started = time.perf_counter()
            await hub.start({m.name: _registration(m) for m in members})
            await hub.wait_ready([m.name for m in members], _Alive(members), timeout=args.sync_timeout)  # type: ignore[arg-type]
            figures["initialSyncSeconds"] = time.perf_counter() - sync_started
            figures["initialSyncHubCpuSeconds"] = syncbench.cpu_seconds() - cpu_before
            figures["nodes"] = hub.nodes()
            rss_ready = syncbench.rss_mib()
            figures["hubRssMiB"] = rss_ready
            figures["hubBytesPerNode"] = (rss_ready - rss_before) * 2**20 / max(figures["nodes"], 1)
            _trim()
            figures["hubRssTrimmedMiB"] = syncbench.rss_mib()
            figures["hubHeldBytesPerNode"] = (figures["hubRssTrimmedMiB"] - rss_before) * 2**20 / max(
                figures["nodes"], 1)
            # the hub following the members at rest (kwok's Leases and node heartbeats), then under the probe
            idle_cpu, idle_started = syncbench.cpu_seconds(), time.perf_counter()
            await asyncio.sleep(args.seconds)
            figures["hubIdleCpuCores"] = (syncbench.cpu_seconds() - idle_cpu) / (time.perf_counter() - idle_started)
            sent = await stamped_pods(members, probe, rate=args.rate, seconds=args.seconds, nodes=nodes)
            lag = sorted((applied - float(stamp)) * 1000 for stamp, _, applied in probe.samples)
            if lag:
                figures["lagP50Ms"] = lag[len(lag) // 2]
                figures["lagP99Ms"] = lag[min(len(lag) - 1, int(len(lag) * 0.99))]
            notes.append(f"freshness: {sent} stamped pods at {args.rate:g}/s, {len(lag)} seen by the hub")
            figures["hubPeakRssMiB"] = syncbench.rss_mib("VmHWM")
            end = usage(members)
            for name, comps in end.items():
                figures[f"{name}.cpuSecondsWhileFollowed"] = (sum(c["cpuSeconds"] for c in comps.values())
                                                              - members_cpu_before[name])
                for component, values in comps.items():
                    figures[f"{name}.{component}.rssMiB"] = values["rssMiB"]
                    figures[f"{name}.{component}.peakRssMiB"] = values["peakRssMiB"]
                    figures[f"{name}.{component}.cpuSecondsNodeCreate"] = (
                        after_create[name][component]["cpuSeconds"] - before[name][component]["cpuSeconds"])
                figures[f"{name}.rssMiB"] = sum(c["rssMiB"] for c in comps.values())
            figures["followedSeconds"] = time.perf_counter() - sync_started
    finally:
        if hub is not None:
            await hub.stop()
        for member in reversed(members):
            member.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"figures": figures, "notes": notes}


def main(args: Any) -> int:
    result = asyncio.run(one_run(args))
    print(json.dumps(result, indent=1))
    return 0
