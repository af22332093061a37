"""REAL member clusters for bench/e2e.py --members kube (issue 25 item 5): two v1.36 members started by
federator/dev/kube.py (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok nodes), both with
kube-scheduler's own gang scheduling (the native adapter: a scheduling.k8s.io/v1alpha2 PodGroup, then the
pods), with the same interface as bench/e2e.py's simulated `Members`: `start()` (the registrations
directory), `kubeconfigs`, `specs`, `wait(job)` (the moment every pod of the job's gang is in a member's
store, seen by a watch of that member's pods), `cluster_of`, `stop()`.

Both the hub and the direct driver reach the members with the admin's kubeconfig (a client certificate), so
the two sides write with the same identity into the same API servers (the bench measures writes, not RBAC;
deploy/member's RBAC binds the hub in namespace default only, and the bench writes into namespace bench).
The members are started once per run and serve the hub's phases and then the direct ones: each gang has its
own name, and the pods of both finish after --pod-seconds (kwok), so neither side finds the nodes full.

`usage()` reads every member process's memory (VmRSS, VmHWM) and CPU seconds from /proc.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from gangarrivals import GangArrivals  # the script's directory, bench/, is on sys.path
from federator.dev.kube import KubeBinaries, KubeMember, kube_binaries
from federator.sim.profile import parse_profile

LABEL_JOB_NAME = "federator.dev/job-name"

_CLK_TCK = 100.0


def kube_profiles(nodes: int, pod_seconds: float) -> list[dict[str, Any]]:
    """Two members of `nodes` A100 nodes (8 GPUs, 64 cores, 250 pods each); pods finish after `pod_seconds`."""
    return [
        {"name": name, "scheduler": "native", "cost": cost, "nodes": nodes,
         "network": {"type": "ethernet", "bandwidthGbps": 100.0},
         "location": {"type": "cloud", "provider": "gcp", "region": region}}
        for name, cost, region in (("kube-bench-a", 3.0, "europe-west4"), ("kube-bench-b", 3.0, "us-central1"))
    ]


class KubeBenchMembers:
    """Two real members for the bench (see the module docstring)."""

    def __init__(self, workdir: Path, *, nodes: int, pod_seconds: float, namespace: str, pods_per_job: int,
                 binaries: KubeBinaries | None = None) -> None:
        self.workdir = workdir
        self.specs = kube_profiles(nodes, pod_seconds)
        self.pod_seconds = pod_seconds
        self.namespace = namespace
        self.pods_per_job = pods_per_job
        self.binaries = binaries
        self.members: list[KubeMember] = []
        self.kubeconfigs: dict[str, Path] = {}
        self.arrivals = GangArrivals(pods_per_job)
        #: job name -> when its gang was complete, and the cluster it landed in (the arrivals' own dicts)
        self.done, self.cluster_of = self.arrivals.done, self.arrivals.cluster_of
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[Any] = []
        self.startup_seconds: dict[str, float] = {}

    async def start(self) -> Path:
        binaries = self.binaries or await asyncio.to_thread(kube_binaries, timeout=1800)
        registrations = self.workdir / "clusters"
        registrations.mkdir(parents=True, exist_ok=True)
        for spec in self.specs:
            profile = parse_profile({
                "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": spec["name"],
                "location": {"type": "cloud", "provider": "gcp", "region": spec["location"]["region"]},
                "network": {"fabric": "ethernet", "bandwidthGbps": 100},
                "schedulers": [{"type": "native"}],
                "kubelet": {"startDelaySeconds": 0.2, "defaultRunSeconds": self.pod_seconds,
                            "terminationSeconds": 0.05},
                "nodePools": [{"name": "a100", "count": spec["nodes"], "cpu": "64", "memory": "512Gi", "gpus": 8,
                               "gpuProduct": "NVIDIA-A100-SXM4-80GB", "maxPods": 250}],
            }, source="bench/kubemembers.py")
            member = KubeMember(profile, directory=self.workdir / "kube", binaries=binaries)
            self.members.append(member)
            # started from this (the main) thread: its processes die with the thread that started them
            member.start()
            self.startup_seconds[member.name] = member.startup_seconds or 0.0
            member.kubectl("create", "namespace", self.namespace)
            self.kubeconfigs[spec["name"]] = member.admin_kubeconfig
            (registrations / f"{spec['name']}.yaml").write_text(yaml.safe_dump({
                "apiVersion": "federator.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": spec["name"]},
                "spec": {"connection": {"kubeconfigPath": str(member.admin_kubeconfig), "context": member.name},
                         "location": spec["location"], "network": spec["network"],
                         "scheduler": {"name": "native"},
                         "labels": {"tier": "research", "bench-member": spec["name"].rsplit("-", 1)[1]},
                         "costPerGpuHour": spec["cost"]},
            }))
        opened = [asyncio.Event() for _ in self.members]
        for member, event in zip(self.members, opened, strict=True):
            self._tasks.append(asyncio.get_running_loop().create_task(self._watch(member, event),
                                                                      name=f"watch:{member.name}"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 60)
        return registrations

    async def _watch(self, member: KubeMember, opened: asyncio.Event) -> None:
        from federator.clusters.client import PODS, Expired, MemberClient, MemberClientError

        client = await MemberClient.from_kubeconfig(member.admin_kubeconfig, cluster=member.name)
        self._clients.append(client)
        seen: set[str] = set()
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    listed = await client.list_all(PODS, namespace=self.namespace)
                    for pod in listed.items:
                        self._added(pod, member.name, seen)
                    resource_version = listed.resource_version
                async for batch in client.watch_batches(PODS, resource_version=resource_version,
                                                        namespace=self.namespace, on_open=opened.set):
                    for event in batch:
                        if event.resource_version:
                            resource_version = event.resource_version
                        if event.type == "ADDED":
                            self._added(event.object, member.name, seen)
            except Expired:
                resource_version = None
            except MemberClientError:
                await asyncio.sleep(0.5)

    def _added(self, pod: dict[str, Any], cluster: str, seen: set[str]) -> None:
        meta = pod.get("metadata") or {}
        key = str(meta.get("uid"))
        name = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        if not name or key in seen:
            return
        seen.add(key)
        self.arrivals.pod_added(name, cluster)

    def cpu_seconds(self) -> dict[str, dict[str, float]]:
        """member -> component -> CPU seconds (user + system) so far."""
        found: dict[str, dict[str, float]] = {}
        for member in self.members:
            for component, pid in member.processes.items():
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                found.setdefault(member.name, {})[component] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
        return found

    def memory_mib(self) -> dict[str, dict[str, tuple[float, float]]]:
        """member -> component -> (VmRSS, VmHWM) in MiB."""
        found: dict[str, dict[str, tuple[float, float]]] = {}
        for member in self.members:
            for component, pid in member.processes.items():
                values: dict[str, float] = {}
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        key, _, rest = line.partition(":")
                        if key in ("VmRSS", "VmHWM"):
                            values[key] = int(rest.split()[0]) / 1024
                except OSError:
                    continue
                found.setdefault(member.name, {})[component] = (values.get("VmRSS", 0.0), values.get("VmHWM", 0.0))
        return found

    def wait(self, name: str) -> asyncio.Future[float]:
        """Resolves to the moment every pod of job `name`'s gang was in a member (GangArrivals.wait)."""
        return self.arrivals.wait(name)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients:
            await client.close()
        for member in reversed(self.members):
            member.stop()
