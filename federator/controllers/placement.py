"""The placement loop: pending TrainingJobs -> placement decisions -> write-ahead -> dispatch.

`job_placement(hub)` (a cleanup_ctx-style factory; hub/app.py lists it after
member_sync, the job cache and job_dispatch) keeps an index of every
TrainingJob fed by the term's one job cache (`jobcache.JobCache`, handed to it
with the Dispatcher and the member syncs: `hub.parts`) and runs placement
cycles:

1. collect: jobs in phase Pending (or Requeued, or none yet) that are not
   suspended, not being deleted, not in dispatch backoff and not in flight,
   as `GangRequest`s (`jobs.gang_request`; status.placement.excludedClusters
   become `excluded_clusters`);
2. decide: `placement.run_cycle` over the latest frozen snapshots
   (`MemberClusters.snapshots`) with the hub's reservation book
   (`hub.parts.reservations`, a `jobs.ReservationLedger`); the new book
   (with each decision's reservation: "assume") replaces the old one;
3. for each decision, in its own task: write the decision into the job's
   status FIRST (phase Placed, cluster, epoch = previous epoch + 1,
   decisionResourceVersion, why-not table, the scores (`score_rows`: the
   chosen cluster's breakdown per score plugin, the runners-up's totals),
   history entry; fenced), and only
   then dispatch it (`controllers/dispatch.py`). If the write-ahead fails or
   is refused (the job changed meanwhile), the reservation is forgotten and
   nothing is dispatched;
4. a queued job with spec.suspend true is not placed and goes to phase
   Suspended (condition Suspended=True); once suspend is false again it is
   queued like a Pending job (condition Suspended=False, reason Resumed);
5. for each gang that fits nowhere: phase Pending, the why-not table in
   status.placement.whyNot and a condition `Schedulable=False` with reason
   `NoClusterFits` (or `TooLargeForAnyCluster` when no cluster could take it
   even empty, `NoClusters` when none is registered, `QuotaExceeded` or
   `QueueNotFound` when its queue refuses it). Written only when the
   reasons change (and at most every few seconds when only numbers change),
   with a history entry when the reason changes;
6. queues (issue 17): the loop keeps the hub's Queues in a list+watch cache
   (`controllers/queues.py`) and passes them to `run_cycle` as
   `QueueQuota`s, with every gang that holds quota (`RunningGang`: queue,
   priority, when it was placed, demand, the GPU model it is charged to,
   whether it borrowed (condition QuotaReserved, reason Borrowed, written
   with the decision), and per node what its member pods hold, from the
   cluster's snapshot builder, or its reservation while they are not
   bound). With no Queue at all and no job naming one, `queues` is None:
   placement exactly as before. A job whose queue no longer selects its
   namespace waits (Schedulable=False, NamespaceNotInQueue); one whose
   queue does not exist waits with QueueNotFound; one its queue has no
   room for waits with QuotaExceeded and placement's message ("queue
   vision uses 96 of 96 A100 GPUs ...; waits for 8"). Pods of queued
   (evicted, requeued) jobs still in a member are set aside in the views
   placement sees: they are being deleted, and counting them would evict
   more gangs than needed. Queue status (used, borrowed, pendingJobs,
   admittedJobs, condition Admitting) is written on change, coalesced.
7. preemption: a decision that carries victims (`Decision.preemption`) is
   carried out in this order, in the decision's task:
   a. the preemptor is read again: if it no longer waits (deleted,
      suspended, placed), nothing is evicted and its reservation goes;
   b. each victim, whole: a fenced status write (only while it is still
      placed at the (cluster, epoch) the decision saw): history Preempted
      and condition Schedulable=False (reason Preempted: "preempted by
      ns/name (reason: lower priority in queue X | reclaiming borrowed
      quota of queue Y)"), back to Pending (`jobs.requeue`; its next
      placement takes epoch + 1) with status.placement.previous set, so
      its next dispatch waits until this copy is gone; an Event Preempted;
      then its member objects are deleted (the drain's pull-back:
      `Dispatcher.delete_previous`; the GC takes what is missed);
   c. only then the preemptor's decision is written (history Preempting and
      Placed, an Event Preempting) and dispatched as any decision. Its
      reservation (made by the cycle on the room the victims free) stays in
      the book across cycles until the member shows its pods bound (or the
      stuck-gang pull-back or the reservation TTL ends it), so no third gang
      takes the room. Should that write be refused (the preemptor was
      deleted or suspended in between), the victims stay evicted.
   Crash safety: a crash after (b) leaves the victims queued with their
   old copy fenced (it is deleted, and never runs beside a new one) and the
   preemptor still Pending in the store: the restarted hub places it again
   (the victims' leftovers do not count against it, so it does not evict
   more) or, after (c), re-dispatches it with its reservation rebuilt. A
   gang is evicted only as a victim of a decision of this loop.
   HubSettings.extra "placement_preemption" false only explains: a job
   that would fit after preemption says "would fit on X after preempting
   A, B" in its Schedulable condition.

8. elastic gangs (issue 19): a running elastic gang lists its bound pods
   (`RunningGang.pods`, from the member object index of this hub's member
   objects; every pod aged by its index, so newest first is highest index
   first) and its request, so preemption may plan to shrink it instead of
   evicting (`Preemption.shrinks`). A shrink is carried out in step 7b,
   before the evictions: a fenced status write (status.replicas smaller by
   the planned pods, only while they are still its highest indices above
   each role's minimum; history Resized with from, to, reason Preempted:
   "shrunk worker 6 -> 4: room for team-a/urgent (reason: ...)"), an Event
   Shrunk, then the pods above the new size are deleted through the member
   client (uid-guarded, as the GC deletes). The preemptor's reservation
   stays as for an eviction. A named background task ("placement:elastic",
   every HubSettings.extra "elastic_tick_seconds", default 5 s) then:
   a. converges every settled elastic gang (no pod failed, finished or
      being deleted: those are status sync's) to its status.replicas: per
      role, deletes the highest-indexed pods above the count, creates pods
      at the lowest free indices below it (rendered at that size; creates
      are idempotent, the PodGroup is left alone);
   b. grows: `placement.plan_growth` over the running gangs, the pending
      queue (pending gangs first), the reservation book and the queues,
      with a cooldown ("elastic_grow_cooldown_seconds", default 60 s) from
      the gang's placement or last resize; each growth is assumed into the
      book (a PLACED reservation of the new pods), written (status.replicas,
      history Resized reason Grown, an Event Grown), then its new pods are
      created.
   Crash safety: status.replicas is written before the member changes and
   is the truth: a hub that dies after writing a shrink leaves pods above
   the new size running until (a) deletes them on the next pass (the
   snapshot counts them while they run, so nothing double-books, and no
   shrink is planned on them); one that dies after writing a growth has (a)
   create the missing pods. Pods are named by role and index and labelled
   with the epoch, so a re-created pod is never a second copy, and the
   written size is within each role's minimum, so a gang is never cut
   below it; the PodGroup's minMember (the minimum) never changes. What is
   lost is the growth's reservation: until the new pods bind, a placement
   may take that room, and they wait in the member (the gang runs on).

Cycles run on job events, on Queue changes, on snapshot changes (polled and
debounced) and on a periodic tick (expired reservations, backoffs that ran
out). Phase timings go to `metrics.loop_phase_seconds{loop="placement"}`. The
job index also keeps `federator_jobs{phase}` and
`federator_placement_queue_depth` current, and a job's move from the queue to
Placed observes `federator_placement_decision_latency_seconds` (from when
this loop saw it enter the queue, or, for a job already queued when the loop
started, from its creation or newest requeue).

Must never: dispatch before the decision is stored, place a job that holds a
placement (phase Placed/Admitted/Running) again, evict a gang that no
decision named, or do I/O inside the pure placement call.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from federator.apis.trainingjob import HISTORY_RESIZED, MAX_SCORE_PARTS, MAX_SCORE_ROWS, placed_replicas
from federator.apiserver.errors import ApiError
from federator.clusters.client import PODS
from federator.clusters.snapshot_builder import SnapshotBuilder
from federator.controllers.context import HubContext
from federator.controllers.dispatch import Dispatcher, crash_point, delete_member_objects
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    ACTIVE_PHASES,
    JOB_KIND,
    JOB_PHASES,
    JobRef,
    PHASE_PENDING,
    PHASE_PLACED,
    PHASE_REQUEUED,
    PHASE_SUSPENDED,
    append_history,
    current_placement,
    dispatches_in_flight,
    gang_request,
    history_entry,
    job_ref,
    member_client,
    parse_timestamp,
    phase_of,
    placed_at,
    placed_gang,
    queued_at,
    record_placed_size,
    requeue,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.queues import QueueCache, QueueStatusWriter, queue_status
from federator.controllers.membercluster import MemberClusters
from federator.controllers.memberobjects import ClusterObjects, member_object
from federator.delegation.adapter import LABEL_INDEX, LABEL_ROLE, pod_name
from federator.hub.kinds import selects_namespace
from federator.obs import get_logger
from federator.placement import (
    Decision,
    GangRequest,
    Profile,
    QueueQuota,
    Rejection,
    ReservationKind,
    Resources,
    RunningGang,
    RunningPod,
    ScoreBreakdown,
    Shrink,
    Unplaced,
    Victim,
    VictimReason,
    run_cycle,
)
from federator.placement.admission import QUOTA_EXCEEDED, QuotaLedger
from federator.placement.cycle import CycleResult
from federator.placement.growth import Growth, GrowthResult, plan_growth
from federator.placement.snapshot import ClusterSnapshot
from federator.store.protocol import StoreError
from federator.runtime.waits import wait_event

__all__ = ["CONDITION_QUOTA_RESERVED", "CycleReport", "PlacementController", "job_placement", "score_rows",
           "why_not_rows"]

_log = get_logger("controllers.placement")

SCHEDULABLE = "Schedulable"
_ELIGIBLE_PHASES = frozenset({PHASE_PENDING, PHASE_REQUEUED, PHASE_SUSPENDED})
CONDITION_SUSPENDED = "Suspended"
_SUSPENDED_MESSAGE = "spec.suspend is true: the job is not placed until it is set to false"
_MAX_WHY_NOT_ROWS = 1024
#: A placed job's quota: True (reason WithinQuota or Borrowed: what preemption may reclaim) once placement
#: charged it to its queue, False (Preempted) once it was evicted.
CONDITION_QUOTA_RESERVED = "QuotaReserved"
REASON_BORROWED = "Borrowed"
REASON_WITHIN_QUOTA = "WithinQuota"
#: The job's queue exists but no longer selects its namespace (queues change after jobs are created).
REASON_NAMESPACE_NOT_IN_QUEUE = "NamespaceNotInQueue"


@dataclass(frozen=True, slots=True)
class CycleReport:
    pending: int
    placed: int
    unplaced: int
    seconds: float


def why_not_rows(why_not: Mapping[str, Rejection]) -> list[dict[str, str]]:
    """status.placement.whyNot rows, sorted by cluster name."""
    rows = []
    for name in sorted(why_not)[:_MAX_WHY_NOT_ROWS]:
        r = why_not[name]
        rows.append({"cluster": r.cluster[:253], "filter": r.filter[:128], "reason": r.code[:128],
                     "message": r.message[:4096]})
    return rows


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def _fit_fields(breakdown: ScoreBreakdown) -> dict[str, Any]:
    return {"nodes": breakdown.nodes_used} | ({"gpuModel": breakdown.gpu_model[:63]} if breakdown.gpu_model else {})


def score_rows(decision: Decision) -> list[dict[str, Any]]:
    """status.placement.scores: the chosen cluster first with its breakdown per score plugin (raw score,
    weight, weighted contribution), then the runners-up best first (totals only), then the clusters that
    were outranked before their fit (the most they could have scored), at most MAX_SCORE_ROWS in all.
    Empty when no score chose the cluster (a preemption picks the cluster needing the fewest victims)."""
    chosen = next((b for b in decision.scores if b.cluster == decision.cluster), None)
    total = _finite(chosen.total) if chosen is not None else None
    if chosen is None or total is None:
        return []
    parts = []
    for part in chosen.parts[:MAX_SCORE_PARTS]:
        weighted, weight, raw = _finite(part.weighted), _finite(part.weight), _finite(part.raw)
        if weighted is not None and weight is not None:
            parts.append({"plugin": part.plugin[:128], "weight": weight, "weighted": weighted}
                         | ({"raw": raw} if raw is not None else {}))
    rows: list[dict[str, Any]] = [{"cluster": chosen.cluster[:253], "total": total, **_fit_fields(chosen),
                                   "parts": parts}]
    others = sorted(((b.cluster, b.total, _fit_fields(b)) for b in decision.scores if b is not chosen),
                    key=lambda r: (-r[1], r[0]))
    others += sorted(((name, bound, {"outranked": True}) for name, bound in decision.outranked.items()),
                     key=lambda r: (-r[1], r[0]))
    for name, value, extra in others:
        if len(rows) >= MAX_SCORE_ROWS:
            break
        if (shown := _finite(value)) is not None:
            rows.append({"cluster": name[:253], "total": shown, **extra})
    return rows


def _queued(job: Mapping[str, Any]) -> bool:
    """The job waits for a placement: Pending or Requeued (or no phase yet), not suspended, not being deleted."""
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if phase_of(job) not in _ELIGIBLE_PHASES:
        return False
    return (job.get("spec") or {}).get("suspend") is not True


def _to_suspend(job: Mapping[str, Any]) -> bool:
    """A job waiting for a placement (not placed, not being deleted) whose spec says suspend, not yet shown
    as Suspended."""
    if (job.get("metadata") or {}).get("deletionTimestamp") or (job.get("spec") or {}).get("suspend") is not True:
        return False
    return phase_of(job) in (PHASE_PENDING, PHASE_REQUEUED)


def _resumed(status: dict[str, Any], *, now: float) -> None:
    """A Suspended job leaves that phase: its Suspended condition turns False (kube Job's JobResumed)."""
    if status.get("phase") == PHASE_SUSPENDED:
        set_condition(status, type=CONDITION_SUSPENDED, state="False", reason="Resumed",
                      message="spec.suspend is false: the job is queued for a placement again", now=now)


def _rv(job: Mapping[str, Any]) -> int:
    try:
        return int((job.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class PlacementController:
    """See the module docstring. Use `job_placement(hub)` to run it."""

    def __init__(self, hub: HubContext, *, dispatcher: Dispatcher, jobs: JobCache, members: MemberClusters) -> None:
        self.hub = hub
        self.rt = hub.kind(JOB_KIND)
        self.dispatcher = dispatcher
        #: the term's one TrainingJob cache, which feeds `jobs` below (placement's own index of it)
        self.job_cache = jobs
        self.members = members
        dispatcher.on_requeued = self._wake_after
        extra = hub.settings.extra
        profile = extra.get("placement_profile")
        self.profile: Profile = profile if isinstance(profile, Profile) else Profile()
        self.tick_seconds = float(extra.get("placement_tick_seconds", 1.0))
        self.snapshot_poll_seconds = float(extra.get("placement_snapshot_poll_seconds", 0.1))
        self.debounce_seconds = float(extra.get("placement_debounce_seconds", 0.005))
        self.unplaced_refresh_seconds = float(extra.get("placement_unplaced_refresh_seconds", 5.0))
        self.max_inflight = int(extra.get("placement_max_inflight", 64))
        #: False: preemption is only explained ("would fit on X after preempting A, B"), never done
        self.preempt = extra.get("placement_preemption", True) is not False
        self.ledger = reservations(hub)
        #: uid -> the newest stored TrainingJob seen
        self.jobs: dict[str, dict[str, Any]] = {}
        #: uids of the jobs in `jobs` that wait for a placement (`_queued`): what a cycle looks at, so that
        #: a cycle costs the queue's length, not the number of jobs the hub ever held
        self.queued: set[str] = set()
        #: uids of suspended jobs whose phase still says Pending or Requeued (`_to_suspend`)
        self.suspending: set[str] = set()
        #: uids whose decision is being written or dispatched (shared: the deletion finalizer waits for them)
        self.inflight = dispatches_in_flight(hub)
        #: uid -> (reasons signature, when written) of the last unplaced status write
        self._unplaced_written: dict[str, tuple[Any, float]] = {}
        self._wake = asyncio.Event()
        self.queues = QueueCache(hub, on_change=self._wake.set)
        self.queue_status = QueueStatusWriter(hub, cache=self.queues)
        #: uids of the jobs in `jobs` that hold a placement (Placed, Admitted, Running with a cluster; not
        #: being deleted): the gangs that hold quota and room
        self.active: set[str] = set()
        #: uid -> (cluster, epoch) of a decision's victims, from the decision until their eviction is written
        self.evicting: dict[str, tuple[str, int]] = {}
        #: uid -> (cluster, epoch, pod name -> (role, index)) of a decision's shrinks, from the decision until
        #: the shrink is written and its pods asked to go (they no longer count as the gang's)
        self._shrinking: dict[str, tuple[str, int, dict[str, tuple[str, int]]]] = {}
        #: elastic gangs (issue 19): the grow pass's period and the cooldown after a placement or resize
        self.elastic_tick_seconds = float(extra.get("elastic_tick_seconds", 5.0))
        self.grow_cooldown_seconds = float(extra.get("elastic_grow_cooldown_seconds", 60.0))
        #: the latest grow plan (who grew, who was held back and why): for tests and debugging
        self.last_growth: GrowthResult | None = None
        #: uid -> (cluster, epoch, GPU model) of the placements this process decided
        self._charged: dict[str, tuple[str, int, str | None]] = {}
        #: uid -> (what it was built from, the RunningGang)
        self._running_cache: dict[str, tuple[tuple[Any, ...], RunningGang]] = {}
        #: uid -> (spec generation, its GangRequest) of the active jobs
        self._gang_cache: dict[str, tuple[Any, GangRequest]] = {}
        self._quota_filter_warned = False
        self._tasks: list[asyncio.Task[None]] = []
        self._work: set[asyncio.Task[None]] = set()
        self._semaphore = asyncio.Semaphore(self.max_inflight)
        self._rng = random.Random()
        self._snapshot_signature: tuple[tuple[str, int], ...] = ()
        #: jobs found Placed at start (decided by an earlier hub): their reservations are rebuilt
        self._unreserved: set[str] = set()
        self.cycles = 0
        #: uid -> the phase label it is counted under in federator_jobs
        self._counted_phase: dict[str, str] = {}
        #: uid -> when (time.time()) the queued job entered the queue
        self._queued_since: dict[str, float] = {}
        self._listed = False
        metrics = hub.metrics
        self._phase_gauges = {phase: metrics.jobs.labels(phase=phase) for phase in JOB_PHASES}

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        for gauge in self._phase_gauges.values():
            gauge.set(0)
        queues_rv = await self.queues.list()
        await self.job_cache.synced.wait()
        for job in list(self.job_cache.jobs.values()):
            self._remember(job)
            if phase_of(job) == PHASE_PLACED and self.ledger.get(job_ref(job).uid) is None:
                self._unreserved.add(job_ref(job).uid)
        self._listed = True
        # From here on the cache's changes feed the index (no await between the read above and this).
        self.job_cache.subscribe(self._job_changed)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervised("cycle", self._cycle_loop()), name="placement:cycle"),
            loop.create_task(self._supervised("queues", self.queues.run(queues_rv)), name="placement:queues"),
            loop.create_task(self._supervised("queue-status", self.queue_status.run()),
                             name="placement:queue-status"),
            loop.create_task(self._supervised("elastic", self._elastic_loop()), name="placement:elastic"),
        ]
        self._wake.set()
        _log.info("placement loop started", jobs=len(self.jobs))

    async def stop(self) -> None:
        self.job_cache.unsubscribe(self._job_changed)
        for task in self._tasks:
            task.cancel()
        for task in list(self._work):
            task.cancel()
        for task in [*self._tasks, *self._work]:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - logged by _supervised
                pass
        self._tasks.clear()
        self._work.clear()
        # Only the leader's loop knows the jobs: a replica that stopped leading exports no stale counts.
        self.hub.metrics.jobs.clear()
        self.hub.metrics.placement_queue_depth.set(0)
        _log.info("placement loop stopped")

    async def _supervised(self, what: str, coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a dead loop must be visible
            _log.error("placement loop failed", loop=what, error=f"{type(e).__name__}: {e}", exc_info=True)
            raise

    def wake(self) -> None:
        self._wake.set()

    def _wake_after(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(max(0.0, delay) + 0.01, self._wake.set)

    # ------------------------------------------------------------ the job index

    def _remember(self, job: dict[str, Any]) -> bool:
        """Keep the newer of `job` and what the index holds; True if `job` was newer."""
        uid = job_ref(job).uid
        if not uid:
            return False
        known = self.jobs.get(uid)
        if known is not None and _rv(known) >= _rv(job):
            return False
        self.jobs[uid] = job
        self._count(uid, phase_of(job))
        if phase_of(job) in ACTIVE_PHASES and current_placement(job)[0] is not None and not (
                job.get("metadata") or {}).get("deletionTimestamp"):
            self.active.add(uid)
        else:
            self.active.discard(uid)
            self._running_cache.pop(uid, None)
            self._gang_cache.pop(uid, None)
        if _to_suspend(job):
            self.suspending.add(uid)
            self._wake.set()
        else:
            self.suspending.discard(uid)
        if _queued(job):
            if uid not in self.queued:
                self._queued_since[uid] = time.time() if self._listed else (queued_at(job) or time.time())
            self.queued.add(uid)
        else:
            self.queued.discard(uid)
            since = self._queued_since.pop(uid, None)
            if since is not None and phase_of(job) == PHASE_PLACED:
                self.hub.metrics.placement_decision_latency_seconds.observe(max(0.0, time.time() - since))
        self.hub.metrics.placement_queue_depth.set(len(self.queued))
        return True

    def _count(self, uid: str, phase: str | None) -> None:
        """Move the job between the federator_jobs{phase} counts (None: it is gone)."""
        label = phase if phase is None or phase in self._phase_gauges else PHASE_PENDING
        previous = self._counted_phase.get(uid)
        if previous == label:
            return
        if previous is not None:
            self._phase_gauges[previous].dec()
        if label is None:
            self._counted_phase.pop(uid, None)
        else:
            self._counted_phase[uid] = label
            self._phase_gauges[label].inc()

    def _forget_job(self, uid: str) -> None:
        # The job's reservation stays: its member pods may still exist and get bound (until the cleanup
        # deletes them, which forgets the reservation, or the snapshot shows them, which releases it).
        self.jobs.pop(uid, None)
        self.queued.discard(uid)
        self.suspending.discard(uid)
        self._count(uid, None)
        self._queued_since.pop(uid, None)
        self.hub.metrics.placement_queue_depth.set(len(self.queued))
        self._unplaced_written.pop(uid, None)
        self._unreserved.discard(uid)
        self.dispatcher.retries.forget(uid)
        self.active.discard(uid)
        self._charged.pop(uid, None)
        self._running_cache.pop(uid, None)
        self._gang_cache.pop(uid, None)

    def _job_changed(self, uid: str, job: dict[str, Any] | None) -> None:
        """The job cache's change of one job (None: deleted) into the index; wakes the cycle for a job that
        may be placed now."""
        if job is None:
            self._forget_job(uid)
        elif self._remember(job) and self._eligible(job, now=time.time()):
            self._wake.set()

    # ------------------------------------------------------------ the cycle

    def _eligible(self, job: Mapping[str, Any], *, now: float) -> bool:
        if not _queued(job):
            return False
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if uid in self.inflight:
            return False
        return self.dispatcher.retries.not_before(uid) <= now

    def _snapshots(self) -> dict[str, ClusterSnapshot]:
        return dict(self.members.snapshots)

    def _signature(self, snapshots: Mapping[str, ClusterSnapshot]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((name, id(snap)) for name, snap in snapshots.items()))

    async def _cycle_loop(self) -> None:
        last_tick = time.monotonic()
        while True:
            await wait_event(self._wake, self.snapshot_poll_seconds)
            woke = self._wake.is_set()
            now_mono = time.monotonic()
            ticked = now_mono - last_tick >= self.tick_seconds
            snapshots = self._snapshots()
            signature = self._signature(snapshots)
            changed = signature != self._snapshot_signature
            if not (woke or ticked or changed):
                continue
            if woke and self.debounce_seconds > 0:
                await asyncio.sleep(self.debounce_seconds)  # coalesce a burst of job events into one cycle
            self._wake.clear()
            if ticked:
                last_tick = now_mono
            self._snapshot_signature = signature
            try:
                await self.run_once()
            except Exception as e:  # noqa: BLE001 - one bad cycle must not end placement for good
                _log.error("placement cycle failed; retrying on the next tick", error=f"{type(e).__name__}: {e}",
                           exc_info=True, waiting_for="the next tick")
                await asyncio.sleep(min(1.0, self.tick_seconds))

    async def run_once(self) -> CycleReport:
        """One placement cycle (see the module docstring); decisions are written and dispatched in tasks."""
        metrics = self.hub.metrics.loop_phase_seconds
        started = time.perf_counter()
        now = time.time()
        snapshots = self._snapshots()
        gangs: list[GangRequest] = []
        jobs_by_uid: dict[str, dict[str, Any]] = {}
        for uid in sorted(self.suspending):
            suspended = self.jobs.get(uid)
            if suspended is not None:
                await self._record_suspended(suspended, now=now)
        for uid in sorted(self.queued):
            job = self.jobs[uid]
            if not self._eligible(job, now=now):
                continue
            try:
                gang = gang_request(job, now=now)
            except (ValueError, TypeError) as e:
                await self._unschedulable(job, "InvalidSpec", str(e), now=now)
                continue
            refused = self._queue_refuses(gang, job)
            if refused is not None:
                await self._unschedulable(job, REASON_NAMESPACE_NOT_IN_QUEUE, refused, now=now)
                continue
            gangs.append(gang)
            jobs_by_uid[uid] = job
        queues = self._cycle_queues(gangs)
        views: Mapping[str, ClusterSnapshot] = snapshots
        running: list[RunningGang] = []
        if queues is not None:
            views = self._without_leftovers(snapshots)
        if self._unreserved:
            self._rebuild_reservations(views, now=now)
        if queues is not None:
            running = self._running(snapshots)
        collected = time.perf_counter()
        metrics.labels(loop="placement", phase="collect").observe(collected - started)
        if not gangs and len(self.ledger) == 0:
            if queues is not None:
                self._want_queue_status(queues, running, result=None, now=now)
            return CycleReport(pending=0, placed=0, unplaced=0, seconds=collected - started)
        result = run_cycle(gangs, views, self.profile, now=now, reservations=self.ledger.book, queues=queues,
                           running=running, preempt=self.preempt)
        # Assume: the new book holds every decision's reservation before anything is written.
        self.ledger.book = result.reservations
        decided = time.perf_counter()
        metrics.labels(loop="placement", phase="decide").observe(decided - collected)
        self.cycles += 1
        for decision in result.decisions:
            job = jobs_by_uid[decision.gang_uid]
            self.inflight.begin(decision.gang_uid)
            victims = self._victims(decision)
            self.hub.metrics.placement_decisions.labels(result="placed").inc()
            self._spawn(self._place(job, decision, victims), name=f"placement:place:{decision.gang_key}")
        for unplaced in result.unplaced:
            self.hub.metrics.placement_decisions.labels(result="unplaced").inc()
            await self._record_unplaced(jobs_by_uid[unplaced.gang_uid], unplaced, snapshots=snapshots, now=now)
        if queues is not None:
            self._want_queue_status(queues, running, result=result, now=now)
        recorded = time.perf_counter()
        metrics.labels(loop="placement", phase="unplaced").observe(recorded - decided)
        return CycleReport(pending=len(gangs), placed=len(result.decisions), unplaced=len(result.unplaced),
                           seconds=recorded - started)

    # ------------------------------------------------------------ queues: what a cycle charges, who runs

    def _queue_refuses(self, gang: GangRequest, job: Mapping[str, Any]) -> str | None:
        """Why the job's queue may not take it now: it exists but no longer selects the job's namespace
        (a missing queue is placement's QueueNotFound). None when it may."""
        if not gang.queue:
            return None
        queue = self.queues.objects.get(gang.queue)
        namespace = job_ref(job).namespace
        if queue is None or selects_namespace(queue, namespace):
            return None
        return (f"queue {gang.queue} does not select namespace {namespace} (its spec.namespaces changed after the "
                f"job was created); the job waits until it does, or until spec.queue names a queue that does")

    def _cycle_queues(self, gangs: list[GangRequest]) -> dict[str, QueueQuota] | None:
        """The cycle's queues: None (placement as before queues existed) when the hub holds no Queue and no
        gang names one; else every readable Queue (a gang naming a missing one waits: QueueNotFound)."""
        quotas = self.queues.quotas()
        if quotas is None and not any(gang.queue for gang in gangs):
            return None
        if "quota" not in self.profile.filters:
            if not self._quota_filter_warned:
                self._quota_filter_warned = True
                _log.warning("the placement profile has no 'quota' filter: Queues are not enforced",
                             profile=self.profile.name)
            return None
        return dict(quotas or {})

    def _builder(self, cluster: str, snapshot: ClusterSnapshot | None) -> SnapshotBuilder | None:
        """The member sync's snapshot builder of `cluster`, when `snapshot` is the one it built (its tables
        then hold exactly the pods `snapshot` counts)."""
        sync = self.members.syncs.get(cluster)
        builder = sync.builder if sync is not None else None
        if not isinstance(builder, SnapshotBuilder) or snapshot is None or builder.snapshot is not snapshot:
            return None
        return builder

    def _without_leftovers(self, snapshots: Mapping[str, ClusterSnapshot]) -> dict[str, ClusterSnapshot]:
        """The snapshots with the pods of queued jobs released: what an evicted (or otherwise requeued) gang
        left in a member is being deleted (its next dispatch waits for that, and the GC takes what is
        missed), so it is room for the gang that made it, not a reason to evict more gangs."""
        views = dict(snapshots)
        for name, snapshot in snapshots.items():
            leftovers = [uid for uid in snapshot.bound_pods if uid in self.queued]
            builder = self._builder(name, snapshot) if leftovers else None
            if builder is None:
                continue
            released: dict[str, Resources] = {}
            for uid in leftovers:
                job = self.jobs.get(uid)
                epoch = current_placement(job)[1] if job is not None else 0
                for node, amount in builder.job_amounts(uid, epoch=epoch, up_to=True).items():
                    previous = released.get(node)
                    released[node] = amount if previous is None else previous + amount
            try:
                views[name] = snapshot.with_allocation_changes(released, release=True)
            except ValueError as e:  # would mean the builder and its snapshot disagree: keep the snapshot
                _log.warning("could not set a requeued gang's leftover pods aside", cluster=name, error=str(e))
        return views

    def _gang_of(self, uid: str, job: Mapping[str, Any]) -> GangRequest | None:
        generation = (job.get("metadata") or {}).get("generation")
        cached = self._gang_cache.get(uid)
        if cached is not None and cached[0] == generation:
            return cached[1]
        try:
            gang = gang_request(job, now=time.time())
        except (ValueError, TypeError):
            return None
        self._gang_cache[uid] = (generation, gang)
        return gang

    def _running(self, snapshots: Mapping[str, ClusterSnapshot]) -> list[RunningGang]:
        """Every gang that holds quota and room (placed, admitted or running; not finished, not being deleted
        or evicted), with what its pods hold per node, or its reservation while they are not bound."""
        out: list[RunningGang] = []
        for uid in sorted(self.active):
            if uid in self.evicting:
                continue
            job = self.jobs.get(uid)
            cluster, epoch = current_placement(job) if job is not None else (None, 0)
            if job is None or cluster is None:
                continue
            snapshot = snapshots.get(cluster)
            reservation = self.ledger.get(uid)
            if reservation is not None and (reservation.kind is not ReservationKind.PLACED
                                            or reservation.cluster != cluster):
                reservation = None
            bound = snapshot.bound_pods.get(uid, 0) if snapshot is not None else -1
            gang = self._gang_of(uid, job)
            if gang is None:
                continue
            started = placed_at(job, epoch=epoch) or gang.submitted_at
            # an elastic gang lists its bound pods (what a preemption may shrink), unless its reservation
            # still stands for pods not bound yet
            pods = self._member_pods(uid, gang, job, cluster=cluster, epoch=epoch, started=started) \
                if gang.elastic and reservation is None else ()
            basis = (_rv(job), bound, id(reservation), self._charged.get(uid), pods)
            cached = self._running_cache.get(uid)
            if cached is not None and cached[0] == basis:
                out.append(cached[1])
                continue
            if reservation is not None:
                amounts: Mapping[str, Resources] = reservation.amounts
            elif pods:
                amounts = {}  # the sum of its pods'
            else:
                builder = self._builder(cluster, snapshot)
                amounts = builder.job_amounts(uid, epoch=epoch) if builder is not None else {}
            try:
                gang_running = RunningGang(
                    uid=uid, key=gang.key, cluster=cluster, queue=gang.queue, priority=gang.priority,
                    started_at=started,
                    demand=placed_gang(job, gang).total,
                    gpu_model=self._model_of(uid, gang, cluster=cluster, epoch=epoch,
                                             amounts=amounts or _pod_amounts(pods), snapshot=snapshot),
                    amounts=amounts, borrowed=_borrowed(job), pods=pods, request=gang if pods else None,
                )
            except (ValueError, TypeError) as e:
                _log.warning("a placed job cannot be counted against its queue", job=gang.key, error=str(e))
                continue
            self._running_cache[uid] = (basis, gang_running)
            out.append(gang_running)
        return out

    def _member_pods(self, uid: str, gang: GangRequest, job: Mapping[str, Any], *, cluster: str, epoch: int,
                     started: float) -> tuple[RunningPod, ...]:
        """The bound, live pods of an elastic gang at (cluster, epoch), from the member object index of this hub's
        member objects; () when the index is not ready or a pod cannot be read (nothing is planned on it).

        Every pod gets the gang's placement time: a pod's age is its index (a gang's pods are created in
        index order, and each growth appends indices after the highest), so placement's newest-first
        removes the highest indices first. Pods beyond their role's placed count (the highest indices) are
        left out: a shrink written before its pods went (`_trim_and_fill` deletes them)."""
        index = _member_index(self.hub, cluster)
        if index is None:
            return ()
        requests = {role.name: role.requests for role in gang.roles}
        going = self._shrinking.get(uid, (cluster, epoch, {}))[2]
        sizes = placed_replicas(job)
        out: list[RunningPod] = []
        for pod in index.gang(uid, epoch)[1]:
            view = _pod_of(pod)
            if view is None:
                return ()
            name, role, number, node, live = view
            if not live or name in going:
                continue
            if role not in requests or number < 0 or not node:
                return ()
            try:
                out.append(RunningPod(name=name, role=role, node=node, requests=requests[role], started_at=started,
                                      index=number))
            except (ValueError, TypeError):
                return ()
        out.sort(key=lambda p: (p.role, p.index))
        kept: list[RunningPod] = []
        for role, count in sizes.items():
            kept.extend([p for p in out if p.role == role][:count])
        return tuple(kept)

    def _model_of(self, uid: str, gang: GangRequest, *, cluster: str, epoch: int, amounts: Mapping[str, Resources],
                  snapshot: ClusterSnapshot | None) -> str | None:
        """The GPU model a placed gang is charged to: the one this process placed it on, else the model of
        the nodes its pods (or reservation) hold GPUs on, else its first accepted model, else the cluster's."""
        if not gang.needs_gpu:
            return None
        charged = self._charged.get(uid)
        if charged is not None and charged[:2] == (cluster, epoch) and charged[2]:
            return charged[2]
        if snapshot is not None:
            for node_name, amount in sorted(amounts.items()):
                node = snapshot.nodes.get(node_name)
                if amount.gpu and node is not None and node.gpu_model:
                    return node.model_key
        if gang.gpu_models:
            return gang.gpu_models[0]
        models = snapshot.index.gpu_models if snapshot is not None else ()
        return models[0] if models else "unknown"

    def _victims(self, decision: Decision) -> list[tuple[Victim, dict[str, Any] | None]]:
        """The decision's victims with their jobs as this loop knows them, marked as being evicted (no longer
        counted as running, never chosen again) until their eviction is written."""
        victims: list[tuple[Victim, dict[str, Any] | None]] = []
        for victim in decision.preemption.victims if decision.preemption is not None else ():
            job = self.jobs.get(victim.uid)
            if job is not None:
                cluster, epoch = current_placement(job)
                self.evicting[victim.uid] = (cluster or decision.cluster, epoch)
            victims.append((victim, job))
        for shrink in decision.preemption.shrinks if decision.preemption is not None else ():
            job = self.jobs.get(shrink.uid)
            cached = self._running_cache.get(shrink.uid)
            if job is None or cached is None:
                continue  # deleted meanwhile: its room is being freed anyway
            cluster, epoch = current_placement(job)
            pods = {pod.name: (pod.role, pod.index) for pod in cached[1].pods}
            # a planned pod this loop no longer knows: an empty plan, refused by `_shrink` (decided again)
            planned = {name: pods[name] for name in shrink.pods if name in pods}
            self._shrinking[shrink.uid] = (cluster or decision.cluster, epoch,
                                           planned if len(planned) == len(shrink.pods) else {})
        return victims

    def _want_queue_status(self, queues: Mapping[str, QueueQuota], running: list[RunningGang], *,
                           result: CycleResult | None, now: float) -> None:
        """Each Queue's status after this cycle (written by `queue_status` only when it changed)."""
        usage = result.usage if result is not None and result.usage else QuotaLedger(queues, running).usage()
        pending: dict[str, int] = {}
        for uid in self.queued:
            queue = ((self.jobs[uid].get("spec") or {}).get("queue"))
            if isinstance(queue, str) and queue:
                pending[queue] = pending.get(queue, 0) + 1
        blocked: dict[str, list[str]] = {}
        for unplaced in result.unplaced if result is not None else ():
            block = unplaced.quota
            if block is not None and block.code == QUOTA_EXCEEDED:
                blocked.setdefault(block.queue, []).append(f"{unplaced.gang_key}: {block.message}")
        for name in queues:
            obj = self.queues.objects.get(name)
            if obj is None:
                continue
            generation = (obj.get("metadata") or {}).get("generation")
            waiting = blocked.get(name, [])
            self.queue_status.want(name, queue_status(
                self.queue_status.stored_status(name), usage=usage.get(name), pending=pending.get(name, 0),
                waiting_for_quota=len(waiting), head_block=waiting[0] if waiting else "",
                generation=generation if type(generation) is int else None, now=now))

    def _rebuild_reservations(self, snapshots: Mapping[str, ClusterSnapshot], *, now: float) -> None:
        """Reserve again what jobs decided before this hub started hold, until their pods show as bound.

        A job left in phase Placed by a crashed hub has member pods that may not be bound yet, so the
        snapshot does not count them; without a reservation the next decision could take the same
        room. The amounts come from fitting the gang on its cluster's snapshot (health and cordon
        ignored: the decision is already made); a cluster not synced yet is tried again next cycle."""
        for uid in list(self._unreserved):
            job = self.jobs.get(uid)
            cluster, _ = current_placement(job) if job is not None else (None, 0)
            if job is None or phase_of(job) != PHASE_PLACED or cluster is None or self.ledger.get(uid) is not None:
                self._unreserved.discard(uid)
                continue
            snapshot = snapshots.get(cluster)
            # not synced yet: a restarted hub without a checkpoint publishes each cluster's empty snapshot
            # before its first LIST lands (the crash-safety test met "no node is both ready and
            # schedulable (0 nodes)" here); a cluster with no nodes can hold nothing anyway
            if snapshot is None or not snapshot.nodes:
                continue
            self._unreserved.discard(uid)
            try:
                gang = gang_request(job, now=now)
            except (ValueError, TypeError):
                continue
            if snapshot.bound_pods.get(uid, 0) >= gang.pod_count:
                _log.info("no reservation needed for a job placed before this hub started: its pods are bound",
                          job=gang.key, cluster=cluster, pods=gang.pod_count)
                continue
            view = snapshot.with_info(replace(snapshot.info, healthy=True, cordoned=False))
            gang = replace(gang, excluded_clusters={})
            result = run_cycle([gang], {cluster: view}, self.profile, now=now, reservations=self.ledger.book)
            rebuilt = result.reservations.get(uid)
            if result.decisions and rebuilt is not None:
                self.ledger.book = self.ledger.book.reserve(rebuilt)
                _log.info("reservation rebuilt for a job placed before this hub started", job=gang.key,
                          cluster=cluster, pods=gang.pod_count)
            else:
                why = next((str(u.why_not.get(cluster)) for u in result.unplaced if cluster in u.why_not), None)
                _log.info("no room found to re-reserve for a job placed before this hub started; its member "
                          "pods will show in the snapshot once bound", job=gang.key, cluster=cluster,
                          why_not=(why or "")[:512])

    def _spawn(self, coro: Any, *, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    # ------------------------------------------------------------ a decision: write-ahead, then dispatch

    async def _place(self, job: dict[str, Any], decision: Decision,
                     victims: list[tuple[Victim, dict[str, Any] | None]]) -> None:
        ref = job_ref(job)
        metrics = self.hub.metrics.loop_phase_seconds
        try:
            async with self._semaphore:
                if decision.preemption is not None and not await self._make_room(job, decision, victims):
                    self.ledger.forget(ref.uid)
                    return
                started = time.perf_counter()
                stored = await self._write_decision(job, decision)
                written = time.perf_counter()
                metrics.labels(loop="placement", phase="record").observe(written - started)
                if stored is None:
                    self.ledger.forget(ref.uid)
                    return
                self._remember(stored)
                cluster, epoch = current_placement(stored)
                assert cluster == decision.cluster
                crash_point("after-decision", job=ref.key)
                result = await self.dispatcher.dispatch(stored, cluster=decision.cluster, epoch=epoch,
                                                        assignment=decision.assignment, decision_stored=True)
                metrics.labels(loop="placement", phase="dispatch").observe(time.perf_counter() - written)
                if not result.ok:
                    self.ledger.forget(ref.uid)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one job's failure must not stop the loop
            self.ledger.forget(ref.uid)
            _log.error("placing a job failed; it stays in the queue", job=ref.key, cluster=decision.cluster,
                       error=f"{type(e).__name__}: {e}", exc_info=not isinstance(e, (ApiError, StoreError)))
        finally:
            for victim, _ in victims:
                self.evicting.pop(victim.uid, None)
            for shrink in decision.preemption.shrinks if decision.preemption is not None else ():
                self._shrinking.pop(shrink.uid, None)
            self.inflight.end(ref.uid)
            self._wake.set()

    # ------------------------------------------------------------ preemption: evict the victims, then place

    async def _make_room(self, job: Mapping[str, Any], decision: Decision,
                         victims: list[tuple[Victim, dict[str, Any] | None]]) -> bool:
        """Evict the decision's victims, whole, before the preemptor's decision is written (see the module
        docstring for why in this order). False (nothing placed; the next cycle decides again) when the
        preemptor no longer waits for a placement or an eviction could not be written."""
        ref = job_ref(job)
        try:
            fresh = await self.hub.storage.get(self.rt, namespace=ref.namespace, name=ref.name)
        except (ApiError, StoreError) as e:
            _log.warning("could not read a preempting job; nothing evicted, it stays in the queue", job=ref.key,
                         error=str(e))
            return False
        if job_ref(fresh).uid != ref.uid or not _queued(fresh):
            _log.info("preemption dropped: the preempting job changed meanwhile; nothing evicted", job=ref.key,
                      phase=phase_of(fresh))
            return False
        now = time.time()
        # shrinks first: a shrink that cannot be done drops the preemption before anyone is evicted (a
        # shrunk gang grows back on its own; an evicted one is queued again)
        assert decision.preemption is not None
        shrunk = await asyncio.gather(*(self._shrink(shrink, preemptor=ref.key, now=now)
                                        for shrink in decision.preemption.shrinks))
        if not all(shrunk):
            return False
        done = await asyncio.gather(*(self._evict(victim, victim_job, preemptor=ref.key, queue=decision.queue,
                                                  now=now)
                                      for victim, victim_job in victims))
        if not all(done):
            return False
        crash_point("after-eviction", job=ref.key)
        return True

    async def _shrink(self, shrink: Shrink, *, preemptor: str, now: float) -> bool:
        """Shrink one elastic gang as the decision planned: a fenced status write (status.replicas smaller by
        the planned pods, history Resized with from/to/reason Preempted), an Event, then its pods above the
        planned pods are deleted (what is missed, `_trim_and_fill` deletes). False (the preemption is dropped) when the write failed or the
        planned pods are not the gang's highest indices above its minimum any more."""
        where = self._shrinking.get(shrink.uid)
        job = self.jobs.get(shrink.uid)
        if job is None or where is None or not where[2]:
            return job is None  # deleted meanwhile (its room is being freed); unknown pods: decide again
        cluster, epoch, removed = where
        ref = job_ref(job)
        gang = self._gang_of(shrink.uid, job)
        if gang is None:
            return False
        lows = {role.name: role.low for role in gang.roles}
        why = (f"lower priority in queue {shrink.queue}" if shrink.reason is VictimReason.LOWER_PRIORITY
               else "reclaiming borrowed quota")
        refused: list[str] = []
        message = ""

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal message
            if (stored.get("metadata") or {}).get("deletionTimestamp") or phase_of(stored) not in ACTIVE_PHASES \
                    or current_placement(stored) != (cluster, epoch):
                return None  # finished, deleted or moved meanwhile: its room is freed anyway
            before = placed_replicas(stored)
            after = dict(before)
            for role, _ in removed.values():
                after[role] = after.get(role, 0) - 1
            if any(role not in before or number < after[role] for role, number in removed.values()) or any(
                    after[role] < lows.get(role, before[role]) for role in after):
                refused.append(f"pods {sorted(removed)} are not its highest above the minimum at {before}")
                return None
            changed = {role: (before[role], after[role]) for role in after if after[role] != before[role]}
            message = (f"shrunk {', '.join(f'{r} {a} -> {b}' for r, (a, b) in sorted(changed.items()))}: room for "
                       f"{preemptor} (reason: {why})")
            status = stored["status"]
            status["replicas"] = after
            entry = history_entry(HISTORY_RESIZED, cluster=cluster, epoch=epoch, message=message, now=now)
            entry.update({"from": before, "to": after, "reason": "Preempted"})
            append_history(status, entry)
            return stored

        written, stored = await self._write_status(ref, mutate, failed="could not shrink an elastic gang; the "
                                                   "preemption is dropped and decided again", cluster=cluster)
        if not written or refused:
            if refused:
                _log.warning("shrink refused; the preemption is decided again", job=ref.key, why=refused[0])
            return False
        if stored is None:
            return True
        self._remember(stored)
        self.hub.events.record(stored, controller="placement", reason="Shrunk", action="Preempt", warning=True,
                               message=message)
        _log.info("elastic gang shrunk", job=ref.key, cluster=cluster, epoch=epoch, preemptor=preemptor,
                  pods=sorted(removed))
        crash_point("after-shrink-write", job=ref.key)
        index = _member_index(self.hub, cluster)
        client = member_client(self.hub, cluster)
        going = [member_object(cluster, PODS, pod) for pod in (index.gang(ref.uid, epoch)[1] if index else ())
                 if (pod.get("metadata") or {}).get("name") in removed]
        if client is not None and going:
            try:
                await delete_member_objects(client, going, cluster=cluster)
            except Exception as e:  # noqa: BLE001 - the elastic pass deletes what is left above the size
                _log.warning("could not delete a shrunk gang's pods; the elastic pass will", job=ref.key,
                             cluster=cluster, error=f"{type(e).__name__}: {e}")
        return True

    # ------------------------------------------------------------ elastic gangs: converge, grow

    async def _trim_and_fill(self, job: Mapping[str, Any]) -> None:
        """Make an elastic gang's member pods at its (cluster, epoch) as many per role as status.replicas:
        delete the highest-indexed pods above a role's count (a shrink), create pods at the lowest free
        indices below it (a growth). Only on a settled gang: no pod of it failed, finished or being
        deleted (status sync restarts or shrinks for failed workers; a deletion in progress is someone's
        resize). So a hub that died between writing status.replicas and changing the member converges here
        on its next pass: the written size is the truth, never exceeded for long and never cut below
        (status.replicas is always within each role's minimum and maximum); pods are named by role and
        index, so a pod created again is never a second copy."""
        cluster, epoch = current_placement(job)
        status = job.get("status") or {}
        recorded = status.get("replicas")
        if cluster is None or phase_of(job) not in ACTIVE_PHASES or (job.get("metadata") or {}).get(
                "deletionTimestamp") or not isinstance(recorded, Mapping) or dict(recorded) != placed_replicas(job):
            return
        index = _member_index(self.hub, cluster)
        if index is None:
            return
        ref = job_ref(job)
        by_role: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
        for pod in index.gang(ref.uid, epoch)[1]:
            view = _pod_of(pod)
            if view is None:
                return
            _, role, number, _, _ = view
            phase = (pod.get("status") or {}).get("phase")
            if (pod.get("metadata") or {}).get("deletionTimestamp") or phase in ("Succeeded", "Failed") \
                    or role not in recorded or number < 0:
                return  # not settled (or not readable): leave it to its owner, look again next pass
            by_role.setdefault(role, []).append((number, pod))
        extra: list[Any] = []
        missing: dict[str, Mapping[str, str]] = {}
        for role, count in recorded.items():
            pods = sorted(by_role.get(role, ()), key=lambda item: item[0])
            extra.extend(member_object(cluster, PODS, pod) for _, pod in pods[count:][::-1])
            used = {number for number, _ in pods}
            free = (i for i in range(count + len(used)) if i not in used)
            for _ in range(count - len(pods)):
                missing[pod_name(job_name=ref.name, job_uid=ref.uid, role=role, index=next(free))] = {}
        try:
            if extra:
                client = member_client(self.hub, cluster)
                if client is not None:
                    outcome = await delete_member_objects(client, extra, cluster=cluster)
                    _log.info("elastic gang trimmed to its size", job=ref.key, cluster=cluster, epoch=epoch,
                              size=_sizes(recorded), deleted=outcome.requested)
            if missing and ref.uid not in self.inflight:
                created = await self.dispatcher.recreate_pods(job, cluster=cluster, epoch=epoch, pods=missing)
                _log.info("elastic gang filled to its size", job=ref.key, cluster=cluster, epoch=epoch,
                          size=_sizes(recorded), created=created)
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            _log.warning("could not bring an elastic gang to its size; trying again", job=ref.key, cluster=cluster,
                         error=f"{type(e).__name__}: {e}", waiting_for="the next elastic pass")

    async def _elastic_loop(self) -> None:
        while True:
            await asyncio.sleep(self.elastic_tick_seconds)
            try:
                await self.elastic_pass()
            except Exception as e:  # noqa: BLE001 - one bad pass must not end the loop
                _log.error("elastic pass failed; retrying on the next tick", error=f"{type(e).__name__}: {e}",
                           exc_info=True, waiting_for="the next tick")

    async def elastic_pass(self) -> int:
        """Converge every elastic gang to its status.replicas (`_trim_and_fill`), then grow the ones
        `placement.plan_growth` lets grow (pending gangs first, cooldown after a placement or resize).
        Returns how many grew."""
        started = time.perf_counter()
        now = time.time()
        for uid in sorted(self.active):
            job = self.jobs.get(uid)
            gang = self._gang_of(uid, job) if job is not None and uid not in self.inflight else None
            if job is not None and gang is not None and gang.elastic and uid not in self._shrinking:
                await self._trim_and_fill(job)
        snapshots = self._snapshots()
        pending: list[GangRequest] = []
        for uid in sorted(self.queued):
            try:
                pending.append(gang_request(self.jobs[uid], now=now))
            except (ValueError, TypeError):
                continue
        queues = self._cycle_queues(pending)
        views = self._without_leftovers(snapshots) if queues is not None else snapshots
        running = self._running(snapshots)
        last: dict[str, float] = {}
        for gang_running in running:
            job = self.jobs.get(gang_running.uid)
            if job is not None:
                when = _last_resized(job)
                last[gang_running.uid] = when if when is not None else gang_running.started_at
        result = plan_growth(running, views, pending, self.profile, now=now, last_resized=last,
                             cooldown_seconds=self.grow_cooldown_seconds, reservations=self.ledger.book, queues=queues)
        self.hub.metrics.loop_phase_seconds.labels(loop="placement", phase="grow").observe(
            time.perf_counter() - started)
        self.last_growth = result
        if not result.growths:
            return 0
        self.ledger.book = result.reservations  # assume, as a decision does
        for growth in result.growths:
            job = self.jobs.get(growth.gang_uid)
            if job is None:
                self.ledger.forget(growth.gang_uid)
                continue
            self.inflight.begin(growth.gang_uid)
            self._spawn(self._grow(job, growth), name=f"placement:grow:{growth.gang_key}")
        return len(result.growths)

    async def _grow(self, job: Mapping[str, Any], growth: Growth) -> None:
        """Write the growth (status.replicas, history Resized with reason Grown; fenced on the placement the
        plan saw), an Event, then create the new pods (rendered at the new size; creates are idempotent and
        the PodGroup is left as it is: its minimum does not change)."""
        ref = job_ref(job)
        cluster, epoch = current_placement(job)
        now = time.time()
        message = ""
        try:
            def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
                nonlocal message
                if (stored.get("metadata") or {}).get("deletionTimestamp") or phase_of(stored) not in ACTIVE_PHASES \
                        or current_placement(stored) != (growth.cluster, epoch):
                    return None
                before = placed_replicas(stored)
                after = dict(growth.replicas)
                if set(after) != set(before) or any(after[r] < before[r] for r in after) or after == before:
                    return None  # resized meanwhile: the next pass plans again
                changed = {r: (before[r], after[r]) for r in after if after[r] != before[r]}
                message = (f"grew {', '.join(f'{r} {a} -> {b}' for r, (a, b) in sorted(changed.items()))}: room in "
                           f"{growth.cluster} that no pending job could use")
                status = stored["status"]
                status["replicas"] = after
                entry = history_entry(HISTORY_RESIZED, cluster=growth.cluster, epoch=epoch, message=message, now=now)
                entry.update({"from": before, "to": after, "reason": "Grown"})
                append_history(status, entry)
                return stored

            written, stored = await self._write_status(ref, mutate, failed="could not record a growth; planned "
                                                       "again next pass", cluster=growth.cluster)
            if not written or stored is None or cluster != growth.cluster:
                self.ledger.forget(ref.uid)
                return
            self._remember(stored)
            self.hub.events.record(stored, controller="placement", reason="Grown", action="Resize", message=message)
            _log.info("elastic gang grown", job=ref.key, cluster=growth.cluster, epoch=epoch,
                      size=_sizes(growth.replicas), pods=growth.pods)
            crash_point("after-grow-write", job=ref.key)
            names: dict[str, Mapping[str, str]] = {pod_name(job_name=ref.name, job_uid=ref.uid, role=p.role, index=p.index): {}
                     for p in growth.added}
            await self.dispatcher.recreate_pods(stored, cluster=growth.cluster, epoch=epoch, pods=names)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the next pass fills what is missing
            self.ledger.forget(ref.uid)
            _log.warning("growing an elastic gang failed; the next pass creates what is missing", job=ref.key,
                         error=f"{type(e).__name__}: {e}", waiting_for="the next elastic pass")
        finally:
            self.inflight.end(ref.uid)

    async def _evict(self, victim: Victim, job: dict[str, Any] | None, *, preemptor: str, queue: str,
                     now: float) -> bool:
        """Send one victim back to the queue (fenced: only while it is still placed where the decision saw
        it), then ask its member to delete its gang. False when the write failed (the caller gives up)."""
        where = self.evicting.get(victim.uid)
        if job is None or where is None:
            return True  # deleted meanwhile: its room is being freed anyway
        cluster, epoch = where
        ref = job_ref(job)
        why = (f"lower priority in queue {victim.queue}" if victim.reason is VictimReason.LOWER_PRIORITY
               else f"reclaiming borrowed quota of queue {queue}")
        message = (f"preempted by {preemptor} (reason: {why}); its gang in {cluster} (epoch {epoch}) is deleted "
                   f"and the job is queued again")

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if (stored.get("metadata") or {}).get("deletionTimestamp") or phase_of(stored) not in ACTIVE_PHASES \
                    or current_placement(stored) != (cluster, epoch):
                return None  # finished, deleted or moved meanwhile: not this decision's to evict
            status = stored["status"]
            append_history(status, history_entry("Preempted", cluster=cluster, epoch=epoch, message=message,
                                                 now=now))
            requeue(status, reason="Preempted", message=f"requeued: preempted by {preemptor}", now=now,
                    job=ref.key, count=False)
            # its next dispatch, wherever it goes, waits until this copy is gone (design.md invariant 2)
            status["placement"]["previous"] = {"cluster": cluster, "epoch": epoch}
            set_condition(status, type=SCHEDULABLE, state="False", reason="Preempted", message=message, now=now)
            set_condition(status, type=CONDITION_QUOTA_RESERVED, state="False", reason="Preempted",
                          message=message, now=now)
            return stored

        written, stored = await self._write_status(ref, mutate, failed="could not evict a preemption victim; "
                                                   "the preemption is dropped and decided again", cluster=cluster)
        if not written:
            return False
        if stored is None:
            _log.info("preemption victim already moved on; nothing to evict", job=ref.key, cluster=cluster,
                      epoch=epoch, preemptor=preemptor)
            return True
        self._remember(stored)
        self.hub.metrics.job_requeues.labels(reason="Preempted").inc()
        self.hub.events.record(stored, controller="placement", reason="Preempted", action="Preempt", warning=True,
                               message=message)
        _log.info("gang preempted", job=ref.key, cluster=cluster, epoch=epoch, preemptor=preemptor,
                  reason=victim.reason.value)
        try:
            # the pull-back path a drain uses: pods first, uid-guarded, only this epoch and older
            await self.dispatcher.delete_previous(stored, cluster="")
        except Exception as e:  # noqa: BLE001 - the GC deletes what is left (not placed there any more)
            _log.warning("could not ask the member to delete a preempted gang; the GC will", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}")
        return True

    async def _write_status(
        self, ref: JobRef, mutate: Callable[[dict[str, Any]], dict[str, Any] | None], *, failed: str,
        **log_fields: Any,
    ) -> tuple[bool, dict[str, Any] | None]:
        """`update_job_status` for this controller's writes: (False, None) when the write failed (logged
        as `failed`: the job stays queued and the next cycle tries again), else (True, the stored job or
        None when `mutate` left it alone)."""
        try:
            return True, await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                                 uid=ref.uid)
        except (ApiError, StoreError) as e:
            _log.warning(failed, job=ref.key, error=str(e), **log_fields)
            return False, None

    async def _write_decision(self, job: Mapping[str, Any], decision: Decision) -> dict[str, Any] | None:
        ref = job_ref(job)
        now = time.time()
        rows = why_not_rows(decision.why_not)
        scores = score_rows(decision)
        preempted = ", ".join(victim.key for victim in decision.preemption.victims) if decision.preemption else ""
        shrunk = ", ".join(s.describe() for s in decision.preemption.shrinks) if decision.preemption else ""

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if (stored.get("metadata") or {}).get("deletionTimestamp") or (stored.get("spec") or {}).get("suspend"):
                return None
            if phase_of(stored) not in _ELIGIBLE_PHASES:
                return None  # someone placed or finished it meanwhile: never place twice
            status = stored["status"]
            _resumed(status, now=now)
            _, previous_epoch = current_placement(stored)
            epoch = previous_epoch + 1
            placement = dict(status.get("placement") or {})
            placement.update(cluster=decision.cluster, epoch=epoch,
                             decisionResourceVersion=decision.resource_version[:64] or "0", whyNot=rows,
                             scores=scores)
            status["placement"] = placement
            size = record_placed_size(status, decision)
            model = f" on {decision.gpu_model}" if decision.gpu_model else ""
            message = (f"placed in {decision.cluster}{model} ({len(decision.assignment)} pods on "
                       f"{len(decision.nodes)} nodes) at epoch {epoch}{size}")
            if preempted:
                message += f" after preempting {preempted}"
                assert decision.preemption is not None
                append_history(status, history_entry(
                    "Preempting", cluster=decision.cluster, epoch=epoch, now=now,
                    message=f"made room in {decision.cluster} by preempting "
                            f"{', '.join(v.describe() for v in decision.preemption.victims)}"))
            if shrunk:
                message += f" after shrinking {shrunk}"
            append_history(status, history_entry("Placed", cluster=decision.cluster, epoch=epoch, message=message,
                                                 now=now))
            set_condition(status, type=SCHEDULABLE, state="True", reason="Placed", message=message, now=now)
            if decision.queue:
                set_condition(status, type=CONDITION_QUOTA_RESERVED, state="True",
                              reason=REASON_BORROWED if decision.borrowed else REASON_WITHIN_QUOTA,
                              message=f"charged to queue {decision.queue}"
                                      + (" on quota borrowed from its cohort" if decision.borrowed else ""), now=now)
            set_phase(status, PHASE_PLACED, reason="Placed", message=message, now=now, job=ref.key,
                      cluster=decision.cluster)
            return stored

        written, stored = await self._write_status(
            ref, mutate, failed="could not record the placement decision; the job stays in the queue",
            cluster=decision.cluster)
        if not written:
            return None
        if stored is None:
            _log.info("placement decision not recorded: the job changed meanwhile", job=ref.key,
                      cluster=decision.cluster)
        else:
            epoch = current_placement(stored)[1]
            self._charged[ref.uid] = (decision.cluster, epoch, decision.gpu_model)
            if preempted:
                self.hub.events.record(stored, controller="placement", reason="Preempting", action="Preempt",
                                       message=f"preempted {preempted} to make room in {decision.cluster}")
            score = f", score {decision.scores[0].total:.1f}" if decision.scores else ""
            model = f" on {decision.gpu_model}" if decision.gpu_model else ""
            self.hub.events.record(stored, controller="placement", reason="Placed", action="Place",
                                   message=f"placed in {decision.cluster}{model}{score} at epoch {epoch}"
                                           + (f" after preempting {preempted}" if preempted else ""))
        self._unplaced_written.pop(ref.uid, None)
        return stored

    # ------------------------------------------------------------ fits nowhere

    async def _record_unplaced(
        self, job: Mapping[str, Any], unplaced: Unplaced, *, snapshots: Mapping[str, ClusterSnapshot], now: float,
    ) -> None:
        rows = why_not_rows(unplaced.why_not)
        quota = unplaced.quota
        if quota is not None:
            # every cluster's row says the same; the rows of clusters another filter rejected stay in the table
            reason, message = quota.code, quota.message
            if quota.holding:
                message += "; it holds that quota for itself meanwhile (jobs behind it in its queue wait)"
        elif not snapshots:
            reason, message = "NoClusters", "no member cluster is registered (or none has been synced yet)"
        elif unplaced.never_fits:
            reason = "TooLargeForAnyCluster"
            message = "the gang is larger than any cluster that could take it, even with every node free"
        else:
            reason = "NoClusterFits"
            message = f"no cluster can take the whole gang now ({len(rows)} of {len(snapshots)} rejected)"
        if rows and quota is None:
            detail = "; ".join(f"{r['cluster']}: {r['reason']} ({r['message']})" for r in rows[:8])
            message = f"{message}: {detail}"
        if unplaced.hold is not None:
            message += (f"; holding {len(unplaced.hold.nodes)} nodes in {unplaced.hold.cluster} "
                        f"({unplaced.hold.ready_fraction:.0%} ready)")
        if unplaced.preemption is not None:
            message += f"; {unplaced.preemption.describe()}"
        signature = (reason, tuple((r["cluster"], r["filter"], r["reason"]) for r in rows),
                     unplaced.hold.cluster if unplaced.hold else None,
                     unplaced.preemption.victim_uids if unplaced.preemption else None)
        status = job.get("status") or {}
        stored_rows = (status.get("placement") or {}).get("whyNot")
        already = self._unplaced_written.get(job_ref(job).uid)
        if already is not None and already[0] == signature and phase_of(job) != PHASE_SUSPENDED and (
                stored_rows == rows or now - already[1] < self.unplaced_refresh_seconds):
            return
        ref = job_ref(job)

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(stored) not in _ELIGIBLE_PHASES or current_placement(stored)[0] is not None:
                return None
            st = stored["status"]
            placement = dict(st.get("placement") or {})
            placement["whyNot"] = rows
            placement.setdefault("epoch", 0)
            changed = placement != st.get("placement")
            st["placement"] = placement
            changed = set_condition(st, type=SCHEDULABLE, state="False", reason=reason, message=message,
                                    now=now) or changed
            if st.get("phase") in (None, PHASE_SUSPENDED):
                _resumed(st, now=now)
                set_phase(st, PHASE_PENDING, reason=reason, message=message, now=now, job=ref.key)
                changed = True
            if not changed:
                return None
            if already is None or already[0][0] != reason:
                append_history(st, history_entry("Unschedulable", cluster=None, epoch=None, message=message,
                                                 now=now))
            return stored

        written, stored = await self._write_status(ref, mutate, failed="could not record why the job fits nowhere")
        if not written:
            return
        self._unplaced_written[ref.uid] = (signature, now)
        if stored is not None:
            self._remember(stored)
            short = "; ".join(f"{r['cluster']}: {r['reason']}" for r in rows[:8])
            self.hub.events.record(stored, controller="placement", reason=reason, action="Place", warning=True,
                                   message=message if quota is not None
                                   else f"{message.split(':', 1)[0]}{': ' + short if short else ''}")

    async def _record_suspended(self, job: Mapping[str, Any], *, now: float) -> None:
        """Phase Suspended, condition Suspended=True and a history entry for a suspended queued job (the
        mutate checks again on the stored job: a job placed or resumed meanwhile is left alone)."""
        ref = job_ref(job)

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if not _to_suspend(stored):
                return None
            st = stored["status"]
            set_phase(st, PHASE_SUSPENDED, reason="Suspended", message=_SUSPENDED_MESSAGE, now=now, job=ref.key)
            set_condition(st, type=CONDITION_SUSPENDED, state="True", reason="Suspended",
                          message=_SUSPENDED_MESSAGE, now=now)
            append_history(st, history_entry("Suspended", cluster=None, epoch=None, message=_SUSPENDED_MESSAGE,
                                             now=now))
            return stored

        written, stored = await self._write_status(
            ref, mutate, failed="could not record that the job is suspended; trying again next cycle")
        if not written:
            return
        self.suspending.discard(ref.uid)
        if stored is not None:
            self._remember(stored)
            self.hub.events.record(stored, controller="placement", reason="Suspended", action="Suspend",
                                   message=_SUSPENDED_MESSAGE)

    async def _unschedulable(self, job: Mapping[str, Any], reason: str, message: str, *, now: float) -> None:
        """Condition Schedulable=False with `reason` for a job that is not even tried (its spec cannot be
        expressed: InvalidSpec; its queue does not take its namespace: NamespaceNotInQueue); written once
        per (reason, message), with an Event and, when the reason changes, a history entry."""
        ref = job_ref(job)
        signature = (reason, message)
        already = self._unplaced_written.get(ref.uid)
        if already is not None and already[0] == signature and phase_of(job) != PHASE_SUSPENDED:
            return

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(stored) not in _ELIGIBLE_PHASES or current_placement(stored)[0] is not None:
                return None
            st = stored["status"]
            changed = set_condition(st, type=SCHEDULABLE, state="False", reason=reason, message=message,
                                    now=now)
            if st.get("phase") in (None, PHASE_SUSPENDED):
                _resumed(st, now=now)
                set_phase(st, PHASE_PENDING, reason=reason, message=message, now=now, job=ref.key)
                changed = True
            if changed and (already is None or already[0][0] != reason):
                append_history(st, history_entry("Unschedulable", cluster=None, epoch=None, message=message,
                                                 now=now))
            return stored if changed else None

        written, stored = await self._write_status(ref, mutate, failed="could not record why the job cannot be placed")
        if not written:
            return
        self._unplaced_written[ref.uid] = (signature, now)
        if stored is not None:
            self._remember(stored)
            self.hub.events.record(stored, controller="placement", reason=reason, action="Place",
                                   warning=True, message=message)


def _member_index(hub: HubContext, cluster: str) -> ClusterObjects | None:
    """The member object index of this hub's objects in `cluster`, once it has listed everything (else None)."""
    index = hub.parts.objects.get(cluster)
    return index if index is not None and index.ready else None


def _pod_of(pod: Mapping[str, Any]) -> tuple[str, str, int, str, bool] | None:
    """(name, role, index (-1 if unreadable), node, live: bound, not terminal, not being deleted) of one
    member pod; None without a name."""
    def mapping(value: Any) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    meta = mapping(pod.get("metadata"))
    labels = mapping(meta.get("labels"))
    spec = mapping(pod.get("spec"))
    status = mapping(pod.get("status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    raw = labels.get(LABEL_INDEX)
    number = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) < 10 else -1
    node = spec.get("nodeName")
    node = node if isinstance(node, str) else ""
    live = bool(node) and not meta.get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed")
    return name, str(labels.get(LABEL_ROLE) or ""), number, node, live


def _pod_amounts(pods: tuple[RunningPod, ...]) -> dict[str, Resources]:
    amounts: dict[str, Resources] = {}
    for pod in pods:
        previous = amounts.get(pod.node)
        amounts[pod.node] = pod.requests if previous is None else previous + pod.requests
    return amounts


def _sizes(replicas: Mapping[str, int]) -> str:
    """{"ps": 1, "worker": 6} -> "ps 1, worker 6"."""
    return ", ".join(f"{role} {count}" for role, count in sorted(replicas.items()))


def _last_resized(job: Mapping[str, Any]) -> float | None:
    """When the job's gang last changed size at its current placement: its newest Placed or Resized entry
    of the current epoch (the grow pass's cooldown counts from it)."""
    _, epoch = current_placement(job)
    for entry in reversed(list((job.get("status") or {}).get("history") or ())):
        if isinstance(entry, Mapping) and entry.get("event") in (PHASE_PLACED, HISTORY_RESIZED) \
                and entry.get("epoch") == epoch:
            return parse_timestamp(entry.get("time"))
    return None


def _borrowed(job: Mapping[str, Any]) -> bool:
    """Whether the job's placement runs on quota its queue borrowed (its QuotaReserved condition says so)."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_QUOTA_RESERVED:
            return condition.get("status") == "True" and condition.get("reason") == REASON_BORROWED
    return False


async def job_placement(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: runs the placement loop while the hub runs (after the job cache and
    job_dispatch)."""
    parts = hub.parts
    controller = PlacementController(hub, dispatcher=parts.dispatcher, jobs=parts.jobs, members=parts.members)
    parts.running.placement = controller
    await controller.start()
    try:
        yield
    finally:
        await controller.stop()
        parts.running.placement = None
