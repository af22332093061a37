"""The discrete-event engine of a replay: virtual time, members, one policy, and what it measured.

Time jumps from event to event (a job arrives, a gang finishes, a policy's
timer fires); nothing waits on a wall clock. At each instant, in this
order:
1. gangs that finish now release their nodes (and their member objects
   are deleted: the cleanup writes);
2. jobs submitted now go to the policy (`submit`), then timers fire;
3. every member whose capacity or queue changed runs a scheduling cycle
   (its own waiting gangs first: they were there before); members that
   must decide at the same instant go in an order drawn from the seed,
   which stands in for the race between them (it matters only to
   policies that copy a job to several members);
4. the policy's hub side decides (`step`), dispatching into members, which
   run a cycle at once; members left dirty cycle again.

When a member binds a gang copy, the job starts: first the copy of its
dataset if the member does not cache it (size / the member's bandwidth,
with the gang holding its GPUs), then its traced duration (longer on a
fabric mismatch, by the rule). Its queueing delay is training start
minus submission; its JCT is finish minus submission.

An elastic gang (`--elastic-share`) bound at s of its max pods runs
max/s times its traced duration (its GPU-seconds are the trace's: linear
scaling); when it grows (`grow`: the federator policy's grow pass), the
run seconds left are recomputed at the new size and its finish moves.

Writes are counted uniformly: every gang copy written into a member costs
1 + pods writes (a PodGroup, or the policy's equivalent workload object,
and its pods), and every copy deleted (a losing copy, a failed dispatch
pulled back, a finished gang cleaned up, or a gang evicted) the same again.

Preemption (`evict`, asked by a policy with queues): a bound gang is
evicted whole at once (its member objects deleted, every pod's node
freed), its job goes back to not started with epoch + 1 (the policy
requeues it), and its work since its last checkpoint is lost. A job
checkpoints every `ReplayJob.checkpoint_seconds` of its run (0: never;
drawn by the attribute rule, `attributes.checkpoint_draw`): the first
checkpoint I seconds after its training starts (after any dataset copy),
then every I seconds, at no cost (`last_checkpoint`). On eviction it keeps
the work up to its last checkpoint in that run (`saved_work`: traced
seconds), and its next copy runs only the rest (and copies its dataset
again if its next cluster does not cache it); a job with no checkpoint in
that run restarts from where its previous checkpoint left it (from the
beginning if it never checkpointed). GPU-hours lost to preemption are its
GPUs times the time since its last checkpoint in that run, or since the
run was bound (dataset copy included) if it had none. Its queueing delay is
the time it waited: its final start minus its submission, less the time
its evicted runs held their GPUs (that time is not waiting); its JCT is
its final finish minus its submission, lost runs and all. (Queues and
elastic gangs are not replayed together, so no evicted run was resized.)

Per queue (the trace cluster a job came from: the queues of `--queues`,
measured for every policy) and per priority: jobs, mean, median and p95
queueing delay, mean speed (traced duration / JCT: 1 when never delayed),
evictions and GPU-hours lost (`PolicyResult.extra["queues"]` and
`["priorities"]`); `queue_fairness` is Jain's index over the queues' mean
speeds.

Spend (`PolicyResult.extra["spend"]`, every policy): GPU-hours held per
cluster and GPU model (bound gangs, dataset copy included, evicted runs
too: the GPUs were held), money spent = the cloud clusters' GPU-hours
times their price (`ClusterSpec.price(model)`; on-prem GPU-hours are sunk:
shown, not counted in the money), the share of GPU-hours on-prem and in
the cloud and in each tier of the clusters file (`untiered`: clusters in
no tier, or all of them without tiers), and the mean, median, p90, p95
and p99 queueing delay.

Must never: read a clock for the simulation (only `wall_seconds`
measures the run), or let any policy see another's members.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from federator.replay.attributes import RULE, AttributeRule, ReplayJob
from federator.replay.clusters import Federation
from federator.replay.member import GangCopy, Member, pod_requirements_of

__all__ = [
    "FAILED_DISPATCH_NOTICE_SECONDS",
    "UNTIERED",
    "Engine",
    "Policy",
    "PolicyBase",
    "PolicyResult",
    "jain_index",
    "quantile",
    "queue_fairness",
]

# The tier share of GPU-hours in clusters no tier of the clusters file selects (all of them without tiers).
UNTIERED = "untiered"
# A gang written where it can never run stays Unschedulable; the dispatcher notices after this long
# (karmada-descheduler's default unschedulable threshold is 5 minutes) and pulls it back.
FAILED_DISPATCH_NOTICE_SECONDS = 300.0
_FINISH, _ARRIVAL, _TIMER = 0, 1, 2


class Policy(Protocol):
    """A dispatch policy: how jobs get from the hub (or the submitter) into members."""

    name: str

    def attach(self, engine: Engine) -> None: ...

    def submit(self, job: ReplayJob) -> None: ...

    def step(self) -> None: ...

    def on_bound(self, copy: GangCopy) -> None: ...

    def on_finished(self, copy: GangCopy) -> None: ...

    def on_timer(self, payload: Any) -> None: ...


class PolicyBase:
    """What every policy shares: the engine it drives, and hooks that do nothing unless overridden."""

    name = "policy"

    def __init__(self) -> None:
        self.engine: Engine | None = None

    @property
    def e(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("policy not attached to an engine")
        return self.engine

    def attach(self, engine: Engine) -> None:
        self.engine = engine

    def submit(self, job: ReplayJob) -> None:
        raise NotImplementedError

    def step(self) -> None:
        return None

    def on_bound(self, copy: GangCopy) -> None:
        return None

    def on_finished(self, copy: GangCopy) -> None:
        return None

    def on_timer(self, payload: Any) -> None:
        return None


@dataclass
class PolicyResult:
    """What one policy's replay measured (report.json's per-policy object, plus the plots' data)."""

    policy: str
    metrics: dict[str, float | int]
    delays: list[float]
    # (time since the first submission, GPU utilisation 0..1) at evenly spaced instants
    utilization: list[tuple[float, float]]
    never_started: int
    events: int
    member_cycles: int
    # CPU time of the replay in its process (wall time moves with the machine's load; this less so)
    cpu_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0 for no values."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets everything."""
    if not values:
        return 1.0
    total = sum(values)
    squares = sum(v * v for v in values)
    return (total * total) / (len(values) * squares) if squares > 0 else 1.0


def _speed(duration: float, jct: float) -> float:
    """Traced duration / JCT: 1 for a job that never waited or slowed, towards 0 the longer it did."""
    return duration / jct if jct > 0 else 1.0


def queue_fairness(per_queue: dict[str, dict[str, Any]]) -> float:
    """Jain's index over the queues' mean speeds (`meanSpeed`), of the queues with a finished job."""
    return jain_index([q["meanSpeed"] for _, q in sorted(per_queue.items()) if q["finished"]])


class Engine:
    """One policy's replay over fresh members; `run()` returns its PolicyResult."""

    def __init__(
        self,
        *,
        jobs: Sequence[ReplayJob],
        federation: Federation,
        policy: Policy,
        seed: int,
        rule: AttributeRule = RULE,
        progress: Callable[[int], None] | None = None,
        progress_every: int = 1000,
    ) -> None:
        self.jobs = jobs
        self.federation = federation
        self.policy = policy
        self.rule = rule
        self.seed = seed
        self.members: dict[str, Member] = {spec.name: Member(spec) for spec in federation.clusters}
        self.member_order = federation.names
        self._position = {name: i for i, name in enumerate(self.member_order)}
        self.now = jobs[0].submitted if jobs else 0.0
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._race = random.Random(f"replay-race/{seed}")
        self._dirty: set[str] = set()
        n = len(jobs)
        self.bound_at = array("d", [math.nan]) * n
        self.started_at = array("d", [math.nan]) * n
        self.finished_at = array("d", [math.nan]) * n
        self.cluster_of: list[str | None] = [None] * n
        # Times each job was evicted (its epoch) and the GPU-seconds its evicted runs held.
        self.epoch = array("l", [0]) * n
        self.lost_gpu_seconds = array("d", [0.0]) * n
        self.evicted_run_seconds = array("d", [0.0]) * n
        # Traced seconds of work each job has saved by checkpoints of evicted runs (its next run skips them).
        self.saved_work = array("d", [0.0]) * n
        self.resumed_from_checkpoint = 0
        self.evictions = 0
        # Elastic gangs: bound below their max, and pods added to running gangs.
        self.elastic_below_max = 0
        self.resizes = 0
        self.writes = 0
        self.failed_dispatches = 0
        self.fabric_mismatches = 0
        self.bytes_copied = 0
        self.busy_gpus = 0
        self.total_gpus = sum(m.capacity["nvidia.com/gpu"] for m in self.members.values())
        self._busy_area = 0.0
        # GPU-seconds held per (cluster, GPU model): what the spend figures price.
        self._held: list[tuple[str, dict[str, int]]] = [(n, m.gpu_used_by_model) for n, m in self.members.items()]
        self.gpu_seconds: dict[tuple[str, str], float] = {
            (name, model): 0.0 for name, used in self._held for model in used
        }
        self._last_t: float | None = None
        self._util_t = array("d")
        self._util_busy = array("d")
        self._progress = progress
        self._progress_every = max(1, progress_every)
        self._finished = 0
        self.events = 0
        policy.attach(self)

    # ------------------------------------------------------------ for policies

    def timer(self, at: float, payload: Any) -> None:
        """Call `policy.on_timer(payload)` at virtual time `at` (not before now)."""
        heapq.heappush(self._events, (max(at, self.now), _TIMER, next(self._seq), payload))

    def dispatch(
        self, job: ReplayJob, cluster: str, *, cycle: bool = True, gpu_model: str | None = None, pods: int | None = None
    ) -> GangCopy:
        """Write a copy of the job's gang into a member; with `cycle`, the member schedules at once.

        `gpu_model` pins the pods of a job that accepts any model to that one (the hub's delegation does so
        with the model placement chose). `pods`: how many pods to write (an elastic gang's placed size,
        at least its minimum; default every pod); its minMember is its minimum.
        """
        member = self.members[cluster]
        written = job.pods if pods is None else pods
        if not job.low <= written <= job.pods:
            raise ValueError(f"{job.uid} runs {job.low}..{job.pods} pods, not {written}")
        copy = GangCopy(
            job=job,
            cluster=cluster,
            seq=next(self._seq),
            requirements=pod_requirements_of(job, gpu_model=gpu_model),
            pod_keys=tuple(f"{job.uid}/{cluster}/{i}" for i in range(written)),
            need=job.low,
        )
        self.writes += 1 + written
        member.add(copy)
        if cycle:
            member.cycle(self._bound)
        else:
            self._dirty.add(cluster)
        return copy

    def delete(self, copy: GangCopy) -> None:
        """Delete a waiting copy from its member (the writes of its PodGroup and pods)."""
        self.members[copy.cluster].delete(copy)
        self.writes += 1 + len(copy.pod_keys)

    def evict(self, copy: GangCopy) -> None:
        """Evict a bound gang whole (a preemption); see the module docstring. The policy requeues the job."""
        job = copy.job
        if copy.state != "bound" or math.isnan(self.bound_at[job.index]):
            raise ValueError(f"only a running gang can be evicted; {job.uid}'s copy in {copy.cluster} is {copy.state}")
        checkpoint = self.last_checkpoint(copy)
        self.members[copy.cluster].evict(copy)
        self.writes += 1 + len(copy.pod_keys)
        self.busy_gpus -= copy.gpus
        if checkpoint is not None and copy.run_seconds > 0:
            done = copy.work_left * (checkpoint - copy.trained_from) / copy.run_seconds
            self.saved_work[job.index] = min(job.duration, job.duration - copy.work_left + done)
            self.resumed_from_checkpoint += 1
        lost_from = copy.bound_at if checkpoint is None else checkpoint
        self.lost_gpu_seconds[job.index] += copy.gpus * (self.now - lost_from)
        self.evicted_run_seconds[job.index] += self.now - copy.bound_at
        self.evictions += 1
        self.epoch[job.index] += 1
        self.bound_at[job.index] = math.nan
        self.started_at[job.index] = math.nan
        self.cluster_of[job.index] = None
        self._dirty.add(copy.cluster)

    def last_checkpoint(self, copy: GangCopy) -> float | None:
        """When a bound run last checkpointed by now (None: not yet in this run, or its job never does)."""
        every = copy.job.checkpoint_seconds
        if copy.state != "bound" or every <= 0 or not self.now > copy.trained_from:
            return None
        count = math.floor((self.now - copy.trained_from) / every)
        return copy.trained_from + count * every if count >= 1 else None

    def grow(self, copy: GangCopy, pods: int) -> int:
        """Create `pods` more pods of a running elastic gang in its member (which binds those that fit now).

        Returns how many were bound; the run seconds left are recomputed at the new size (see the module
        docstring), and its finish moves.
        """
        job = copy.job
        if copy.state != "bound" or not job.elastic:
            raise ValueError(f"only a running elastic gang can grow; {job.uid}'s copy in {copy.cluster} is {copy.state}")
        keys = [f"{job.uid}/{copy.cluster}/{i}" for i in range(len(copy.pod_keys), len(copy.pod_keys) + pods)]
        before = copy.size
        added = self.members[copy.cluster].grow(copy, keys)
        if not added:
            return 0
        self.writes += added
        self.busy_gpus += added * job.gpus_per_pod
        self.resizes += 1
        copy.resizes += 1
        now = self.now
        if now > copy.segment_at:
            copy.remaining -= now - copy.segment_at
            copy.segment_at = now
        copy.remaining = copy.remaining * before / copy.size
        copy.finish_at = copy.segment_at + copy.remaining
        heapq.heappush(self._events, (copy.finish_at, _FINISH, next(self._seq), copy))
        self._dirty.add(copy.cluster)
        return added

    def count_failed_dispatch(self) -> None:
        self.failed_dispatches += 1

    def is_started(self, job: ReplayJob) -> bool:
        return not math.isnan(self.bound_at[job.index])

    def seeded_order(self, names: set[str] | Sequence[str]) -> list[str]:
        """Members in the order the seed draws for this instant's race."""
        ordered = sorted(names, key=self._position.__getitem__)
        self._race.shuffle(ordered)
        return ordered

    # ------------------------------------------------------------ internals

    def _bound(self, copy: GangCopy) -> None:
        job = copy.job
        if not math.isnan(self.bound_at[job.index]):
            raise RuntimeError(f"job {job.uid} was bound twice (second copy in {copy.cluster})")
        spec = self.members[copy.cluster].spec
        copy.bound_at = self.now
        copy_seconds = 0.0
        if job.dataset is not None and job.dataset not in spec.datasets:
            self.bytes_copied += job.dataset_bytes
            copy_seconds = job.dataset_bytes * 8 / (spec.bandwidth_gbps * 1e9)
        slowdown = 1.0
        if job.network != "any" and job.network != spec.fabric and len(set(copy.nodes.values())) > 1:
            self.fabric_mismatches += 1
            if job.network == "rdma":
                slowdown = self.rule.fabric_mismatch_slowdown
        start = self.now + copy_seconds
        # An elastic gang below its max runs longer: the trace fixes its GPU-seconds (1 for a full gang).
        stretch = job.pods / copy.size
        if stretch != 1:
            self.elastic_below_max += 1
        copy.segment_at = start
        copy.trained_from = start
        copy.work_left = job.duration - self.saved_work[job.index]
        copy.remaining = copy.run_seconds = copy.work_left * slowdown * stretch
        finish = copy.finish_at = start + copy.remaining
        self.bound_at[job.index] = self.now
        self.started_at[job.index] = start
        self.cluster_of[job.index] = copy.cluster
        self.busy_gpus += copy.gpus
        heapq.heappush(self._events, (finish, _FINISH, next(self._seq), copy))
        self.policy.on_bound(copy)

    def _finish(self, copy: GangCopy) -> None:
        self.members[copy.cluster].release(copy)
        self.writes += 1 + len(copy.pod_keys)
        self.busy_gpus -= copy.gpus
        self.finished_at[copy.job.index] = self.now
        self._dirty.add(copy.cluster)
        self._finished += 1
        if self._progress is not None and self._finished % self._progress_every == 0:
            self._progress(self._progress_every)
        self.policy.on_finished(copy)

    def _flush(self) -> None:
        while self._dirty:
            dirty, self._dirty = self._dirty, set()
            for name in self.seeded_order(dirty):
                self.members[name].cycle(self._bound)

    def _advance(self, t: float) -> None:
        if self._last_t is not None and t > self._last_t and self.busy_gpus:
            span = t - self._last_t
            self._busy_area += self.busy_gpus * span
            seconds = self.gpu_seconds
            for name, used in self._held:
                for model, gpus in used.items():
                    if gpus:
                        seconds[(name, model)] += gpus * span
        self._last_t = t
        self.now = t

    def run(self) -> PolicyResult:
        started = time.perf_counter()
        cpu_started = time.process_time()
        for job in self.jobs:
            heapq.heappush(self._events, (job.submitted, _ARRIVAL, next(self._seq), job))
        events = self._events
        while events:
            t = events[0][0]
            self._advance(t)
            batch: list[tuple[float, int, int, Any]] = []
            while events and events[0][0] == t:
                batch.append(heapq.heappop(events))
            self.events += len(batch)
            for _, kind, _, payload in batch:
                # An evicted gang's finish never comes; nor does a resized gang's earlier one.
                if kind == _FINISH and payload.state == "bound" and payload.finish_at == t:
                    self._finish(payload)
            for _, kind, _, payload in batch:
                if kind == _ARRIVAL:
                    self.policy.submit(payload)
            for _, kind, _, payload in batch:
                if kind == _TIMER:
                    self.policy.on_timer(payload)
            self._flush()
            self.policy.step()
            self._flush()
            self._util_t.append(t)
            self._util_busy.append(float(self.busy_gpus))
        if self._progress is not None and self._finished % self._progress_every:
            self._progress(self._finished % self._progress_every)
        return self._result(wall=time.perf_counter() - started, cpu=time.process_time() - cpu_started)

    # ------------------------------------------------------------ results

    def _utilization_series(self, t0: float, t1: float, bins: int = 400) -> list[tuple[float, float]]:
        if t1 <= t0 or not self._util_t or self.total_gpus <= 0:
            return []
        width = (t1 - t0) / bins
        area = [0.0] * bins
        times, busy = self._util_t, self._util_busy
        for i in range(len(times) - 1):
            a, b, value = times[i], times[i + 1], busy[i]
            if b <= a or value == 0:
                continue
            first, last = int((a - t0) / width), min(bins - 1, int((b - t0) / width))
            for k in range(max(0, first), last + 1):
                lo, hi = max(a, t0 + k * width), min(b, t0 + (k + 1) * width)
                if hi > lo:
                    area[k] += value * (hi - lo)
        return [(k * width + width / 2, area[k] / (width * self.total_gpus)) for k in range(bins)]

    def _delay(self, job: ReplayJob) -> float:
        """Time waiting: final start - submission - the time evicted runs held GPUs (nan: never started)."""
        return self.started_at[job.index] - job.submitted - self.evicted_run_seconds[job.index]

    def _groups(self, key: Callable[[ReplayJob], str]) -> dict[str, dict[str, Any]]:
        """Jobs, delays (mean, median, p95), mean speed, evictions and GPU-hours lost, per group of jobs."""
        # group -> (delays, speeds, [jobs, evictions, lost GPU-seconds])
        groups: dict[str, tuple[list[float], list[float], list[float]]] = {}
        for job in self.jobs:
            group = groups.get(key(job))
            if group is None:
                group = groups[key(job)] = ([], [], [0.0, 0.0, 0.0])
            counts = group[2]
            counts[0] += 1
            counts[1] += self.epoch[job.index]
            counts[2] += self.lost_gpu_seconds[job.index]
            delay = self._delay(job)
            if math.isnan(delay):
                continue
            group[0].append(delay)
            finish = self.finished_at[job.index]
            if not math.isnan(finish):
                group[1].append(_speed(job.duration, finish - job.submitted))
        out: dict[str, dict[str, Any]] = {}
        for name, (delays, speeds, counts) in sorted(groups.items()):
            delays.sort()
            out[name] = {
                "jobs": int(counts[0]),
                "started": len(delays),
                "finished": len(speeds),
                "meanQueueDelaySeconds": round(sum(delays) / len(delays), 3) if delays else 0.0,
                "medianQueueDelaySeconds": round(quantile(delays, 0.5), 3),
                "p95QueueDelaySeconds": round(quantile(delays, 0.95), 3),
                "meanSpeed": round(sum(speeds) / len(speeds), 6) if speeds else 0.0,
                "evictions": int(counts[1]),
                "gpuHoursLostToPreemption": round(counts[2] / 3600, 3),
            }
        return out

    def _spend(self, delays: Sequence[float]) -> dict[str, Any]:
        """Money spent, GPU-hours by location and tier, and queueing delay (report.py's spend section)."""
        federation = self.federation
        hours: dict[str, float] = {}
        spent = 0.0
        by_location = {"on-prem": 0.0, "cloud": 0.0}
        by_tier: dict[str, float] = {tier.name: 0.0 for tier in federation.tiers}
        for (name, model), seconds in self.gpu_seconds.items():
            spec = federation.cluster(name)
            gpu_hours = seconds / 3600
            hours[name] = hours.get(name, 0.0) + gpu_hours
            by_location[spec.location] += gpu_hours
            if spec.location == "cloud":
                spent += gpu_hours * spec.price(model)
            tier = federation.tier_of(name) or UNTIERED
            by_tier[tier] = by_tier.get(tier, 0.0) + gpu_hours
        total = sum(hours.values())

        def share(value: float) -> float:
            return round(value / total, 6) if total > 0 else 0.0

        return {
            "moneySpent": round(spent, 3),
            "gpuHours": round(total, 3),
            "onPremGpuHours": round(by_location["on-prem"], 3),
            "cloudGpuHours": round(by_location["cloud"], 3),
            "onPremShare": share(by_location["on-prem"]),
            "cloudShare": share(by_location["cloud"]),
            "tierShares": {tier: share(value) for tier, value in by_tier.items()},
            "meanQueueDelaySeconds": round(sum(delays) / len(delays), 3) if delays else 0.0,
            "medianQueueDelaySeconds": round(quantile(delays, 0.5), 3),
            "p90QueueDelaySeconds": round(quantile(delays, 0.9), 3),
            "p95QueueDelaySeconds": round(quantile(delays, 0.95), 3),
            "p99QueueDelaySeconds": round(quantile(delays, 0.99), 3),
            "perClusterGpuHours": {name: round(value, 3) for name, value in sorted(hours.items())},
        }

    def _result(self, *, wall: float, cpu: float) -> PolicyResult:
        jobs = self.jobs
        delays: list[float] = []
        jcts: list[float] = []
        per_team: dict[str, list[float]] = {}
        never = 0
        for job in jobs:
            delay = self._delay(job)
            if math.isnan(delay):
                never += 1
                continue
            delays.append(delay)
            finish = self.finished_at[job.index]
            if not math.isnan(finish):
                jct = finish - job.submitted
                jcts.append(jct)
                per_team.setdefault(job.team, []).append(_speed(job.duration, jct))
        delays.sort()
        first = min((j.submitted for j in jobs), default=0.0)
        finishes = [f for f in self.finished_at if not math.isnan(f)]
        last = max(finishes, default=first)
        makespan = last - first
        utilization = self._busy_area / (self.total_gpus * makespan) if makespan > 0 and self.total_gpus else 0.0
        team_scores = [sum(v) / len(v) for _, v in sorted(per_team.items())]
        metrics: dict[str, float | int] = {
            "meanQueueDelaySeconds": round(sum(delays) / len(delays), 3) if delays else 0.0,
            "p95QueueDelaySeconds": round(quantile(delays, 0.95), 3),
            "p99QueueDelaySeconds": round(quantile(delays, 0.99), 3),
            "meanJctSeconds": round(sum(jcts) / len(jcts), 3) if jcts else 0.0,
            "makespanSeconds": round(makespan, 3),
            "gpuUtilization": round(utilization, 6),
            "failedDispatches": self.failed_dispatches,
            "memberWritesPerJob": round(self.writes / len(jobs), 6) if jobs else 0.0,
            "datasetBytesCopied": self.bytes_copied,
            "fabricMismatches": self.fabric_mismatches,
            "jainFairness": round(jain_index(team_scores), 6),
            "jobs": len(jobs),
            "wallSeconds": round(wall, 3),
        }
        queues = self._groups(lambda job: job.trace_cluster)
        extra: dict[str, Any] = {
            "queues": queues,
            "priorities": self._groups(lambda job: str(job.priority)),
            "queueJainFairness": round(queue_fairness(queues), 6),
            "preemptions": self.evictions,
            "preemptionsPer1000Jobs": round(1000 * self.evictions / len(jobs), 3) if jobs else 0.0,
            "preemptedJobs": sum(1 for e in self.epoch if e),
            "mostEvictionsOfOneJob": max(self.epoch, default=0),
            "gpuHoursLostToPreemption": round(sum(self.lost_gpu_seconds) / 3600, 3),
            "evictionsResumedFromCheckpoint": self.resumed_from_checkpoint,
            "elasticJobs": sum(1 for job in jobs if job.elastic),
            "startedBelowMax": self.elastic_below_max,
            "resizes": self.resizes,
            "spend": self._spend(delays),
        }
        return PolicyResult(
            policy=self.policy.name,
            metrics=metrics,
            delays=delays,
            utilization=self._utilization_series(first, last),
            never_started=never,
            events=self.events,
            member_cycles=sum(m.cycles for m in self.members.values()),
            cpu_seconds=round(cpu, 3),
            extra=extra,
        )
