"""In-memory inputs and recording fakes for the placement loop's parts, built without a hub.

The parts (controllers/decisions.py, queue_accounting.py, preemption.py, elastic.py) are handed their
collaborators through the seams of controllers/placement_ports.py; these are the fakes at those seams:

- `Jobs`: a `JobStore` over a dict of stored TrainingJobs: `write_status` applies the mutation to a copy of
  the stored job, bumps its resourceVersion and keeps it, as the hub's read-mutate-CAS does; every write
  is recorded; a job can be made to refuse writes (`failing`);
- `Members`: a recording `MemberWrites` (dispatch's delete_previous / delete_pods / recreate_pods);
- `Events`: a recording `EventSink`;
- `Views`: a `MemberViews` over per-cluster `GangIndex`es of member pods (status sync's index);
- `QueueSink`, `Queues`: the Queue cache and the Queue status writer;
- `Clock`: a settable clock;
- `training_job(...)`, `member_pods(...)`, `snapshot(...)`: stored jobs, member pods and cluster snapshots.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federator.apis.timestamps import format_time
from federator.apiserver.errors import ApiError
from federator.controllers.jobs import JobRef
from federator.controllers.placement_ports import GangPods, JobAmounts, Mutate
from federator.delegation.adapter import LABEL_EPOCH, LABEL_INDEX, LABEL_JOB_UID, LABEL_ROLE, pod_name
from federator.placement import ClusterInfo, ClusterSnapshot, NodeState, QueueQuota, Resources

GI = 2**30
T0 = 1_800_000_000.0


def stamp(at: float) -> str:
    return format_time(at)


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


def training_job(name: str, *, uid: str | None = None, namespace: str = "team", phase: str | None = None,
                 cluster: str | None = None, epoch: int = 0, workers: int = 2, gpus: int = 8,
                 low: int | None = None, high: int | None = None, replicas: int | None = None,
                 queue: str | None = None, priority: int = 0, rv: int = 1, placed_at: float | None = None,
                 created: float = T0 - 600) -> dict[str, Any]:
    """A stored TrainingJob of one role "worker" x `workers` pods of `gpus` GPUs (8 cores, 64Gi per GPU);
    elastic between `low` and `high` when given; placed at (cluster, epoch) with status.replicas `replicas`
    (and a Placed history entry at `placed_at`) when `cluster` is given."""
    role: dict[str, Any] = {"name": "worker", "replicas": workers, "template": {
        "image": "trainer:1", "resources": {"cpu": str(max(1, gpus * 8)), "memory": f"{max(1, gpus * 64)}Gi",
                                           "nvidia.com/gpu": gpus}}}
    if low is not None:
        role["minReplicas"] = low
    if high is not None:
        role["maxReplicas"] = high
    spec: dict[str, Any] = {"priority": priority, "roles": [role]}
    if queue is not None:
        spec["queue"] = queue
    status: dict[str, Any] = {"placement": {"epoch": epoch}}
    if phase is not None:
        status["phase"] = phase
    if cluster is not None:
        status["placement"]["cluster"] = cluster
        status["replicas"] = {"worker": workers if replicas is None else replicas}
        status["history"] = [{"event": "Placed", "cluster": cluster, "epoch": epoch,
                              "time": stamp(placed_at if placed_at is not None else created + 60)}]
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "generation": 1,
                         "resourceVersion": str(rv), "creationTimestamp": stamp(created)},
            "spec": spec, "status": status}


def ref_of(job: Mapping[str, Any]) -> JobRef:
    meta = job["metadata"]
    return JobRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


@dataclass
class Jobs:
    """A `JobStore` over stored jobs by uid (the same dict the part is handed as its job index)."""

    by_uid: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: every status write: (job key, the stored job after it, or None when the mutation left it alone)
    writes: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    #: uids whose writes fail (as a store error would)
    failing: set[str] = field(default_factory=set)
    reads: int = 0

    def add(self, *jobs: dict[str, Any]) -> None:
        for job in jobs:
            self.by_uid[job["metadata"]["uid"]] = job

    def stored(self, uid: str) -> dict[str, Any]:
        return self.by_uid[uid]

    async def read(self, ref: JobRef) -> dict[str, Any]:
        self.reads += 1
        job = self.by_uid.get(ref.uid)
        if job is None:
            raise ApiError(404, "NotFound", f"trainingjobs {ref.key} not found")
        return copy.deepcopy(job)

    async def write_status(self, ref: JobRef, mutate: Mutate, *, failed: str,
                           **log_fields: Any) -> tuple[bool, dict[str, Any] | None]:
        if ref.uid in self.failing:
            return False, None
        job = self.by_uid.get(ref.uid)
        if job is None:
            self.writes.append((ref.key, None))
            return True, None
        changed = mutate(copy.deepcopy(job))
        if changed is not None:
            changed["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1)
            self.by_uid[ref.uid] = changed
        self.writes.append((ref.key, copy.deepcopy(changed)))
        return True, changed


@dataclass
class Members:
    """A recording `MemberWrites`: what the part asked dispatch to do in the members."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: bool = False

    def _record(self, what: str, job: Mapping[str, Any], **args: Any) -> None:
        self.calls.append((what, job["metadata"]["uid"], args))
        if self.fail:
            raise RuntimeError("member unreachable")

    async def delete_previous(self, job: Mapping[str, Any], *, cluster: str) -> int:
        self._record("delete_previous", job, cluster=cluster)
        return 1

    async def delete_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int, names: Sequence[str]) -> int:
        self._record("delete_pods", job, cluster=cluster, epoch=epoch, names=list(names))
        return len(names)

    async def recreate_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int,
                            pods: Mapping[str, Mapping[str, str]]) -> int:
        self._record("recreate_pods", job, cluster=cluster, epoch=epoch, names=sorted(pods))
        return len(pods)

    #: uids of the gangs the member's own operator runs (operator mode)
    operated: set[str] = field(default_factory=set)

    def operated_gang(self, job: Mapping[str, Any], *, cluster: str, epoch: int | None) -> bool:
        return str(job["metadata"]["uid"]) in self.operated

    async def resize_member_copy(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> bool:
        self._record("resize_member_copy", job, cluster=cluster, epoch=epoch,
                     replicas=dict(job["status"].get("replicas") or {}))
        return True


@dataclass
class Events:
    recorded: list[tuple[str, str, str]] = field(default_factory=list)

    def record(self, obj: Mapping[str, Any], *, controller: str, reason: str, message: str, warning: bool = False,
               action: str = "") -> None:
        self.recorded.append((obj["metadata"]["name"], reason, message))

    def reasons(self) -> list[tuple[str, str]]:
        return [(name, reason) for name, reason, _ in self.recorded]


@dataclass
class GangIndex:
    """Status sync's index of one member's pods (what `GangPods` reads)."""

    pods: list[dict[str, Any]] = field(default_factory=list)

    #: (job uid, source kind key) -> the member copy (operator mode)
    copies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def gang(self, job_uid: str, epoch: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        return None, [p for p in self.pods if p["metadata"]["labels"][LABEL_JOB_UID] == job_uid
                      and p["metadata"]["labels"][LABEL_EPOCH] == str(epoch)]

    def member_copy(self, job_uid: str, source_key: str, epoch: int | None = None) -> tuple[Any, dict[str, Any]] | None:
        found = self.copies.get((job_uid, source_key))
        return (source_key, found) if found is not None else None


@dataclass
class Amounts:
    """A snapshot builder's view of what each job's pods hold per node."""

    by_job: dict[str, dict[str, Resources]] = field(default_factory=dict)

    def job_amounts(self, job_uid: str, *, epoch: int | None = None, up_to: bool = False) -> dict[str, Resources]:
        return dict(self.by_job.get(job_uid, {}))


@dataclass
class Views:
    """A `MemberViews` over per-cluster pod indexes and builders (absent: not listed yet)."""

    indexes: dict[str, GangIndex] = field(default_factory=dict)
    builders: dict[str, Amounts] = field(default_factory=dict)

    def pods(self, cluster: str) -> GangPods | None:
        return self.indexes.get(cluster)

    def amounts(self, cluster: str, snapshot: ClusterSnapshot | None) -> JobAmounts | None:
        return self.builders.get(cluster) if snapshot is not None else None


def member_pods(job: Mapping[str, Any], *, epoch: int, indices: Sequence[int], role: str = "worker",
                node: str = "n-0", phase: str = "Running", deleting: Sequence[int] = ()) -> list[dict[str, Any]]:
    """The job's member pods at `epoch` with the given indices, bound to `node`."""
    meta = job["metadata"]
    out = []
    for index in indices:
        name = pod_name(job_name=meta["name"], job_uid=meta["uid"], role=role, index=index)
        pod_meta: dict[str, Any] = {"name": name, "namespace": meta["namespace"], "uid": f"pod-{name}",
                                    "labels": {LABEL_JOB_UID: meta["uid"], LABEL_EPOCH: str(epoch),
                                               LABEL_ROLE: role, LABEL_INDEX: str(index)}}
        if index in deleting:
            pod_meta["deletionTimestamp"] = stamp(T0)
        out.append({"metadata": pod_meta, "spec": {"nodeName": node}, "status": {"phase": phase}})
    return out


def snapshot(name: str, *, nodes: int = 4, gpus: int = 8, used: Mapping[str, int] | None = None, rv: str = "1",
             bound_pods: Mapping[str, int] | None = None, model: str = "A100") -> ClusterSnapshot:
    """A healthy RDMA cluster of `nodes` nodes n-0.. with `gpus` GPUs each (`used` of them allocated by node,
    8 cores and 64Gi per used GPU)."""
    used = used or {}
    states = []
    for i in range(nodes):
        busy = used.get(f"n-{i}", 0)
        states.append(NodeState(name=f"n-{i}", allocatable=Resources(96_000, 1024 * GI, gpus, 4),
                                allocated=Resources(busy * 8000, busy * 64 * GI, busy, 0), gpu_model=model))
    info = ClusterInfo(location="on-prem", fabric="rdma", rdma_kind="infiniband", bandwidth_gbps=200.0,
                       cost_per_gpu_hour=2.0)
    return ClusterSnapshot.build(name=name, info=info, nodes=states, resource_version=rv, bound_pods=bound_pods)


@dataclass
class Queues:
    """The Queue cache as the parts read it."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    quota: dict[str, QueueQuota] | None = None
    #: namespace -> the labels of its stored Namespace (none stored: only the name label)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def quotas(self) -> dict[str, QueueQuota] | None:
        return self.quota

    def labels_of(self, namespace: str) -> dict[str, str]:
        return {**self.namespace_labels.get(namespace, {}), "kubernetes.io/metadata.name": namespace}


@dataclass
class QueueSink:
    """A recording Queue status writer."""

    wanted: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stored_status(self, name: str) -> Mapping[str, Any] | None:
        return None

    def want(self, name: str, status: dict[str, Any]) -> None:
        self.wanted[name] = status
