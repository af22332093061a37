"""Helpers for the member-cluster sync tests (fixtures: conftest.py).

- `profile(...)`: small simulated cluster profiles (GPU + CPU pools, a gang scheduler, datasets);
- `Sims`: start several real SimClusters (HTTPS on loopback ports, bearer tokens, scheduler and
  kubelet running) on the test's event loop and write their kubeconfigs;
- `Hub`: a hub store + ObjectStorage over the hub registry + HubContext, running the real
  `member_sync` controller; `serve()` also serves the hub API over HTTP;
- `expected_snapshot(...)`: the snapshot a fresh LIST of a member gives, built independently of
  the running sync; `wait_until(...)`: polling with a deadline (never bare sleeps).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from federator.apiserver.app import build_api_app
from federator.apiserver.storage import ObjectStorage
from federator.clusters.client import MemberClient, podgroup_resource
from federator.clusters.client import NODES as NODES_KIND
from federator.clusters.client import PODS as PODS_KIND
from federator.clusters.sync import cluster_info
from federator.controllers.context import HubContext, HubSettings
from federator.controllers.membercluster import MemberSyncController, member_sync
from federator.hub.app import build_pipeline
from federator.hub.kinds import hub_registry
from federator.obs import Metrics
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot, NodeState, Taint
from federator.sim import kinds
from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.server import SimCluster
from federator.store.open import open_store
from federator.store.protocol import Store

T = TypeVar("T")
API = "federator.dev/v1alpha1"


def profile(name: str, *, scheduler: str = "volcano", gpu_nodes: int = 4, cpu_nodes: int = 2,
            product: str = "NVIDIA-A100-SXM4-80GB", fabric: str = "infiniband",
            datasets: bool = True) -> ClusterProfile:
    schedulers = [{"type": "default"}] if scheduler == "default" else [{"type": scheduler}, {"type": "default"}]
    pools: list[dict[str, Any]] = [
        {"name": "gpu", "count": gpu_nodes, "cpu": "64", "memory": "512Gi", "gpus": 8, "gpuProduct": product,
         "rdmaHca": 4 if fabric != "ethernet" else 0},
    ]
    if cpu_nodes:
        pools.append({"name": "cpu", "count": cpu_nodes, "cpu": "32", "memory": "128Gi"})
    data: dict[str, Any] = {
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "lab-1", "site": "lab"},
        "network": {"fabric": fabric, "bandwidthGbps": 200},
        "schedulers": schedulers,
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05},
        "nodePools": pools,
    }
    for pool in pools:
        if not pool.get("rdmaHca"):
            pool.pop("rdmaHca", None)
    if datasets:
        data["datasets"] = [{"name": "imagenet-22k", "size": "100Gi", "pools": ["gpu"]}]
    return parse_profile(data, source="tests/clusters")


async def wait_until(check: Callable[[], Awaitable[T | None]] | Callable[[], T | None], *, timeout: float = 15.0,
                     interval: float = 0.05, what: str = "condition") -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        last = result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)


class Sims:
    """Several SimClusters on the current loop, with kubeconfigs in `workdir`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.clusters: dict[str, SimCluster] = {}
        self.kubeconfigs: dict[str, Path] = {}

    async def start(self, prof: ClusterProfile, **kw: Any) -> SimCluster:
        kw.setdefault("bookmark_interval", 0.5)
        sim = SimCluster(prof, **kw)
        await sim.start()
        self.clusters[prof.name] = sim
        self.kubeconfigs[prof.name] = sim.write_kubeconfig(self.workdir / f"{prof.name}.kubeconfig")
        return sim

    async def stop(self) -> None:
        for sim in self.clusters.values():
            await sim.stop()
        self.clusters.clear()


def registration(name: str, kubeconfig: Path | None = None, *, scheduler: str = "volcano", network: str = "rdma",
                 **spec: Any) -> dict[str, Any]:
    net: dict[str, Any] = {"type": network, "bandwidthGbps": 200.0}
    if network == "rdma":
        net["rdmaKind"] = "infiniband"
    body: dict[str, Any] = {
        "apiVersion": API, "kind": "MemberCluster", "metadata": {"name": name},
        "spec": {
            "connection": {"kubeconfigPath": str(kubeconfig)} if kubeconfig is not None else {},
            "location": {"type": "onPrem", "region": "lab-1"},
            "network": net,
            "scheduler": {"name": scheduler},
            "labels": {"tier": "research"},
            "costPerGpuHour": 1.5,
            "datasets": [{"name": "imagenet-22k", "sizeBytes": 107374182400}],
        },
    }
    body["spec"].update(spec)
    return body


#: short periods for tests (HubSettings.from_mapping keys); Hub(..., key=value) adds or overrides
FAST_SETTINGS: dict[str, Any] = dict(
    unreachable_after_failures=2, watch_loss_grace_seconds=1.0, probe_interval_seconds=0.2,
    checkpoint_interval_seconds=0.1, backoff_initial_seconds=0.05, backoff_max_seconds=0.4,
    member_status_interval_seconds=0.3, member_watch_idle_seconds=5.0, member_probe_timeout_seconds=1.0,
    member_connect_timeout_seconds=1.0,
)


class Hub:
    """The hub side: store, registry, storage, HubContext and the member_sync controller."""

    def __init__(self, store: Store, *, metrics: Metrics | None = None, **settings: Any) -> None:
        self.store = store
        self.registry = hub_registry()
        self.storage = ObjectStorage(store, self.registry, autoprovision_namespaces=True)
        merged: dict[str, Any] = {**FAST_SETTINGS, **settings}
        self.metrics = metrics or Metrics()
        self.ctx = HubContext(store=store, storage=self.storage, registry=self.registry,
                              settings=HubSettings.from_mapping(merged), metrics=self.metrics)
        build_pipeline(self.ctx)
        self.rt = self.ctx.kind("MemberCluster")
        self._sync_cm: contextlib.AbstractAsyncContextManager[None] | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    @classmethod
    async def open(cls, url: str, **kw: Any) -> Hub:
        return cls(await open_store(url, prefix="/hub/"), **kw)

    async def start_sync(self) -> None:
        self._sync_cm = contextlib.asynccontextmanager(member_sync)(self.ctx)
        await self._sync_cm.__aenter__()

    async def stop_sync(self) -> None:
        if self._sync_cm is not None:
            cm, self._sync_cm = self._sync_cm, None
            await cm.__aexit__(None, None, None)

    async def serve(self) -> str:
        """Serve the hub API over plain HTTP on a loopback port (no auth: these tests are not about auth)."""
        app = build_api_app(storage=self.storage, registry=self.registry, server_name="hub", metrics=self.metrics,
                            start_storage=False)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._runner = runner
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        await self.stop_sync()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.storage.close()
        await self.store.close()

    @property
    def controller(self) -> MemberSyncController:
        controller = self.ctx.parts.running.member_sync
        assert controller is not None
        return controller

    def snapshot(self, name: str) -> ClusterSnapshot | None:
        return self.ctx.parts.members.snapshots.get(name)

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.storage.create(self.rt, copy.deepcopy(body), namespace=None)

    async def get(self, name: str) -> dict[str, Any]:
        return await self.storage.get(self.rt, namespace=None, name=name)

    async def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        obj = await self.get(name)
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return cond  # type: ignore[no-any-return]
        return None

    async def wait_condition(self, name: str, ctype: str, status: str, *, timeout: float = 15.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            cond = await self.condition(name, ctype)
            return cond if cond is not None and cond.get("status") == status else None

        return await wait_until(check, timeout=timeout, what=f"{name} {ctype}={status}")


GPU_MODELS = {"NVIDIA-A100-SXM4-80GB": "A100", "A100-SXM4-40GB": "A100", "H100-80GB-HBM3": "H100",
              "Tesla-V100-SXM2-32GB": "V100"}


def oracle_snapshot(name: str, spec: dict[str, Any], nodes: list[dict[str, Any]],
                    pods: list[dict[str, Any]]) -> ClusterSnapshot:
    """What a member's listed Nodes and Pods mean for placement, computed the plain way (an oracle
    independent of SnapshotBuilder): allocated = requests of bound pods that have not finished."""
    allocated: dict[str, Resources] = {}
    bound: dict[str, int] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        total = Resources()
        for container in pod["spec"]["containers"]:
            total = total + Resources.from_kube(container.get("resources", {}).get("requests", {}))
        allocated[node] = allocated.get(node, Resources()) + total
        job = pod["metadata"].get("labels", {}).get("federator.dev/job-uid")
        if job:
            bound[job] = bound.get(job, 0) + 1
    states = []
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        allocatable = Resources.from_kube(node["status"]["allocatable"], strict=False)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        states.append(NodeState(
            name=node["metadata"]["name"], allocatable=allocatable,
            allocated=allocated.get(node["metadata"]["name"], Resources()),
            gpu_model=GPU_MODELS[labels["nvidia.com/gpu.product"]] if allocatable.gpu else "",
            ready=ready, schedulable=not node["spec"].get("unschedulable", False),
            taints=tuple(Taint(t["key"], t.get("value", ""), t["effect"])  # type: ignore[arg-type]
                         for t in node["spec"].get("taints") or []),
            labels=labels,
            datasets=frozenset(k.removeprefix("federator.dev/dataset.") for k in labels
                               if k.startswith("federator.dev/dataset.")),
        ))
    return ClusterSnapshot.build(name=name, info=cluster_info(spec, healthy=True), nodes=states, bound_pods=bound)


async def expected_snapshot(sim: SimCluster, kubeconfig: Path, spec: dict[str, Any]) -> ClusterSnapshot:
    """The snapshot a fresh LIST of the member gives (through a client of its own and the oracle)."""
    async with await MemberClient.from_kubeconfig(kubeconfig, cluster=sim.name) as client:
        nodes = await client.list_all(NODES_KIND)
        pods = await client.list_all(PODS_KIND)
    return oracle_snapshot(sim.name, spec, nodes.items, pods.items)


def same_state(a: ClusterSnapshot | None, b: ClusterSnapshot) -> bool:
    """Same nodes (allocatable, allocated, model, readiness, taints, labels, datasets) and bound pods per job."""
    return a is not None and dict(a.nodes) == dict(b.nodes) and dict(a.bound_pods) == dict(b.bound_pods)


def describe_difference(a: ClusterSnapshot | None, b: ClusterSnapshot) -> str:
    if a is None:
        return "no snapshot"
    lines = []
    for name in sorted(set(a.nodes) | set(b.nodes)):
        x, y = a.nodes.get(name), b.nodes.get(name)
        if x is None or y is None:
            lines.append(f"{name}: hub={'present' if x else 'absent'} list={'present' if y else 'absent'}")
        elif x != y:
            fields = ("allocatable", "allocated", "gpu_model", "ready", "schedulable", "taints", "labels", "datasets")
            diff = {f: (getattr(x, f), getattr(y, f)) for f in fields if getattr(x, f) != getattr(y, f)}
            lines.append(f"{name}: (hub, list) differ in {diff}")
    if dict(a.bound_pods) != dict(b.bound_pods):
        lines.append(f"bound_pods: hub={dict(a.bound_pods)} list={dict(b.bound_pods)}")
    return "\n".join(lines[:10])


async def create_pod(sim: SimCluster, *, name: str, namespace: str = "default", node: str | None = None,
                     cpu: str = "1", memory: str = "1Gi", gpus: int = 0, duration: float | None = None,
                     job: str | None = None, epoch: str = "1", restart: str = "Never") -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    annotations = {}
    if duration is not None:
        annotations["sim.federator.dev/duration-seconds"] = str(duration)
    labels = {}
    if job:
        labels = {"federator.dev/job-uid": job, "federator.dev/epoch": epoch}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {"restartPolicy": restart, "schedulerName": "federator-test-none",
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "main", "image": "trainer:1", "resources": {"requests": requests}}]},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return await sim.storage.create(kinds.PODS, pod, namespace=namespace)


async def bind(sim: SimCluster, *, name: str, node: str, namespace: str = "default") -> None:
    await kinds.bind_pod(sim.storage, namespace=namespace, pod_name=name,
                         binding={"target": {"kind": "Node", "name": node}})


def podgroups_key(scheduler: str) -> str:
    resource = podgroup_resource(scheduler)
    return resource.key if resource is not None else ""


__all__ = [
    "API", "Hub", "NODES_KIND", "PODS_KIND", "Sims", "bind", "create_pod", "describe_difference",
    "expected_snapshot", "podgroups_key", "profile", "registration", "same_state", "wait_until",
]


@contextlib.asynccontextmanager
async def running(hub: Hub) -> AsyncIterator[Hub]:
    await hub.start_sync()
    try:
        yield hub
    finally:
        await hub.stop_sync()
