"""One failover drill, end to end: plan, fault, observe, lift, settle, measure, report.

`run_drill(hub, options, ...)` is what `federator drill` (cli/drill.py) and
bench/failover.py run:

1. **Plan.** It reads the hub's failover plan of each faulted cluster
   (`memberclusters/NAME/failoverplan`, for=drain for a drain, else loss):
   where each gang would go now, changing nothing.
2. **Baseline.** One sample (below) before anything is broken: the gangs
   placed in the faulted cluster are the *affected* ones (for a node failure:
   those with a pod on the failed node), every job not yet finished is
   *acknowledged*.
3. **Fault.** A cluster is *simulated* when `<state-dir>/sim/<cluster>.kubeconfig`
   exists (as `federator up` writes it) and no `--member-kubeconfig` was
   given; the drill then injects the fault through the simulator's fault
   admin API (/_sim/faults): a partition `from` the identity in that
   kubeconfig, which is the hub's (the fence agent and the drill's own reads
   of that cluster, done with `<cluster>-agent.kubeconfig`, still get
   answers); an outage (the API server refuses connections); the failure of
   the node holding most of this hub's pods. The simulator lifts a partition
   or an outage by itself after the duration too, so a drill that dies
   leaves nothing broken. Otherwise the cluster is *real*: the drill prints
   what the operator must do and observes. A drain is always done by the
   drill, through the hub API, as `federator cluster drain` does it.
4. **Observe.** Every `sample_interval` (0.5 s) it lists the hub's
   TrainingJobs and MemberClusters and every observed member's pods labelled
   `federator.dev/hub`. A member that does not answer is unknown for that
   sample (`unansweredReads`), never zero pods. A live progress line says how
   it goes.
5. **Lift** after the duration (a drain: once it completes or is stuck, at
   most after the duration; lifting uncordons the cluster), then wait,
   bounded by `settle_timeout`, until the federation is quiet: the faulted
   clusters Ready and not Lost, no affected gang in transit (Placed,
   Admitted), no copy of an affected job left where it no longer belongs,
   and nothing changing for two seconds.
6. **Measure** (all times from the moment the fault was injected, at the
   resolution of the samples):
   - detectSeconds: until every faulted cluster's Lost condition is True (a
     drain: until the first gang left; a node failure: until the first
     affected gang changed);
   - what became of each affected gang, counted in exactly one figure, so
     that they sum to gangsAffected: gangsMoved (placed in another cluster
     at a higher epoch), gangsUnplaceable (left its cluster and placed
     nowhere; a drain: listed as unplaceable by the drain), gangsRodeOut (in
     its cluster at its epoch at the end, its pods untouched: a fault under
     the loss grace, or onClusterLoss wait; or succeeded there meanwhile),
     gangsRestartedInPlace (placed again in its own cluster at a higher
     epoch, or a pod of it seen there that was not there at the baseline),
     gangsLost (vanished, or ended Failed, by its own failover policy too).
     A gang in none of them (its final state fits no failover, e.g. in another
     cluster at its old epoch) is `unaccounted`: the report's first note
     names it and the text says "(accounted for N of M affected: must be all)";
   - redispatchSeconds / runningAgainSeconds: until every moved gang (placed
     in another cluster at a higher epoch) was placed / running there;
   - maxConcurrentCopies: the most clusters one job had running pods in at
     one sample; duplicates: jobs seen running in two clusters at once;
   - jobsLost: acknowledged jobs that vanished, or ended Failed for any
     reason but their own failover policy (ClusterLost: onClusterLoss fail;
     RequeueLimit: maxRequeues);
   - stalePodsKilled: the larger of the pods the jobs' StaleCopyKilled
     history entries name (the hub's GC on return) and the affected jobs'
     pods seen to disappear from a faulted cluster (the fence agent's kills;
     not counted for a drain, which deletes old copies on purpose);
   - planMatched: the share of moved gangs that went where the plan said (1
     when none moved; null without a plan);
   - per gang placed again (moved, or restarted in place at a higher epoch):
     restoredFromStep, the step of the checkpoint its new copy restores from
     (status.checkpoint of an earlier copy, the FEDERATOR_RESTORE_FROM it was
     given), as last seen before that copy reported its own.

It never deletes or changes a job, and never prints or logs a credential
(the hub identity's token goes only to the simulator that issued it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from federator.apis.checkpoint import CheckpointReport, restore_point
from federator.apis.drillreport import FIGURES, MAX_GANGS, OUTCOME_BUCKETS, accounted
from federator.apis.timestamps import format_time, parse_time
from federator.apis.views import Body
from federator.cli.common import UserError
from federator.cli.simfault import FAULTS_PATH, Target, call, read_kubeconfig
from federator.clusters.client import NODES, PODS, ClientTimeouts, MemberClient, MemberClientError
from federator.delegation.adapter import LABEL_EPOCH, LABEL_HUB, LABEL_JOB_UID
from federator.cli.hubclient import GROUP_PATH, HubClient, HubError, JSONObject, clusters_path

__all__ = [
    "DrillError",
    "DrillOptions",
    "DrillResult",
    "Observation",
    "figures",
    "plan_path",
    "render_report",
    "report_name",
    "run_drill",
]

ACTIVE_PHASES = frozenset({"Placed", "Admitted", "Running"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
IN_TRANSIT_PHASES = frozenset({"Placed", "Admitted"})
#: Failed reasons that are the job's own failover policy, not a loss.
POLICY_FAILURES = frozenset({"ClusterLost", "RequeueLimit"})
LOSS_FAULTS = frozenset({"partition", "outage"})
#: a drain's maxConcurrent when the drill is not told (the MemberCluster default)
DEFAULT_DRAIN_CONCURRENCY = 5
_MERGE_PATCH = "application/merge-patch+json"
_STALE_PODS = re.compile(r"\((\d+) pods?\)")
#: the federation must look the same for this long before the drill calls it settled
_QUIET_SECONDS = 2.0
#: and the hub must have had this long, after the fault was lifted, to see the cluster back and act on what
#: it finds there (e.g. a gang whose pods the fence agent deleted)
_AFTER_LIFT_SECONDS = 5.0
#: the baseline (the sample before the fault) is read again, this long at most, until the hub and every
#: observed faulted cluster answered it: a kill is counted only for a pod seen before it went
_BASELINE_PATIENCE_SECONDS = 30.0


class DrillError(UserError):
    """The drill could not do what it had to (a fault the simulator refused, the hub gone): exit 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


@dataclass(frozen=True, slots=True)
class DrillOptions:
    clusters: tuple[str, ...]
    fault: str
    duration: float
    state_dir: Path
    member_kubeconfig: Path | None = None
    settle_timeout: float = 120.0
    max_concurrent: int | None = None
    sample_interval: float = 0.5
    read_timeout: float = 3.0
    #: the `cluster` of the report as the user named it (e.g. "all"); default: the clusters joined by commas
    label: str = ""


# ---------------------------------------------------------------- what one sample holds


@dataclass(frozen=True, slots=True)
class PodView:
    cluster: str
    job_uid: str
    epoch: str
    uid: str
    node: str
    phase: str
    deleting: bool

    @property
    def running(self) -> bool:
        return self.phase == "Running" and not self.deleting

    @property
    def alive(self) -> bool:
        return self.phase not in ("Succeeded", "Failed") and not self.deleting


@dataclass(frozen=True, slots=True)
class Sample:
    #: seconds since the fault was injected (negative before)
    at: float
    #: job uid -> TrainingJob (None: the hub did not answer)
    jobs: Mapping[str, JSONObject] | None
    #: cluster -> MemberCluster (None: the hub did not answer)
    clusters: Mapping[str, JSONObject] | None
    #: cluster -> its hub pods (None: unknown this time); clusters not observed at all are absent
    pods: Mapping[str, Sequence[PodView] | None]


def _placement(job: Mapping[str, Any]) -> tuple[str | None, int]:
    placement = (job.get("status") or {}).get("placement") or {}
    cluster = placement.get("cluster")
    epoch = placement.get("epoch")
    return (cluster if isinstance(cluster, str) and cluster else None,
            epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0)


def _phase(job: Mapping[str, Any]) -> str:
    return Body(job).phase or "Pending"


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def _policy(job: Mapping[str, Any]) -> str:
    failover = (job.get("spec") or {}).get("failover") or {}
    policy = failover.get("onClusterLoss") if isinstance(failover, Mapping) else None
    return policy if policy in ("requeue", "fail", "wait") else "requeue"


def _ref(job: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = Body(job)
    return meta.namespace, meta.name, meta.uid


# ---------------------------------------------------------------- the gangs and what became of them


@dataclass(slots=True)
class AffectedGang:
    uid: str
    namespace: str
    name: str
    from_cluster: str
    from_epoch: int
    policy: str
    planned_target: str | None = None
    #: the (phase, cluster, epoch) at the baseline
    baseline: tuple[str, str | None, int] = ("", None, 0)
    left_at: float | None = None
    changed_at: float | None = None
    placed_at: float | None = None
    placed_cluster: str | None = None
    running_at: float | None = None
    #: uids of the gang's live pods in from_cluster at the baseline (None: that cluster was not read)
    baseline_pods: frozenset[str] | None = None
    #: first time a pod of the gang not in baseline_pods was seen in from_cluster (a restart in place)
    restarted_at: float | None = None
    #: the checkpoint its copy at a higher epoch restores from (status.checkpoint of an earlier copy), as
    #: last seen while that copy had not reported its own
    restored: CheckpointReport | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def note_restore_point(self, job: Mapping[str, Any]) -> None:
        """Keep the checkpoint the job's current copy restores from, when that copy is a later one."""
        cluster, epoch = _placement(job)
        point = restore_point(job, epoch) if cluster is not None and epoch > self.from_epoch else None
        if point is not None:
            self.restored = point


class Observation:
    """Everything the samples showed, folded in as they arrive (no sample is kept)."""

    def __init__(self, *, faulted: Sequence[str], fault: str) -> None:
        self.faulted = tuple(faulted)
        self.fault = fault
        self.affected: dict[str, AffectedGang] = {}
        #: uid -> (namespace, name) of the jobs not finished at the baseline
        self.acknowledged: dict[str, tuple[str, str]] = {}
        self.samples = 0
        self.unanswered_reads = 0
        self.max_copies = 0
        self.duplicates: set[str] = set()
        self.lost_at: float | None = None
        self.hub_partitioned_seen = False
        self.last_drain: dict[str, Mapping[str, Any]] = {}
        self._seen_pods: dict[str, set[str]] = {c: set() for c in self.faulted}
        self.killed_pods: set[str] = set()
        self.latest: Sample | None = None
        self._last_state: dict[str, tuple[str, str | None, int]] | None = None
        self.last_change: float = -math.inf
        #: seconds since the fault when it was lifted (None: not yet)
        self.lifted_at: float | None = None

    # ------------------------------------------------------------ baseline

    def set_baseline(self, sample: Sample, *, node: str | None = None) -> None:
        """The affected gangs and the acknowledged jobs, from the sample before the fault."""
        if sample.jobs is None:
            raise DrillError("the hub did not list its jobs before the fault; nothing was changed")
        faulted = set(self.faulted)
        on_node: set[str] = set()
        if node is not None:
            for pods in sample.pods.values():
                on_node |= {p.job_uid for p in pods or () if p.node == node and p.alive}
        for uid, job in sample.jobs.items():
            namespace, name, _ = _ref(job)
            phase = _phase(job)
            if phase not in TERMINAL_PHASES:
                self.acknowledged[uid] = (namespace, name)
            cluster, epoch = _placement(job)
            if phase not in ACTIVE_PHASES or cluster not in faulted:
                continue
            if node is not None and uid not in on_node:
                continue
            read = sample.pods.get(cluster)
            own = None if read is None else frozenset(p.uid for p in read if p.job_uid == uid and p.alive)
            self.affected[uid] = AffectedGang(uid=uid, namespace=namespace, name=name, from_cluster=cluster,
                                              from_epoch=epoch, policy=_policy(job), baseline=(phase, cluster, epoch),
                                              baseline_pods=own)
        self.add(sample)

    # ------------------------------------------------------------ every sample

    def add(self, sample: Sample) -> None:
        self.samples += 1
        self.latest = sample
        self.unanswered_reads += sum(1 for pods in sample.pods.values() if pods is None)
        self._copies(sample)
        self._stale(sample)
        if sample.at >= 0:
            if sample.clusters is not None:
                self._clusters(sample)
            if sample.jobs is not None:
                self._gangs(sample)
            self._restarts(sample)
        if sample.jobs is not None:
            state = {uid: (_phase(job), *_placement(job)) for uid, job in sample.jobs.items()
                     if uid in self.affected}
            if state != self._last_state:
                self._last_state = state
                self.last_change = sample.at

    def _copies(self, sample: Sample) -> None:
        where: dict[str, set[str]] = {}
        for cluster, pods in sample.pods.items():
            for pod in pods or ():
                if pod.running and pod.job_uid:
                    where.setdefault(pod.job_uid, set()).add(cluster)
        for uid, clusters in where.items():
            self.max_copies = max(self.max_copies, len(clusters))
            if len(clusters) > 1:
                self.duplicates.add(uid)

    def _stale(self, sample: Sample) -> None:
        for cluster in self.faulted:
            pods = sample.pods.get(cluster)
            if pods is None:
                continue
            current = {p.uid for p in pods if p.job_uid in self.affected and not p.deleting}
            self.killed_pods |= self._seen_pods[cluster] - current
            self._seen_pods[cluster] |= current

    def _clusters(self, sample: Sample) -> None:
        assert sample.clusters is not None
        lost = []
        for name in self.faulted:
            condition = _condition(sample.clusters.get(name) or {}, "Lost")
            lost.append(condition.get("status") == "True")
            if condition.get("status") == "True" and condition.get("reason") == "HubPartitioned":
                self.hub_partitioned_seen = True
            drain = ((sample.clusters.get(name) or {}).get("status") or {}).get("drain")
            if isinstance(drain, Mapping):
                self.last_drain[name] = drain
        if all(lost) and self.lost_at is None:
            self.lost_at = sample.at

    def _gangs(self, sample: Sample) -> None:
        assert sample.jobs is not None
        for gang in self.affected.values():
            job = sample.jobs.get(gang.uid)
            if job is None:
                continue
            phase = _phase(job)
            cluster, epoch = _placement(job)
            if gang.changed_at is None and (phase, cluster, epoch) != gang.baseline:
                gang.changed_at = sample.at
            if gang.left_at is None and (cluster, epoch) != (gang.from_cluster, gang.from_epoch):
                gang.left_at = sample.at
            gang.note_restore_point(job)
            elsewhere = cluster is not None and cluster != gang.from_cluster and epoch > gang.from_epoch
            if elsewhere and gang.placed_at is None:
                gang.placed_at, gang.placed_cluster = sample.at, cluster
            if elsewhere and gang.running_at is None and phase in ("Running", "Succeeded"):
                gang.running_at = sample.at

    def _restarts(self, sample: Sample) -> None:
        """A pod of an affected gang in its own cluster that was not there at the baseline: restarted in place."""
        for gang in self.affected.values():
            if gang.restarted_at is not None or not gang.baseline_pods:
                continue
            pods = sample.pods.get(gang.from_cluster)
            if any(p.job_uid == gang.uid and p.alive and p.uid not in gang.baseline_pods for p in pods or ()):
                gang.restarted_at = sample.at

    # ------------------------------------------------------------ summaries

    @property
    def moved(self) -> int:
        return sum(1 for g in self.affected.values() if g.placed_at is not None)

    @property
    def running_again(self) -> int:
        return sum(1 for g in self.affected.values() if g.running_at is not None)

    def drain_finished(self) -> bool:
        return bool(self.last_drain) and all(
            (self.last_drain.get(c) or {}).get("phase") in ("Complete", "Stuck") for c in self.faulted)

    def settled(self, *, loss_fault: bool) -> tuple[bool, str]:
        """(quiet, what is still going on) after the fault was lifted."""
        sample = self.latest
        if sample is None or sample.jobs is None or sample.clusters is None:
            return False, "the hub did not answer the last sample"
        for name in self.faulted:
            mc = sample.clusters.get(name) or {}
            if _condition(mc, "Ready").get("status") != "True":
                return False, f"{name} is not Ready yet"
            if loss_fault and _condition(mc, "Lost").get("status") == "True":
                return False, f"{name} is still Lost"
        for gang in self.affected.values():
            job = sample.jobs.get(gang.uid)
            if job is not None and _phase(job) in IN_TRANSIT_PHASES:
                return False, f"{gang.key} is {_phase(job)}"
        for cluster, pods in sample.pods.items():
            if pods is None:
                return False, f"{cluster} did not answer"
            for pod in pods:
                job = sample.jobs.get(pod.job_uid)
                if pod.job_uid not in self.affected or job is None or not pod.alive:
                    continue
                where, epoch = _placement(job)
                if where != cluster or pod.epoch != str(epoch):
                    return False, f"an old copy of {self.affected[pod.job_uid].key} is still in {cluster}"
        if sample.at - self.last_change < _QUIET_SECONDS:
            return False, "gangs are still changing"
        if self.lifted_at is not None and sample.at - self.lifted_at < _AFTER_LIFT_SECONDS:
            return False, "the hub is taking the cluster back"
        return True, ""


# ---------------------------------------------------------------- reading hub and members


def _unanswered(sample: Sample, faulted: Sequence[str]) -> list[str]:
    """What did not answer a sample: "the hub" (its job list) and the observed faulted clusters."""
    missing = ["the hub"] if sample.jobs is None else []
    return missing + [c for c in faulted if c in sample.pods and sample.pods[c] is None]


def plan_path(cluster: str) -> str:
    return clusters_path(cluster) + "/failoverplan"


DRILLREPORTS_PATH = f"{GROUP_PATH}/drillreports"
JOBS_PATH = f"{GROUP_PATH}/trainingjobs"


@dataclass
class MemberReader:
    """Read access to one member's pods (and nodes), for the samples."""

    cluster: str
    kubeconfig: Path
    #: True when this is the hub's own identity (a partition `from` the hub cuts it off too)
    hub_identity: bool
    client: MemberClient | None = None

    async def open(self, timeout: float) -> None:
        self.client = await MemberClient.from_kubeconfig(
            self.kubeconfig, cluster=self.cluster,
            timeouts=ClientTimeouts(connect=min(2.0, timeout), request=timeout, probe=timeout))

    async def pods(self) -> list[PodView]:
        assert self.client is not None
        items = (await self.client.list_all(PODS, label_selector=LABEL_HUB)).items
        views = []
        for pod in items:
            body = Body(pod)
            labels = body.labels
            views.append(PodView(
                cluster=self.cluster, job_uid=str(labels.get(LABEL_JOB_UID) or ""),
                epoch=str(labels.get(LABEL_EPOCH) or ""), uid=body.uid,
                node=str(body.spec.get("nodeName") or ""), phase=body.phase or "Pending", deleting=body.deleting))
        return views

    async def first_node(self) -> str | None:
        assert self.client is not None
        nodes = (await self.client.list_all(NODES)).items
        names = sorted(Body(n).name for n in nodes)
        return names[0] if names else None

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None


class Sampler:
    """Takes a Sample every `interval` seconds while running; `fresh` is set after each one."""

    def __init__(self, hub: HubClient, readers: Mapping[str, MemberReader], observation: Observation, *,
                 interval: float, timeout: float, on_sample: Callable[[Sample], None] | None = None) -> None:
        self.hub = hub
        self.readers = readers
        self.observation = observation
        self.interval = interval
        self.timeout = timeout
        self.on_sample = on_sample
        #: the monotonic time the fault was injected (None: not yet)
        self.t0: float | None = None
        #: clusters whose reader must not be used now (its identity is cut off by the fault)
        self.blocked: set[str] = set()
        self.fresh = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self.t0 if self.t0 is not None else -1e-3

    async def take(self) -> Sample:
        at = self.now()

        async def hub_list(path: str) -> dict[str, JSONObject] | None:
            try:
                listing = await asyncio.wait_for(self.hub.request("GET", path), self.timeout)
            except (HubError, TimeoutError):
                return None
            items = [i for i in listing.get("items") or () if isinstance(i, dict)]
            by_uid = path == JOBS_PATH
            return {Body(i).uid if by_uid else Body(i).name: i for i in items}

        async def member(reader: MemberReader) -> list[PodView] | None:
            if reader.cluster in self.blocked:
                return None
            try:
                return await asyncio.wait_for(reader.pods(), self.timeout + 1)
            except (MemberClientError, TimeoutError):
                return None

        hub_reads = asyncio.gather(hub_list(JOBS_PATH), hub_list(clusters_path()))
        member_reads = asyncio.gather(*(member(r) for r in self.readers.values()))
        (jobs, clusters), pods = await asyncio.gather(hub_reads, member_reads)
        return Sample(at=at, jobs=jobs, clusters=clusters, pods=dict(zip(self.readers, pods, strict=True)))

    async def run(self) -> None:
        next_at = time.monotonic()
        while True:
            sample = await self.take()
            self.observation.add(sample)
            if self.on_sample is not None:
                self.on_sample(sample)
            self.fresh.set()
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    async def next_sample(self) -> None:
        self.fresh.clear()
        await self.fresh.wait()


# ---------------------------------------------------------------- faults


@dataclass
class SimFaults:
    """The simulator's fault admin API of one cluster (through the hub identity's kubeconfig)."""

    cluster: str
    target: Target

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(call, self.target, method, f"{FAULTS_PATH}{path}", body)
        except UserError as e:
            raise DrillError(f"cluster {self.cluster}: {e}") from None


@dataclass
class Injected:
    """What was broken, so that it can be lifted (also on Ctrl-C)."""

    fault: str
    sims: dict[str, SimFaults] = field(default_factory=dict)
    node: str | None = None
    #: cluster -> its spec.cordoned before a drain
    cordoned_before: dict[str, bool] = field(default_factory=dict)
    lifted: bool = False


async def inject(hub: HubClient, options: DrillOptions, sims: Mapping[str, SimFaults], *,
                 node: str | None) -> Injected:
    injected = Injected(fault=options.fault, node=node)
    seconds = max(1.0, options.duration)
    if options.fault == "drain":
        for cluster in options.clusters:
            current = await hub.request("GET", clusters_path(cluster))
            injected.cordoned_before[cluster] = (current.get("spec") or {}).get("cordoned") is True
            drain = {"maxConcurrent": options.max_concurrent or DEFAULT_DRAIN_CONCURRENCY}
            await hub.request("PATCH", clusters_path(cluster), body={"spec": {"cordoned": True, "drain": drain}},
                              content_type=_MERGE_PATCH)
        return injected
    for cluster, sim in sims.items():
        if options.fault == "partition":
            # `from` the hub's identity: the token of the kubeconfig the hub reaches this cluster with
            await sim.call("POST", "/partition", {"seconds": seconds, "from": sim.target.token})
        elif options.fault == "outage":
            await sim.call("POST", "/outage", {"seconds": seconds, "mode": "refuse"})
        elif options.fault == "node-failure":
            await sim.call("POST", "/node-failure", {"node": node})
        injected.sims[cluster] = sim
    return injected


async def lift(hub: HubClient, injected: Injected) -> list[str]:
    """Undo the fault; the problems met (each a note), never an exception."""
    if injected.lifted:
        return []
    injected.lifted = True
    problems: list[str] = []
    for cluster, sim in injected.sims.items():
        try:
            if injected.fault == "partition":
                await sim.call("DELETE", "/partition")
            elif injected.fault == "outage":
                await sim.call("DELETE", "/outage")
            elif injected.fault == "node-failure":
                await sim.call("POST", "/node-recover", {"node": injected.node})
        except DrillError as e:
            problems.append(f"could not lift the fault: {e}")
    for cluster, cordoned in injected.cordoned_before.items():
        try:
            await hub.request("PATCH", clusters_path(cluster), body={"spec": {"cordoned": cordoned, "drain": None}},
                              content_type=_MERGE_PATCH)
        except HubError as e:
            problems.append(f"could not end the drain of {cluster} (run `federator cluster uncordon {cluster}`): {e}")
    return problems


def operator_instructions(options: DrillOptions, *, node: str | None, server: str) -> str:
    cluster = options.clusters[0]
    held = f"{options.duration:g}s"
    if options.fault == "partition":
        return (f"{cluster} is a real cluster: cut the hub off from its API server ({server}) NOW, e.g. drop the "
                f"hub's traffic to it at a firewall, while the member's own fence agent still reaches it; restore "
                f"the link after {held}. The drill observes meanwhile, counting from now.")
    if options.fault == "outage":
        return (f"{cluster} is a real cluster: stop its API server ({server}) NOW (its kubelets keep running) and "
                f"start it again after {held}. The drill observes meanwhile, counting from now.")
    where = f"node {node}" if node else "the node that runs most of this hub's pods"
    return (f"{cluster} is a real cluster: take {where} down NOW (power it off or cut its network) and bring it "
            f"back after {held}. The drill observes meanwhile, counting from now.")


# ---------------------------------------------------------------- the report


@dataclass
class DrillResult:
    report: JSONObject
    plans: dict[str, JSONObject]
    stored_name: str | None = None


def _round(value: float | None) -> float | None:
    return None if value is None else round(max(0.0, value), 2)


def _failed_reason(job: Mapping[str, Any]) -> str:
    return str(_condition(job, "Failed").get("reason") or "")


def _stale_from_history(job: Mapping[str, Any], *, faulted: Iterable[str], since: dt.datetime) -> int:
    total = 0
    clusters = set(faulted)
    for entry in (job.get("status") or {}).get("history") or ():
        if not isinstance(entry, Mapping) or entry.get("event") != "StaleCopyKilled":
            continue
        if entry.get("cluster") not in clusters:
            continue
        when = parse_time(entry.get("time"))
        if when is None or when < since.replace(microsecond=0):
            continue
        found = _STALE_PODS.search(str(entry.get("message") or ""))
        total += int(found.group(1)) if found else 0
    return total


def build_report(obs: Observation, *, options: DrillOptions, final_jobs: Mapping[str, JSONObject],
                 plans: Mapping[str, JSONObject], mode: str, started: dt.datetime, finished: dt.datetime,
                 notes: Sequence[str]) -> JSONObject:
    """The DrillReport spec (see the module docstring for each figure)."""
    outcomes: list[JSONObject] = []
    moved = matched = 0
    #: figure -> affected gangs counted in it ("": in none, an accounting violation)
    buckets: dict[str, int] = {}
    drain_stuck = {(u.get("namespace"), u.get("name")) for d in obs.last_drain.values()
                   for u in d.get("unplaceable") or () if isinstance(u, Mapping)}
    for gang in sorted(obs.affected.values(), key=lambda g: g.key):
        job = final_jobs.get(gang.uid)
        cluster, epoch = _placement(job) if job is not None else (None, None)
        phase = _phase(job) if job is not None else ""
        message = ""
        if job is not None:
            gang.note_restore_point(job)
        if job is None:
            outcome, message = "lost", "the job vanished from the hub"
        elif phase == "Failed" and _failed_reason(job) in POLICY_FAILURES:
            outcome, message = "failedByPolicy", f"Failed ({_failed_reason(job)})"
        elif phase == "Failed":
            outcome, message = "lost", f"Failed ({_failed_reason(job) or 'no reason'})"
        elif gang.placed_at is not None or (cluster not in (None, gang.from_cluster)
                                            and (epoch or 0) > gang.from_epoch):
            # placed elsewhere at a higher epoch (seen by a sample, or only in the final list)
            outcome = "moved"
        elif (cluster is None and phase != "Succeeded") or (gang.namespace, gang.name) in drain_stuck:
            outcome = "unplaceable"
            why = ((job.get("status") or {}).get("placement") or {}).get("whyNot") or []
            if why and isinstance(why[0], Mapping):
                message = f"{why[0].get('cluster')}: {why[0].get('reason')} {why[0].get('message', '')}".strip()
        elif cluster == gang.from_cluster and (epoch or 0) > gang.from_epoch:
            outcome, message = "restartedInPlace", f"placed again in {cluster} at epoch {epoch}"
        elif cluster == gang.from_cluster and gang.restarted_at is not None:
            outcome, message = "restartedInPlace", "its pods were recreated in the same cluster"
        elif phase == "Succeeded" and cluster in (None, gang.from_cluster):
            outcome = "finished"
        elif (cluster, epoch) == (gang.from_cluster, gang.from_epoch):
            outcome = "rodeOut"
            if gang.policy == "wait" and obs.lost_at is not None:
                message = "waited for its cluster (onClusterLoss: wait)"
        else:
            outcome = "unaccounted"
            message = f"{phase} in {cluster or 'no cluster'} at epoch {epoch}: none of the drill's outcomes"
        if outcome == "moved":
            moved += 1
            matched += int((gang.placed_cluster or cluster) == gang.planned_target)
        buckets[OUTCOME_BUCKETS.get(outcome, "")] = buckets.get(OUTCOME_BUCKETS.get(outcome, ""), 0) + 1
        outcomes.append({
            "namespace": gang.namespace, "name": gang.name, "uid": gang.uid or None,
            "fromCluster": gang.from_cluster, "fromEpoch": gang.from_epoch, "plannedTarget": gang.planned_target,
            "cluster": cluster, "epoch": epoch, "outcome": outcome,
            "placedSeconds": _round(gang.placed_at), "runningSeconds": _round(gang.running_at),
            "restoredFromStep": gang.restored.step if gang.restored is not None and (epoch or 0) > gang.from_epoch
            else None,
            "message": message[:4096],
        })
    lost = 0
    for uid in obs.acknowledged:
        job = final_jobs.get(uid)
        if job is None or (_phase(job) == "Failed" and _failed_reason(job) not in POLICY_FAILURES):
            lost += 1
    moved_gangs = [g for g in obs.affected.values() if g.placed_at is not None]
    placed = [g.placed_at for g in moved_gangs if g.placed_at is not None]
    running = [g.running_at for g in moved_gangs if g.running_at is not None]
    if options.fault in LOSS_FAULTS:
        detect = obs.lost_at
    else:
        times = [g.left_at if options.fault == "drain" else g.changed_at for g in obs.affected.values()]
        known = [t for t in times if t is not None]
        detect = min(known) if known else None
    history = sum(_stale_from_history(final_jobs[u], faulted=options.clusters, since=started)
                  for u in obs.affected if u in final_jobs)
    stale = history if options.fault == "drain" else max(history, len(obs.killed_pods))
    plan_summary: JSONObject | None = None
    if plans:
        first = next(iter(plans.values()))
        plan_summary = {"for": first.get("for", "loss"), "generatedAt": first.get("generatedAt"),
                        "movable": sum(int(p.get("movable") or 0) for p in plans.values()),
                        "unplaceable": sum(int(p.get("unplaceable") or 0) for p in plans.values())}
        plan_summary = {k: v for k, v in plan_summary.items() if v is not None}
    unaccounted = [o for o in outcomes if o["outcome"] not in OUTCOME_BUCKETS]
    if unaccounted:
        shown = ", ".join(f"{o['namespace']}/{o['name']}" for o in unaccounted[:5])
        notes = [f"accounting violation: {len(unaccounted)} affected gang(s) in none of moved, "
                         f"unplaceable, rode out, restarted in place or lost ({shown}"
                         f"{', ...' if len(unaccounted) > 5 else ''})", *notes]
    spec: JSONObject = {
        "cluster": options.label or ",".join(options.clusters),
        "fault": options.fault,
        "mode": mode,
        "gangsAffected": len(obs.affected),
        "gangsMoved": moved,
        "gangsUnplaceable": buckets.get("gangsUnplaceable", 0),
        "gangsRodeOut": buckets.get("gangsRodeOut", 0),
        "gangsRestartedInPlace": buckets.get("gangsRestartedInPlace", 0),
        "gangsLost": buckets.get("gangsLost", 0),
        "detectSeconds": _round(detect),
        "redispatchSeconds": _round(max(placed)) if placed else None,
        "runningAgainSeconds": _round(max(running)) if moved_gangs and len(running) == len(moved_gangs) else None,
        "jobsLost": lost,
        "maxConcurrentCopies": obs.max_copies,
        "duplicates": len(obs.duplicates),
        "stalePodsKilled": stale,
        "planMatched": (round(matched / moved, 4) if moved else 1.0) if plans else None,
        "durationSeconds": round(options.duration, 3),
        "startedAt": format_time(started),
        "finishedAt": format_time(finished),
        "samples": obs.samples,
        "unansweredReads": obs.unanswered_reads,
        "gangs": outcomes[:MAX_GANGS],
        "gangsOmitted": max(0, len(outcomes) - MAX_GANGS),
        "notes": [n[:1024] for n in notes][:32],
    }
    if plan_summary is not None:
        spec["plan"] = plan_summary
    return spec


def figures(spec: Mapping[str, Any]) -> JSONObject:
    """Exactly the issue's keys, in its order."""
    return {key: spec.get(key) for key in FIGURES}


def report_name(clusters: Sequence[str], when: dt.datetime) -> str:
    """drill-<cluster>-<yyyymmdd-hhmmss> (a DNS label: at most 63 characters)."""
    stamp = when.astimezone(dt.UTC).strftime("%Y%m%d-%H%M%S")
    who = clusters[0] if len(clusters) == 1 else f"{len(clusters)}-clusters"
    who = who[: 63 - len("drill--") - len(stamp)].rstrip("-")
    return f"drill-{who}-{stamp}"


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}s"


def render_report(spec: Mapping[str, Any], *, name: str | None = None) -> str:
    """The report as text: the figures, the bars, each gang's outcome and the notes."""
    plan = spec.get("planMatched")
    accounting = ""
    counted = accounted(spec)
    if counted is not None and counted != spec.get("gangsAffected"):
        accounting = f"   (accounted for {counted} of {spec.get('gangsAffected')} affected: must be all)"
    lines = [
        f"drill {spec.get('fault')} of {spec.get('cluster')} ({spec.get('mode', 'simulated')}, held "
        f"{float(spec.get('durationSeconds') or 0):g}s){': ' + name if name else ''}",
        f"  gangs affected           {spec.get('gangsAffected')}",
        f"  gangs moved              {spec.get('gangsMoved')}",
        f"  gangs unplaceable        {spec.get('gangsUnplaceable')}",
        f"  gangs rode out           {spec.get('gangsRodeOut', '-')}",
        f"  gangs restarted in place {spec.get('gangsRestartedInPlace', '-')}",
        f"  gangs lost               {spec.get('gangsLost', '-')}{accounting}",
        f"  detect                   {_seconds(spec.get('detectSeconds'))}",
        f"  redispatch               {_seconds(spec.get('redispatchSeconds'))}",
        f"  running again            {_seconds(spec.get('runningAgainSeconds'))}",
        f"  jobs lost                {spec.get('jobsLost')}{'' if spec.get('jobsLost') == 0 else '   (must be 0)'}",
        f"  max concurrent copies    {spec.get('maxConcurrentCopies')}"
        f"{'   (must be 1)' if (spec.get('maxConcurrentCopies') or 0) > 1 else ''}",
        f"  duplicates               {spec.get('duplicates')}",
        f"  stale pods killed        {spec.get('stalePodsKilled')}",
        f"  plan matched             {'-' if plan is None else f'{float(plan):.0%}'}",
        f"  samples                  {spec.get('samples', 0)} ({spec.get('unansweredReads', 0)} member reads "
        "unanswered)",
    ]
    gangs = spec.get("gangs") or []
    if gangs:
        lines.append("gangs:")
        width = max(len(f"{g.get('namespace')}/{g.get('name')}") for g in gangs)
        for g in gangs:
            where = f"{g.get('fromCluster')} -> {g.get('cluster') or 'nowhere'}"
            planned = f" (planned {g.get('plannedTarget') or 'nowhere'})" if g.get("outcome") == "moved" else ""
            times = ""
            if g.get("placedSeconds") is not None:
                times = f"  placed {_seconds(g.get('placedSeconds'))}, running {_seconds(g.get('runningSeconds'))}"
            if g.get("restoredFromStep") is not None:
                times += f"  restored from step {g['restoredFromStep']}"
            why = f"  {g.get('message')}" if g.get("message") else ""
            lines.append(f"  {(str(g.get('namespace')) + '/' + str(g.get('name'))).ljust(width)}  "
                         f"{str(g.get('outcome')).ljust(16)} {where}{planned}{times}{why}")
        if spec.get("gangsOmitted"):
            lines.append(f"  ... and {spec['gangsOmitted']} more")
    for note in spec.get("notes") or ():
        lines.append(f"note: {note}")
    return "\n".join(lines)


# ---------------------------------------------------------------- progress


class ProgressLine:
    """One line rewritten in place on a terminal; a line every few seconds otherwise."""

    def __init__(self, out: TextIO, *, every: float = 5.0) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every = every
        self.last_printed = -math.inf
        self.width = 0

    def show(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            self.out.write("\r" + text.ljust(self.width))
            self.width = len(text)
            self.out.flush()
        elif force or now - self.last_printed >= self.every:
            print(text, file=self.out, flush=True)
            self.last_printed = now

    def done(self) -> None:
        if self.tty and self.width:
            self.out.write("\n")
            self.out.flush()
            self.width = 0


def _progress_text(options: DrillOptions, obs: Observation, at: float, stage: str) -> str:
    return (f"drill {options.fault} {options.label or ','.join(options.clusters)}: {max(0.0, at):5.1f}s {stage}; "
            f"affected {len(obs.affected)}, moved {obs.moved}, running again {obs.running_again}, "
            f"max copies {obs.max_copies}")


# ---------------------------------------------------------------- the drill


def member_kubeconfigs(state_dir: Path, clusters: Iterable[str], *, faulted: Iterable[str],
                       member_kubeconfig: Path | None) -> dict[str, tuple[Path, bool]]:
    """cluster -> (kubeconfig the drill reads it with, whether that is the hub's own identity)."""
    sim = state_dir / "sim"
    faulted = set(faulted)
    found: dict[str, tuple[Path, bool]] = {}
    for cluster in clusters:
        if cluster in faulted and member_kubeconfig is not None:
            found[cluster] = (member_kubeconfig, False)
            continue
        agent = sim / f"{cluster}-agent.kubeconfig"
        own = sim / f"{cluster}.kubeconfig"
        if cluster in faulted and agent.is_file():
            found[cluster] = (agent, False)
        elif own.is_file():
            found[cluster] = (own, True)
    return found


async def fetch_plans(hub: HubClient, clusters: Sequence[str], purpose: str) -> tuple[dict[str, JSONObject],
                                                                                     list[str]]:
    plans: dict[str, JSONObject] = {}
    notes: list[str] = []
    for cluster in clusters:
        try:
            plans[cluster] = await hub.request("GET", plan_path(cluster), params={"for": purpose})
        except HubError as e:
            if e.code == 0:
                raise
            notes.append(f"no failover plan for {cluster} ({e}); planMatched is left empty")
    return plans, notes


async def run_drill(hub: HubClient, options: DrillOptions, *, progress: ProgressLine | None = None,
                    say: Callable[[str], None] | None = None) -> DrillResult:
    """Run one live drill (see the module docstring); the report spec and the plans."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    simulated = options.member_kubeconfig is None and all(
        (options.state_dir / "sim" / f"{c}.kubeconfig").is_file() for c in options.clusters)
    mode = "simulated" if simulated else "real"
    loss_fault = options.fault in LOSS_FAULTS
    registered = [Body(m).name
                  for m in (await hub.request("GET", clusters_path())).get("items") or ()]
    notes: list[str] = []
    plans, plan_notes = await fetch_plans(hub, options.clusters, "drain" if options.fault == "drain" else "loss")
    notes += plan_notes
    # Readers for every registered cluster this machine has a kubeconfig of.
    readers: dict[str, MemberReader] = {}
    for cluster, (path, own) in member_kubeconfigs(options.state_dir, registered, faulted=options.clusters,
                                                    member_kubeconfig=options.member_kubeconfig).items():
        reader = MemberReader(cluster, path, own)
        try:
            await reader.open(options.read_timeout)
        except MemberClientError as e:
            notes.append(f"{cluster} is not observed: {e}")
            continue
        readers[cluster] = reader
    unobserved = sorted(set(registered) - set(readers))
    if unobserved:
        notes.append(f"not observed (no kubeconfig under {options.state_dir / 'sim'}): {', '.join(unobserved)}; "
                     "copies running there cannot be counted")
    sims: dict[str, SimFaults] = {}
    if simulated and options.fault != "drain":
        for cluster in options.clusters:
            sims[cluster] = SimFaults(cluster, read_kubeconfig(options.state_dir / "sim" / f"{cluster}.kubeconfig"))
    observation = Observation(faulted=options.clusters, fault=options.fault)
    stage = ["baseline"]

    def on_sample(sample: Sample) -> None:
        if progress is not None and sample.at >= 0:
            progress.show(_progress_text(options, observation, sample.at, stage[0]))

    sampler = Sampler(hub, readers, observation, interval=options.sample_interval, timeout=options.read_timeout,
                      on_sample=on_sample)
    injected: Injected | None = None
    task: asyncio.Task[None] | None = None
    try:
        baseline = await sampler.take()
        patience = time.monotonic() + _BASELINE_PATIENCE_SECONDS
        while (missing := _unanswered(baseline, options.clusters)) and time.monotonic() < patience:
            say(f"reading the baseline again: {', '.join(missing)} did not answer (a loaded machine or network); "
                "the fault waits for a complete one")
            await asyncio.sleep(options.sample_interval)
            baseline = await sampler.take()
        if missing:
            notes.append(f"the baseline before the fault is incomplete ({', '.join(missing)} did not answer for "
                         f"{_BASELINE_PATIENCE_SECONDS:g}s): pods killed there may be undercounted")
        node: str | None = None
        if options.fault == "node-failure":
            node = _busiest_node(baseline.pods.get(options.clusters[0]))
            if node is None and options.clusters[0] in readers:
                node = await readers[options.clusters[0]].first_node()
            if node is None and simulated:
                raise DrillError(f"cannot tell which node of {options.clusters[0]} to fail: it runs none of this "
                                 "hub's pods and lists no nodes")
        observation.set_baseline(baseline, node=node)
        for uid, gang in observation.affected.items():
            for plan in plans.values():
                for row in plan.get("gangs") or ():
                    if isinstance(row, Mapping) and row.get("uid") == uid:
                        gang.planned_target = row.get("target") if isinstance(row.get("target"), str) else None
        started = dt.datetime.now(dt.UTC)
        sampler.t0 = time.monotonic()
        if simulated or options.fault == "drain":
            injected = await inject(hub, options, sims, node=node)
            if options.fault == "partition":
                sampler.blocked = {c for c in options.clusters if c in readers and readers[c].hub_identity}
            if options.fault == "partition" or options.fault == "outage":
                blind = sorted(sampler.blocked) if options.fault == "partition" else []
                if blind:
                    notes.append(f"{', '.join(blind)} not observed during the fault: no "
                                 f"<cluster>-agent.kubeconfig in {options.state_dir / 'sim'}, and the hub's own "
                                 "identity is cut off")
            say(f"{options.fault} of {', '.join(options.clusters)} injected"
                + (f" (node {node})" if node else "") + f"; held for {options.duration:g}s")
        else:
            client = readers[options.clusters[0]].client if options.clusters[0] in readers else None
            say(operator_instructions(options, node=node, server=client.server if client else "its API server"))
        task = asyncio.create_task(sampler.run(), name="drill-sampler")
        stage[0] = "fault held"
        deadline = sampler.t0 + options.duration
        if options.fault == "drain":
            # the drain runs until it completes or is stuck, at most for the duration
            while time.monotonic() < deadline and not observation.drain_finished():
                await _next(sampler, task)
        else:
            while time.monotonic() < deadline:
                await asyncio.wait([task], timeout=max(0.0, deadline - time.monotonic()))
                if task.done():
                    task.result()
        observation.lifted_at = sampler.now()
        if injected is not None:
            notes += await lift(hub, injected)
            sampler.blocked = set()
            say(f"{options.fault} lifted after {sampler.now():.1f}s; waiting for the federation to settle "
                f"(at most {options.settle_timeout:g}s)")
        elif not simulated:
            say(f"{options.duration:g}s are up: restore {options.clusters[0]} now; the drill waits for the "
                f"federation to settle (at most {options.settle_timeout:g}s)")
        stage[0] = "settling"
        settle_deadline = time.monotonic() + options.settle_timeout
        why = ""
        while True:
            await _next(sampler, task)
            quiet, why = observation.settled(loss_fault=loss_fault)
            if quiet:
                break
            if time.monotonic() >= settle_deadline:
                notes.append(f"the federation did not settle within {options.settle_timeout:g}s after the fault "
                             f"was lifted ({why}); the figures are what had happened by then")
                break
        if progress is not None:
            progress.show(_progress_text(options, observation, sampler.now(), "done"), force=True)
            progress.done()
    finally:
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the sampler's end is not the drill's
                pass
        if injected is not None and not injected.lifted:
            await asyncio.shield(lift(hub, injected))
        for reader in readers.values():
            await reader.close()
    finished = dt.datetime.now(dt.UTC)
    final = await hub.request("GET", JOBS_PATH)
    final_jobs = {Body(j).uid: j for j in final.get("items") or ()
                  if isinstance(j, dict)}
    if loss_fault and observation.lost_at is None and observation.affected:
        notes.append(f"{', '.join(options.clusters)} never turned Lost: a fault shorter than the loss grace "
                     "(plus the fencing lease) moves nothing")
    if observation.hub_partitioned_seen:
        notes.append("the hub judged itself cut off (Lost reason HubPartitioned): failover was suspended")
    report = build_report(observation, options=options, final_jobs=final_jobs, plans=plans, mode=mode,
                          started=started, finished=finished, notes=notes)
    return DrillResult(report=report, plans=dict(plans))


async def _next(sampler: Sampler, task: asyncio.Task[None]) -> None:
    """Until the sampler took its next sample (re-raising its failure)."""
    waiter = asyncio.ensure_future(sampler.next_sample())
    try:
        await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()


def _busiest_node(pods: Sequence[PodView] | None) -> str | None:
    counts: dict[str, int] = {}
    for pod in pods or ():
        if pod.node and pod.alive:
            counts[pod.node] = counts.get(pod.node, 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda n: (-counts[n], n))
