"""The baseline dispatch policies of a replay, each modelled on what the real system does.

All of them dispatch into the same members (member.py: each cluster's gang
scheduler, FIFO with backfill, all-or-nothing, node by node). What each
knows of a job is what its real counterpart reads: the pod spec (GPUs,
CPU and memory per pod, pod count, and a `nvidia.com/gpu.product`
nodeSelector for a job pinned to a GPU model, which every member enforces
node by node). A job's network need and dataset are federator placement
fields; a baseline honours the network need only where its own API can say
it (below), and no baseline knows where datasets are.

- `none`: each job is written into its home cluster (the trace cluster it
  came from) at submission, and waits there.
- `first-fit`: a hub queue (FIFO with backfill); a job goes to the first
  cluster, in file order, that has its GPU model and whose summed free GPUs
  of that model (all models for an unpinned job), less those of gangs
  already waiting there, cover the gang. No node-level view, no fabric.
- `random`: at submission, a cluster drawn uniformly (seeded) among those
  with the job's GPU model; no fabric.
- `multikueue-allatonce`, `multikueue-incremental`: Kueue's MultiKueue.
  The job's Workload first needs a quota reservation in the manager cluster
  (one ClusterQueue whose GPU quota is the federation's total GPUs, as the
  MultiKueue docs advise; BestEffortFIFO, so a job that does not fit does
  not block smaller ones). Then copies go to worker clusters; "when one of
  the worker clusters admits the remote workload ... the manager removes
  all the other remote Workloads" (kueue site/content/en/docs/concepts/
  multikueue.md). All-at-once "considers all worker clusters at once and
  the first one accepting the workload is selected"; incremental "begins
  with up to 3 initial clusters and expands the pool by up to 3 clusters at
  a time" (kueue apis/config MultiKueueDispatcherModeAllAtOnce /
  MultiKueueDispatcherModeIncremental), nominating not-yet-nominated
  workers in sorted order, a new round after
  incrementalDispatcherRoundTimeout = 5 minutes
  (pkg/controller/workloaddispatcher/incrementaldispatcher.go). Admission
  in a worker here is the member's gang scheduler binding the gang; when
  several workers can admit at one instant, the seed draws which is first.
  The network need is honoured the way a Kueue operator would: a job that
  asks rdma (or ethernet) is queued to a MultiKueue setup whose workers are
  the clusters of that fabric; a job that asks any goes to all of them.
- `karmada`: the Karmada scheduler with its default replica estimator,
  `general-estimator`, "a normal estimator in terms of cluster
  ResourceSummary": for each resource the pods request, (allocatable -
  allocated - allocating) summed over the cluster / the per-pod request,
  the minimum over resources (karmada pkg/estimator/client/general.go
  getMaximumReplicasBasedOnClusterSummary; allocating = pods written there
  but not yet bound). The whole gang goes to one cluster (a propagation
  policy with a spread constraint of one cluster): the one with the most
  available replicas (ties by file order), if that covers every pod;
  otherwise the job stays in Karmada's scheduling queue and is tried again
  when anything changes. The network need and a pinned GPU model are the
  propagation policy's clusterAffinity on cluster labels (fabric, GPU
  models), the way a Karmada user would write it. The summed estimate does
  not see nodes: a gang can be sent where its pods do not fit node by node
  (it then waits in that member) or where a pinned model's GPUs are busy.
- `karmada-estimator`: the same with `karmada-scheduler-estimator`, which
  counts replicas node by node: for each node that passes the pod's node
  selector, affinity and taints, the pods its free resources hold, summed
  (KEP-521 "Cluster Accurate Replica Estimator"; pkg/estimator/server/
  estimate.go); Karmada takes the minimum of all estimators' answers, so
  the summed estimate (with allocating) still applies.
- `armada`: one global queue; Armada's scheduler picks the next gang from
  the queue (team) with the smallest share of what it currently runs
  (fair share between queues), first in first out within a queue, and
  places the whole gang "onto the same cluster at the same time"
  (armada internal/armada/configuration/constants.go GangIdAnnotation)
  by its own node-level view (Armada does not rely on kube-scheduler):
  here, the first cluster in file order whose nodes fit it now (the
  member's fit, rolled back). A gang that fits nowhere waits in the queue
  without blocking others. No data or fabric awareness.

Elastic gangs (`--elastic-share`): every baseline writes the whole gang
(max pods, minMember = its minimum) and its member admits it at the
largest size that fits then (member.py). Armada asks its node-level fit
for the minimum only (its gangMinimumCardinality); the others decide on
the whole gang as before. None of them grows a running gang.

A dispatch to a cluster that could never run the gang (too big for its
nodes even if all were empty) is a failed dispatch: the member reports
it Unschedulable for good; after FAILED_DISPATCH_NOTICE_SECONDS the
policy pulls the copy back and tries elsewhere (`none` cannot: the job
never runs). MultiKueue's copies that can never run are not failures
while another copy may win; a job none of whose workers can run it is.

Pure apart from the engine it drives; no clocks, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from federator.replay.attributes import ReplayJob
from federator.replay.backfill import BackfillQueue
from federator.replay.engine import FAILED_DISPATCH_NOTICE_SECONDS, Engine, PolicyBase
from federator.replay.member import GangCopy, Member, pod_requirements_of
from federator.sim.fit import CPU, GPU, MEMORY, PODS

__all__ = [
    "ArmadaPolicy",
    "FirstFitPolicy",
    "KarmadaPolicy",
    "MultiKueuePolicy",
    "NonePolicy",
    "RandomPolicy",
]


@dataclass(eq=False, slots=True)
class _Waiting:
    """A job in a hub-side queue."""

    job: ReplayJob
    seq: int
    shape: Hashable
    excluded: frozenset[str] = frozenset()


class _Base(PolicyBase):
    """A baseline: arrival numbering, and single-target dispatch with failed-dispatch pull-back."""

    def __init__(self) -> None:
        super().__init__()
        self._seq = 0

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def on_timer(self, payload: Any) -> None:
        if isinstance(payload, tuple) and payload and payload[0] == "unrunnable":
            self._pull_back(payload[1])

    # A single-target dispatch: the copy either runs there or is a failed dispatch.
    def _send(self, job: ReplayJob, cluster: str, *, cycle: bool = True) -> GangCopy:
        copy = self.e.dispatch(job, cluster, cycle=cycle)
        if not self.e.members[cluster].could_ever_hold(copy):
            self.e.count_failed_dispatch()
            self.e.timer(self.e.now + FAILED_DISPATCH_NOTICE_SECONDS, ("unrunnable", copy))
        return copy

    def _pull_back(self, copy: GangCopy) -> None:
        if copy.state != "pending":
            return
        self.e.delete(copy)
        self.retry(copy.job, excluded=copy.cluster)

    def retry(self, job: ReplayJob, *, excluded: str) -> None:
        """After a failed dispatch: try elsewhere (the default: the job never runs)."""
        return None


def _models_ok(member: Member, job: ReplayJob) -> bool:
    return member.has_model(job.gpu_model)


class NonePolicy(_Base):
    name = "none"

    def submit(self, job: ReplayJob) -> None:
        self._send(job, job.home, cycle=False)


class RandomPolicy(_Base):
    name = "random"

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._seed = seed
        self._excluded: dict[str, set[str]] = {}

    def _draw(self, job: ReplayJob) -> str | None:
        excluded = self._excluded.get(job.uid, set())
        choices = [m.name for m in self.e.members.values() if _models_ok(m, job) and m.name not in excluded]
        if not choices:
            return None
        digest = hashlib.blake2b(f"{self._seed}/random/{job.uid}/{len(excluded)}".encode(), digest_size=8).digest()
        return choices[int.from_bytes(digest, "big") % len(choices)]

    def submit(self, job: ReplayJob) -> None:
        cluster = self._draw(job)
        if cluster is not None:
            self._send(job, cluster, cycle=False)

    def retry(self, job: ReplayJob, *, excluded: str) -> None:
        self._excluded.setdefault(job.uid, set()).add(excluded)
        self.submit(job)


class _HubQueue(_Base):
    """A policy that keeps jobs in a hub-side queue (FIFO with backfill) until it picks a cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: BackfillQueue[_Waiting] = BackfillQueue()
        self._exclusions: dict[str, frozenset[str]] = {}
        self._changed = True

    def shape_of(self, job: ReplayJob, excluded: frozenset[str]) -> Hashable:
        return (job.gpus_per_pod, job.pods, job.gpu_model, job.network, job.cpu_milli_per_pod, job.memory_per_pod,
                excluded)

    def submit(self, job: ReplayJob) -> None:
        excluded = self._exclusions.get(job.uid, frozenset())
        self.queue.add(_Waiting(job, self._next_seq(), self.shape_of(job, excluded), excluded))
        self._changed = True

    def retry(self, job: ReplayJob, *, excluded: str) -> None:
        self._exclusions[job.uid] = self._exclusions.get(job.uid, frozenset()) | {excluded}
        self.submit(job)

    def on_finished(self, copy: GangCopy) -> None:
        self._changed = True

    def on_bound(self, copy: GangCopy) -> None:
        self._changed = True

    def choose(self, waiting: _Waiting) -> str | None:
        raise NotImplementedError

    def step(self) -> None:
        if not len(self.queue) or not self._changed:
            return

        def attempt(waiting: _Waiting) -> bool:
            cluster = self.choose(waiting)
            if cluster is None:
                return False
            self._send(waiting.job, cluster)
            return True

        self.queue.run_pass(attempt)
        # What this pass dispatched only took capacity: nothing new to try until something else changes.
        self._changed = False


class FirstFitPolicy(_HubQueue):
    name = "first-fit"

    def choose(self, waiting: _Waiting) -> str | None:
        job = waiting.job
        for member in self.e.members.values():
            if member.name in waiting.excluded or not _models_ok(member, job):
                continue
            if member.free_gpus(job.gpu_model) >= job.gpus:
                return member.name
        return None


class KarmadaPolicy(_HubQueue):
    def __init__(self, *, estimator: bool) -> None:
        super().__init__()
        self.estimator = estimator
        self.name = "karmada-estimator" if estimator else "karmada"

    def _affinity(self, member: Member, job: ReplayJob) -> bool:
        if job.network != "any" and member.spec.fabric != job.network:
            return False
        return _models_ok(member, job)

    def _general(self, member: Member, job: ReplayJob) -> int:
        per_pod = {CPU: job.cpu_milli_per_pod, MEMORY: job.memory_per_pod, GPU: job.gpus_per_pod, PODS: 1}
        replicas: int | None = None
        for resource, request in per_pod.items():
            available = member.capacity[resource] - member.used[resource] - member.waiting[resource]
            if available <= 0:
                return 0
            n = available // request
            replicas = n if replicas is None else min(replicas, n)
        return replicas or 0

    def _accurate(self, member: Member, job: ReplayJob) -> int:
        """karmada-scheduler-estimator: per node that admits the pod, the pods its free resources hold."""
        return member.node_level_replicas(pod_requirements_of(job))

    def choose(self, waiting: _Waiting) -> str | None:
        job = waiting.job
        best: tuple[int, str] | None = None
        for member in self.e.members.values():
            if member.name in waiting.excluded or not self._affinity(member, job):
                continue
            replicas = self._general(member, job)
            if self.estimator and replicas >= job.pods:
                replicas = min(replicas, self._accurate(member, job))
            if replicas >= job.pods and (best is None or replicas > best[0]):
                best = (replicas, member.name)
        return best[1] if best else None


class ArmadaPolicy(_Base):
    name = "armada"

    def __init__(self) -> None:
        super().__init__()
        self.queues: dict[str, BackfillQueue[_Waiting]] = {}
        self.usage: dict[str, int] = {}
        self._changed = True
        # (member, shape) -> member usage version at which the shape did not fit there
        self._misfit: dict[tuple[str, Hashable], int] = {}

    def submit(self, job: ReplayJob) -> None:
        queue = self.queues.get(job.team)
        if queue is None:
            self.queues[job.team] = queue = BackfillQueue()
            self.usage.setdefault(job.team, 0)
        queue.add(_Waiting(job, self._next_seq(), (job.gpus_per_pod, job.pods, job.gpu_model,
                                                     job.cpu_milli_per_pod, job.memory_per_pod, job.low)))
        self._changed = True

    def on_bound(self, copy: GangCopy) -> None:
        self.usage[copy.job.team] = self.usage.get(copy.job.team, 0) + copy.gpus
        self._changed = True

    def on_finished(self, copy: GangCopy) -> None:
        self.usage[copy.job.team] -= copy.gpus
        self._changed = True

    def _place(self, waiting: _Waiting) -> bool:
        job = waiting.job
        requirements = pod_requirements_of(job)
        # An elastic gang needs its minimum now (Armada's gangMinimumCardinality); its member binds the rest that fit.
        gpus = job.low * job.gpus_per_pod if job.elastic else job.gpus
        for member in self.e.members.values():
            key = (member.name, waiting.shape)
            version = member.ledger_version
            if self._misfit.get(key) == version:
                continue
            if member.free_gpus(job.gpu_model, minus_waiting=False) < gpus or not member.fits_now(
                requirements, job.low
            ):
                self._misfit[key] = version
                continue
            self.e.dispatch(job, member.name)
            return True
        return False

    def step(self) -> None:
        if not self._changed:
            return
        failed: set[Hashable] = set()
        teams = sorted(t for t, q in self.queues.items() if len(q))
        while teams:
            # The queue with the smallest current use goes next (ties by name); its oldest gang that may fit.
            team = min(teams, key=lambda t: (self.usage.get(t, 0), t))
            placed = self.queues[team].offer_one(self._place, skip=failed)
            if placed is None:
                teams.remove(team)
            elif not len(self.queues[team]):
                teams.remove(team)
        self._changed = False


@dataclass(eq=False, slots=True)
class _Dispatch:
    """A MultiKueue job admitted by the manager: its copies, nominated workers, and the round."""

    job: ReplayJob
    workers: tuple[str, ...]
    nominated: list[str] = field(default_factory=list)
    copies: dict[str, GangCopy] = field(default_factory=dict)
    won: bool = False


class MultiKueuePolicy(_Base):
    ROUND_SECONDS = 300.0
    BATCH = 3

    def __init__(self, *, incremental: bool) -> None:
        super().__init__()
        self.incremental = incremental
        self.name = "multikueue-incremental" if incremental else "multikueue-allatonce"
        self.manager: BackfillQueue[_Waiting] = BackfillQueue()
        self.quota = 0
        self.reserved = 0
        self._active: dict[str, _Dispatch] = {}
        self._changed = True

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        self.quota = engine.total_gpus

    def _workers(self, job: ReplayJob) -> tuple[str, ...]:
        names = [m.name for m in self.e.members.values() if job.network in ("any", m.spec.fabric)]
        return tuple(sorted(names)) if self.incremental else tuple(names)

    def submit(self, job: ReplayJob) -> None:
        self.manager.add(_Waiting(job, self._next_seq(), job.gpus))
        self._changed = True

    def on_finished(self, copy: GangCopy) -> None:
        # The quota reserved for its whole gang (an elastic gang may run below its max).
        self.reserved -= copy.written * copy.job.gpus_per_pod
        self._active.pop(copy.job.uid, None)
        self._changed = True

    def on_bound(self, copy: GangCopy) -> None:
        dispatch = self._active[copy.job.uid]
        dispatch.won = True
        for cluster, other in dispatch.copies.items():
            if other is not copy and other.state == "pending":
                self.e.delete(other)

    def _nominate(self, dispatch: _Dispatch) -> None:
        remaining = [w for w in dispatch.workers if w not in dispatch.nominated]
        batch = remaining[: self.BATCH] if self.incremental else remaining
        for cluster in batch:
            dispatch.nominated.append(cluster)
            dispatch.copies[cluster] = self.e.dispatch(dispatch.job, cluster, cycle=False)
        if len(dispatch.nominated) == len(dispatch.workers):
            members = self.e.members
            if not any(members[c].could_ever_hold(copy) for c, copy in dispatch.copies.items()):
                self.e.count_failed_dispatch()
        elif self.incremental:
            self.e.timer(self.e.now + self.ROUND_SECONDS, ("round", dispatch.job.uid))

    def on_timer(self, payload: Any) -> None:
        if isinstance(payload, tuple) and payload[0] == "round":
            dispatch = self._active.get(payload[1])
            if dispatch is not None and not dispatch.won:
                self._nominate(dispatch)
            return
        super().on_timer(payload)

    def step(self) -> None:
        if not len(self.manager) or not self._changed:
            return

        def reserve(waiting: _Waiting) -> bool:
            job = waiting.job
            if self.reserved + job.gpus > self.quota:
                return False
            self.reserved += job.gpus
            dispatch = _Dispatch(job, self._workers(job))
            self._active[job.uid] = dispatch
            self._nominate(dispatch)
            return True

        self.manager.run_pass(reserve)
        self._changed = False

