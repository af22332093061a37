"""Helpers for the placement / dispatch / crash tests: real SimClusters + a real hub with the job controllers.

- `sim_profile(...)`: small simulated cluster profiles (GPU + CPU pools, a gang scheduler, datasets);
- `Federation`: starts SimClusters on the test's loop (HTTPS, tokens, scheduler and kubelet running),
  writes their kubeconfigs, registers them with a hub as MemberClusters through the hub API, and reads
  member state through each member's kubeconfig (`MemberClient`);
- `submit`, `get_job`, `wait_job`: the hub's public API through the official `kubernetes.aio` client;
- `member_objects(...)`: a job's PodGroups and pods in one member, by label;
- `wait_until`: polling with a deadline (never bare sleeps);
- `HubProcess`: `federator up` as a subprocess (sqlite by default, or any --store), its JSON log read back;
  `stored_jobs(store_url)`: its TrainingJobs read from the store while it is down.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yaml
from kubernetes.aio import client as kube_client
from kubernetes.aio import config as kube_config

from federator.apiserver.storage import ObjectStorage
from federator.clusters.client import PODS, MemberClient, podgroup_resource
from federator.controllers.context import HubSettings
from federator.delegation.adapter import LABEL_JOB_UID
from federator.hub.app import HUB_STORE_PREFIX
from federator.hub.kinds import hub_registry
from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.server import SimCluster
from federator.store.open import open_store

T = TypeVar("T")
API = "federator.dev/v1alpha1"
GROUP, VERSION, PLURAL = "federator.dev", "v1alpha1", "trainingjobs"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILE = ROOT / "examples" / "resnet-ps.yaml"


def sim_profile(name: str, *, scheduler: str = "volcano", gpu_nodes: int = 4, cpu_nodes: int = 2,
                product: str = "NVIDIA-A100-SXM4-80GB", fabric: str = "infiniband",
                datasets: bool = True, gpus: int = 8, start_delay: float = 0.05,
                operators: Sequence[str] = ()) -> ClusterProfile:
    """A simulated cluster's profile; `operators` are the job-kind operators it runs (federator/sim/operators)."""
    # native is the default scheduler itself (with Kubernetes' gang scheduling on)
    schedulers = [{"type": scheduler}] if scheduler in ("default", "native") else [{"type": scheduler},
                                                                                 {"type": "default"}]
    gpu_pool: dict[str, Any] = {"name": "gpu", "count": gpu_nodes, "cpu": "64", "memory": "512Gi", "gpus": gpus,
                                "gpuProduct": product}
    if fabric != "ethernet":
        gpu_pool["rdmaHca"] = 4
    pools: list[dict[str, Any]] = [gpu_pool]
    if cpu_nodes:
        cpu_pool: dict[str, Any] = {"name": "cpu", "count": cpu_nodes, "cpu": "32", "memory": "128Gi"}
        if fabric != "ethernet":
            cpu_pool["rdmaHca"] = 4
        pools.append(cpu_pool)
    data: dict[str, Any] = {
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "lab-1", "site": "lab"},
        "network": {"fabric": fabric, "bandwidthGbps": 200},
        "schedulers": schedulers,
        "kubelet": {"startDelaySeconds": start_delay, "terminationSeconds": 0.05},
        "nodePools": pools,
    }
    if datasets:
        data["datasets"] = [{"name": "imagenet-22k", "size": "100Gi", "pools": ["gpu"]}]
    if operators:
        data["operators"] = list(operators)
    return parse_profile(data, source="tests/controllers")


def registration(name: str, kubeconfig: Path, *, scheduler: str, network: str, location: str = "onPrem",
                 datasets: bool = False, cost: float = 1.5, labels: dict[str, str] | None = None) -> dict[str, Any]:
    net: dict[str, Any] = {"type": network, "bandwidthGbps": 200.0}
    if network == "rdma":
        net["rdmaKind"] = "infiniband"
    spec: dict[str, Any] = {
        "connection": {"kubeconfigPath": str(kubeconfig)},
        "location": {"type": location, "region": "lab-1"} if location == "onPrem"
        else {"type": "cloud", "provider": "gcp", "region": "us-central1"},
        "network": net,
        "scheduler": {"name": scheduler},
        "costPerGpuHour": cost,
    }
    if datasets:
        spec["datasets"] = [{"name": "imagenet-22k", "sizeBytes": 107374182400}]
    return {"apiVersion": API, "kind": "MemberCluster",
            "metadata": {"name": name, "labels": labels if labels is not None else {"tier": "research"}}, "spec": spec}


#: the clusters of the issue: on-prem RDMA A100 with the dataset (volcano), a second RDMA A100 cluster
#: without it (kube-batch), cloud Ethernet H100 (coscheduling), a small cloud Ethernet cluster (default).
STANDARD = {
    "onprem-rdma-a100": dict(profile=dict(scheduler="volcano"), reg=dict(scheduler="volcano", network="rdma",
                                                                         datasets=True)),
    "onprem-rdma-nodata": dict(profile=dict(scheduler="kube-batch", datasets=False),
                               reg=dict(scheduler="kube-batch", network="rdma")),
    "cloud-eth-h100": dict(profile=dict(scheduler="coscheduling", product="H100-80GB-HBM3", fabric="ethernet",
                                        datasets=False),
                           reg=dict(scheduler="coscheduling", network="ethernet", location="cloud", cost=3.9)),
    "cloud-small": dict(profile=dict(scheduler="default", product="NVIDIA-L4", fabric="ethernet", datasets=False,
                                     gpu_nodes=2, cpu_nodes=1, gpus=4),
                        reg=dict(scheduler="default", network="ethernet", location="cloud", cost=0.8,
                                 labels={"tier": "dev"})),
}


#: clusters of the two newer gang schedulers, outside STANDARD (tests that start every standard cluster keep
#: their placements): Kubernetes' own gang scheduling on Ethernet, NVIDIA KAI Scheduler on InfiniBand.
NEWER_GANG_SCHEDULERS = {
    "cloud-native-gang": dict(profile=dict(scheduler="native", fabric="ethernet", datasets=False, gpu_nodes=2,
                                           cpu_nodes=1),
                              reg=dict(scheduler="native", network="ethernet", location="cloud")),
    "onprem-kai-h100": dict(profile=dict(scheduler="kai", product="H100-80GB-HBM3", datasets=False, gpu_nodes=2,
                                         cpu_nodes=1),
                            reg=dict(scheduler="kai", network="rdma")),
}
CLUSTERS = {**STANDARD, **NEWER_GANG_SCHEDULERS}


def fast_settings(state_dir: Path, **more: Any) -> HubSettings:
    """Short periods for tests; `more` are more hub settings by their flat keys (HubSettings.from_mapping, so
    an unknown or mistyped key fails the test at once)."""
    knobs: dict[str, Any] = {
        "probe_interval_seconds": 0.2, "checkpoint_interval_seconds": 0.1,
        "backoff_initial_seconds": 0.05, "backoff_max_seconds": 0.4,
        "unreachable_after_failures": 2, "watch_loss_grace_seconds": 1.0,
        "member_status_interval_seconds": 0.3, "member_watch_idle_seconds": 5.0,
        "member_probe_timeout_seconds": 1.0, "member_connect_timeout_seconds": 1.0,
        "member_request_timeout_seconds": 5.0,
        "dispatch_backoff_initial_seconds": 0.2, "dispatch_backoff_max_seconds": 1.0,
        "placement_tick_seconds": 0.2, "placement_unplaced_refresh_seconds": 0.5,
        # jobs go into namespaces nobody created (tests/controllers/test_namespaces.py covers lifecycle)
        "namespaces": "autoprovision",
    }
    knobs.update(more)
    return HubSettings.from_mapping({"state_dir": state_dir, **knobs})


async def wait_until(check: Callable[[], Awaitable[T | None]] | Callable[[], T | None], *, timeout: float = 20.0,
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


class Federation:
    """SimClusters with kubeconfigs in `workdir`, and member clients to read them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.sims: dict[str, SimCluster] = {}
        self.kubeconfigs: dict[str, Path] = {}
        self.registrations: dict[str, dict[str, Any]] = {}
        self._clients: dict[str, MemberClient] = {}

    async def start(self, names: list[str] | None = None, **overrides: dict[str, Any]) -> None:
        for name in names or list(STANDARD):
            conf = CLUSTERS[name]
            prof = {**conf["profile"], **overrides.get(name, {})}
            sim = SimCluster(sim_profile(name, **prof), bookmark_interval=0.5)
            await sim.start()
            self.sims[name] = sim
            self.kubeconfigs[name] = sim.write_kubeconfig(self.workdir / f"{name}.kubeconfig")
            self.registrations[name] = registration(name, self.kubeconfigs[name], **conf["reg"])

    def write_registrations(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for name, body in self.registrations.items():
            (directory / f"{name}.yaml").write_text(yaml.safe_dump(body))
        return directory

    async def client(self, name: str) -> MemberClient:
        if name not in self._clients:
            self._clients[name] = await MemberClient.from_kubeconfig(self.kubeconfigs[name], cluster=name)
        return self._clients[name]

    async def member_objects(self, name: str, uid: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(PodGroups, pods) of the job `uid` in cluster `name`, from the member's API."""
        client = await self.client(name)
        selector = f"{LABEL_JOB_UID}={uid}"
        pods = (await client.list_all(PODS, label_selector=selector)).items
        kind = podgroup_resource(CLUSTERS[name]["reg"]["scheduler"])  # type: ignore[index]
        groups = (await client.list_all(kind, label_selector=selector)).items if kind is not None else []
        return groups, pods

    async def where(self, uid: str) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Every cluster holding objects of job `uid` (live ones: not being deleted)."""
        found = {}
        for name in self.sims:
            groups, pods = await self.member_objects(name, uid)
            groups = [g for g in groups if not g["metadata"].get("deletionTimestamp")]
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            if groups or pods:
                found[name] = (groups, pods)
        return found

    async def fault(self, name: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST to the sim's admin fault API (/_sim/faults/...) with its bearer token."""
        sim = self.sims[name]
        import ssl

        ctx = ssl.create_default_context(cadata=sim.ca_pem.decode())
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{sim.url}/_sim/faults/{path}", json=body or {}, ssl=ctx,
                                    headers={"Authorization": f"Bearer {sim.token}"}) as response:
                assert response.status == 200, await response.text()
                result: dict[str, Any] = await response.json()
                return result

    async def stop(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        for sim in self.sims.values():
            await sim.stop()
        self.sims.clear()


class HubApi:
    """The hub's public API through the official kubernetes.aio client (a hub kubeconfig)."""

    def __init__(self, api_client: kube_client.ApiClient) -> None:
        self.api_client = api_client
        self.objects = kube_client.CustomObjectsApi(api_client)

    @classmethod
    async def connect(cls, kubeconfig: Path) -> HubApi:
        configuration = kube_client.Configuration()
        await kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return cls(kube_client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api_client.close()

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.objects.create_cluster_custom_object(GROUP, VERSION, "memberclusters",
                                                                                body)
        return result

    async def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        ns = body["metadata"]["namespace"]
        result: dict[str, Any] = await self.objects.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        return result

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                                name)
        return result

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                                  name, patch)
        return result

    async def delete(self, namespace: str, name: str) -> None:
        await self.objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    async def list(self) -> list[dict[str, Any]]:
        result = await self.objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        items: list[dict[str, Any]] = result["items"]
        return items

    async def wait_job(self, namespace: str, name: str, check: Callable[[dict[str, Any]], bool], *,
                       timeout: float = 20.0, what: str = "job state") -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            job = await self.get(namespace, name)
            return job if check(job) else None

        return await wait_until(probe, timeout=timeout, what=f"{namespace}/{name}: {what}")

    async def wait_cluster_ready(self, name: str, *, timeout: float = 20.0) -> None:
        async def ready() -> bool:
            obj = await self.objects.get_cluster_custom_object(GROUP, VERSION, "memberclusters", name)
            conditions = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or ()}
            return conditions.get("Ready") == "True"

        await wait_until(ready, timeout=timeout, what=f"cluster {name} Ready")


def example_job(name: str = "resnet-ps", namespace: str = "vision", **spec_changes: Any) -> dict[str, Any]:
    obj = yaml.safe_load(EXAMPLE_FILE.read_text())
    assert isinstance(obj, dict)
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"].update(spec_changes)
    return obj


def gpu_job(name: str, *, namespace: str = "team-a", workers: int = 2, gpus: int = 4, network: str = "any",
            models: list[str] | None = None, rdma: bool = False, **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}
    if rdma:
        resources["rdma/hca"] = 1
    placement: dict[str, Any] = {"network": network}
    if models:
        placement["gpuModels"] = models
    body = {
        "apiVersion": API, "kind": "TrainingJob", "metadata": {"name": name, "namespace": namespace},
        "spec": {"roles": [{"name": "worker", "replicas": workers,
                            "template": {"image": "trainer:1.4", "resources": resources}}],
                 "placement": placement, **spec},
    }
    return copy.deepcopy(body)


def phase(job: dict[str, Any]) -> str | None:
    return (job.get("status") or {}).get("phase")


def placement_of(job: dict[str, Any]) -> dict[str, Any]:
    return (job.get("status") or {}).get("placement") or {}


def condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


async def stored_jobs(store_url: str) -> dict[str, dict[str, Any]]:
    """The hub's TrainingJobs read straight from its sqlite file while the hub is down."""
    store = await open_store(store_url, prefix=HUB_STORE_PREFIX)
    storage = ObjectStorage(store, hub_registry())
    try:
        listing = await storage.list(storage.registry.by_kind(API, "TrainingJob"))  # type: ignore[arg-type]
        return {job["metadata"]["name"]: job for job in listing.items}
    finally:
        await storage.close()
        await store.close()


def json_log_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a process's log file (other lines, such as a traceback, are skipped)."""
    found: list[dict[str, Any]] = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


class HubProcess:
    """`federator up` in a subprocess; logs go to a file (one per start); ready once it logs 'hub ready'
    (leading or following); the admin kubeconfig is in its state dir."""

    def __init__(self, workdir: Path, clusters_dir: Path, *, store_url: str | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.clusters_dir = clusters_dir
        self.state_dir = workdir / "state"
        self.store_url = store_url or f"sqlite://{workdir / 'hub.db'}"
        self.extra_args = list(extra_args)
        self.process: asyncio.subprocess.Process | None = None
        self.runs = 0
        self.log: Path | None = None

    async def start(self, *, crash_at: str | None = None, crash_job: str | None = None) -> HubApi:
        self.runs += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / f"hub-{self.runs}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FEDERATOR_TEST_CRASH")}
        env["PYTHONUNBUFFERED"] = "1"
        if crash_at:
            env["FEDERATOR_TEST_CRASH_AT"] = crash_at
        if crash_job:
            env["FEDERATOR_TEST_CRASH_JOB"] = crash_job
        with self.log.open("wb") as sink:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "federator.cli", "up", "--store", self.store_url,
                "--state-dir", str(self.state_dir), "--listen", "127.0.0.1:0",
                "--clusters", str(self.clusters_dir), "--log-level", "info", "--namespaces", "autoprovision",
                *self.extra_args,
                cwd=str(ROOT), env=env, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink,
            )

        def ready() -> bool:
            assert self.process is not None and self.log is not None
            if self.process.returncode is not None:
                raise AssertionError(f"hub exited early ({self.process.returncode}):\n{self.log.read_text()[-4000:]}")
            return '"hub ready"' in self.log.read_text()

        await wait_until(ready, timeout=60, interval=0.1, what="the hub subprocess to be ready")
        return await HubApi.connect(self.state_dir / "admin.kubeconfig")

    async def killed(self, *, timeout: float = 60.0) -> None:
        """Wait for the hub to kill itself at its crash point."""
        assert self.process is not None
        code = await asyncio.wait_for(self.process.wait(), timeout)
        assert code == -signal.SIGKILL, f"hub exited with {code}, not SIGKILL:\n{self.tail()}"

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log is not None and self.log.exists() else ""

    def records(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """This run's JSON log lines with `event` and these fields."""
        assert self.log is not None
        return [r for r in json_log_records(self.log)
                if r.get("event") == event and all(r.get(k) == v for k, v in fields.items())]

    def logged(self, event: str, **fields: Any) -> bool:
        """True if this run's log has a JSON line with `event` and these fields."""
        return bool(self.records(event, **fields))

    def crash_logged(self, point: str) -> bool:
        return self.logged("test crash hook: killing the hub", point=point)
