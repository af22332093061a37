"""The placement loop: pending TrainingJobs -> placement decisions -> write-ahead -> dispatch.

`job_placement(hub)` (a cleanup_ctx-style factory; hub/app.py lists it after
member_sync, the job cache and job_dispatch) keeps an index of every
TrainingJob fed by the term's one job cache (`jobcache.JobCache`, handed to it
with the Dispatcher and the member syncs: `hub.parts`) and runs placement
cycles (`run_once`) of named phases, in the manner of Kueue's schedule():

1. collect: jobs in phase Pending (or Requeued, or none yet) that are not
   suspended, not being deleted, not in dispatch backoff and not in flight,
   as `GangRequest`s (`jobs.gang_request`); a suspended one is recorded as
   Suspended, one whose spec cannot be read or whose queue refuses its
   namespace waits (`decisions.py`); the queues and the gangs that hold
   quota (`queue_accounting.py`);
2. decide: `placement.run_cycle` over the latest frozen snapshots
   (`MemberClusters.snapshots`) and the reservation book; the ledger
   (`reservations.py`) adopts the new book, each decision's reservation
   assumed, before anything is written;
3. hand out: each decision in its own task: its preemption first
   (`preemption.py`: shrinks, then evictions), then the decision written
   into the job's status FIRST (`decisions.py`: phase Placed, epoch =
   previous + 1, why-not table, scores; fenced), and only then handed to
   dispatch (`controllers/dispatch.py`, the only writer of member objects).
   A failed or refused write-ahead forgets the reservation and dispatches
   nothing. Each gang that fits nowhere gets its why-not table and
   Schedulable=False; each Queue its status.

Beside the cycle run, as named tasks of this loop, the elastic pass
(`elastic.py`) and the Queue cache and status writer.

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
decision named, write member objects itself, or do I/O inside the pure
placement call.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.controllers.context import HubContext
from federator.controllers.decisions import (CONDITION_QUOTA_RESERVED, REASON_NAMESPACE_NOT_IN_QUEUE, SCHEDULABLE,
                                             DecisionWriter, score_rows, why_not_rows)
from federator.controllers.decisions import queued as _queued, to_suspend as _to_suspend
from federator.controllers.dispatch import Dispatcher, crash_point
from federator.controllers.elastic import ElasticResizer
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (ACTIVE_PHASES, JOB_KIND, JOB_PHASES, PHASE_PENDING, PHASE_PLACED,
                                        current_placement, dispatches_in_flight, gang_request, job_ref, phase_of,
                                        queued_at, reservations)
from federator.controllers.membercluster import MemberClusters
from federator.controllers.namespaces import NamespaceCache
from federator.controllers.placement_ports import HubJobStore, HubMemberViews
from federator.controllers.preemption import Evictor, Victims
from federator.controllers.queue_accounting import Preempting, QueueAccounting, resource_version_of as _rv
from federator.controllers.queues import QueueCache, QueueStatusWriter
from federator.obs import get_logger
from federator.placement import Decision, GangRequest, Profile, RunningGang, run_cycle
from federator.placement.growth import GrowthResult
from federator.placement.snapshot import ClusterSnapshot
from federator.store.protocol import StoreError
from federator.runtime.tasks import spawn, stop_tasks
from federator.runtime.waits import wait_event

__all__ = ["CONDITION_QUOTA_RESERVED", "SCHEDULABLE", "CycleReport", "PlacementController",
           "job_placement", "score_rows", "why_not_rows"]

_log = get_logger("controllers.placement")



@dataclass(frozen=True, slots=True)
class CycleReport:
    pending: int
    placed: int
    unplaced: int
    seconds: float


class PlacementController:
    """See the module docstring. Use `job_placement(hub)` to run it."""

    def __init__(self, hub: HubContext, *, dispatcher: Dispatcher, jobs: JobCache, members: MemberClusters,
                 namespaces: NamespaceCache) -> None:
        self.hub = hub
        self.rt = hub.kind(JOB_KIND)
        self.dispatcher = dispatcher
        #: the term's one TrainingJob cache, which feeds `jobs` below (placement's own index of it)
        self.job_cache = jobs
        self.members = members
        dispatcher.on_requeued = self._wake_after
        knobs = hub.settings.placement
        self.profile: Profile = knobs.profile
        self.tick_seconds = knobs.tick_seconds
        self.snapshot_poll_seconds = knobs.snapshot_poll_seconds
        self.debounce_seconds = knobs.debounce_seconds
        self.unplaced_refresh_seconds = knobs.unplaced_refresh_seconds
        self.max_inflight = knobs.max_inflight
        #: False: preemption is only explained ("would fit on X after preempting A, B"), never done
        self.preempt = knobs.preemption
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
        self._wake = asyncio.Event()
        self.queues = QueueCache(hub, namespaces=namespaces, on_change=self._wake.set)
        self.queue_status = QueueStatusWriter(hub, cache=self.queues)
        #: uids of the jobs in `jobs` that hold a placement (Placed, Admitted, Running with a cluster; not
        #: being deleted): the gangs that hold quota and room
        self.active: set[str] = set()
        # the loop's parts (module docstrings), over the job index above and the seams of placement_ports
        store, views = HubJobStore(hub), HubMemberViews(hub)
        self.preempting = Preempting()
        self.records = DecisionWriter(store, events=hub.events, remember=self._remember,
                                      unplaced_refresh_seconds=self.unplaced_refresh_seconds)
        self.accounting = QueueAccounting(queues=self.queues, queue_status=self.queue_status, profile=self.profile,
                                          ledger=self.ledger, members=views, preempting=self.preempting,
                                          jobs=self.jobs, active=self.active, queued=self.queued,
                                          currency=hub.settings.queues.currency,
                                          spend_interval_seconds=hub.settings.queues.spend_interval_seconds)
        self.evictor = Evictor(store=store, members=dispatcher, events=hub.events, metrics=hub.metrics,
                               accounting=self.accounting, preempting=self.preempting, jobs=self.jobs,
                               remember=self._remember)
        self.elastic = ElasticResizer(
            store=store, members=dispatcher, views=views, events=hub.events, metrics=hub.metrics,
            accounting=self.accounting, preempting=self.preempting, ledger=self.ledger, profile=self.profile,
            snapshots=self._snapshots, jobs=self.jobs, active=self.active, queued=self.queued,
            inflight=self.inflight, remember=self._remember, spawn=lambda coro, name: self._spawn(coro, name=name),
            tick_seconds=hub.settings.elastic.tick_seconds,
            cooldown_seconds=hub.settings.elastic.grow_cooldown_seconds)
        # the parts' per-job state the job index drops with a job (the same dicts as theirs)
        self._unplaced_written = self.records.unplaced_written
        self._charged = self.accounting.charged
        self._running_cache = self.accounting.running_cache
        self._gang_cache = self.accounting.gang_cache
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
        self._phase_gauges = {phase: hub.metrics.jobs.labels(phase=phase) for phase in JOB_PHASES}

    @property
    def last_growth(self) -> GrowthResult | None:
        """The elastic pass's latest grow plan (tests and debugging)."""
        return self.elastic.last_growth

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
        failed = "placement loop failed"
        self._tasks = [
            spawn(self._cycle_loop(), name="placement:cycle", log=_log, event=failed, loop="cycle"),
            spawn(self.queues.run(queues_rv), name="placement:queues", log=_log, event=failed, loop="queues"),
            spawn(self.queue_status.run(), name="placement:queue-status", log=_log, event=failed,
                  loop="queue-status"),
            spawn(self.elastic.run(), name="placement:elastic", log=_log, event=failed, loop="elastic"),
        ]
        self._wake.set()
        _log.info("placement loop started", jobs=len(self.jobs))

    async def stop(self) -> None:
        self.job_cache.unsubscribe(self._job_changed)
        # the loops' failures were logged when they happened (`spawn`); a decision's work logs its own
        await stop_tasks([*self._tasks, *self._work])
        self._tasks.clear()
        self._work.clear()
        await self.queues.stop()
        # Only the leader's loop knows the jobs: a replica that stopped leading exports no stale counts.
        self.hub.metrics.jobs.clear()
        self.hub.metrics.placement_queue_depth.set(0)
        _log.info("placement loop stopped")

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
        if phase_of(job) in ACTIVE_PHASES and current_placement(job)[0] is not None and not Body(job).deleting:
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
        gone = self.jobs.pop(uid, None)
        if gone is not None:
            self.accounting.job_gone(gone, now=time.time())
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
        uid = Body(job).uid
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
        # collect (after the budgets' spend is accrued: a queue over its budget sends its gangs only to
        # already-paid clusters)
        self.accounting.update_spend(snapshots, now=now)
        gangs, jobs_by_uid = await self._collect(now=now)
        queues = self.accounting.cycle_queues(gangs)
        views = self.accounting.without_leftovers(snapshots) if queues is not None else snapshots
        if self._unreserved:
            self.accounting.rebuild_reservations(self._unreserved, views, now=now)
        running: list[RunningGang] = self.accounting.running(snapshots) if queues is not None else []
        collected = time.perf_counter()
        metrics.labels(loop="placement", phase="collect").observe(collected - started)
        if not gangs and len(self.ledger) == 0:
            if queues is not None:
                self.accounting.want_queue_status(queues, running, result=None, now=now)
            return CycleReport(pending=0, placed=0, unplaced=0, seconds=collected - started)
        # decide, and assume: the ledger holds every decision's reservation before anything is written
        book = self.ledger.book
        result = run_cycle(gangs, views, self.profile, now=now, reservations=book, queues=queues,
                           running=running, preempt=self.preempt)
        self.ledger.adopt(result.reservations, base=book)
        decided = time.perf_counter()
        metrics.labels(loop="placement", phase="decide").observe(decided - collected)
        self.cycles += 1
        # hand out: each decision to its own task (preemption, write-ahead, dispatch); the rest wait
        for decision in result.decisions:
            job = jobs_by_uid[decision.gang_uid]
            self.inflight.begin(decision.gang_uid)
            victims = self.evictor.mark(decision)
            self.hub.metrics.placement_decisions.labels(result="placed").inc()
            self._spawn(self._place(job, decision, victims), name=f"placement:place:{decision.gang_key}")
        for unplaced in result.unplaced:
            self.hub.metrics.placement_decisions.labels(result="unplaced").inc()
            await self.records.record_unplaced(jobs_by_uid[unplaced.gang_uid], unplaced, snapshots=snapshots,
                                               now=now)
        if queues is not None:
            self.accounting.want_queue_status(queues, running, result=result, now=now)
        recorded = time.perf_counter()
        metrics.labels(loop="placement", phase="unplaced").observe(recorded - decided)
        return CycleReport(pending=len(gangs), placed=len(result.decisions), unplaced=len(result.unplaced),
                           seconds=recorded - started)

    async def _collect(self, *, now: float) -> tuple[list[GangRequest], dict[str, dict[str, Any]]]:
        """The cycle's gangs and their jobs by uid: every eligible queued job whose spec reads and whose queue
        takes its namespace (the others get their status written here), after suspended jobs are recorded."""
        gangs: list[GangRequest] = []
        jobs_by_uid: dict[str, dict[str, Any]] = {}
        for uid in sorted(self.suspending):
            suspended = self.jobs.get(uid)
            if suspended is not None and await self.records.record_suspended(suspended, now=now):
                self.suspending.discard(uid)
        for uid in sorted(self.queued):
            job = self.jobs[uid]
            if not self._eligible(job, now=now):
                continue
            try:
                gang = self.accounting.tiered(gang_request(job, now=now), job)
            except (ValueError, TypeError) as e:
                await self.records.unschedulable(job, "InvalidSpec", str(e), now=now)
                continue
            refused = self.accounting.queue_refuses(gang, job)
            if refused is not None:
                await self.records.unschedulable(job, REASON_NAMESPACE_NOT_IN_QUEUE, refused, now=now)
                continue
            gangs.append(gang)
            jobs_by_uid[uid] = job
        return gangs, jobs_by_uid

    def _spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    # ------------------------------------------------------------ a decision: make room, write-ahead, dispatch

    async def _place(self, job: dict[str, Any], decision: Decision, victims: Victims) -> None:
        ref = job_ref(job)
        metrics = self.hub.metrics.loop_phase_seconds
        try:
            async with self._semaphore:
                if decision.preemption is not None and not await self.evictor.make_room(job, decision, victims):
                    self.ledger.forget(ref.uid)
                    return
                started = time.perf_counter()
                stored = await self.records.write_decision(job, decision)
                written = time.perf_counter()
                metrics.labels(loop="placement", phase="record").observe(written - started)
                if stored is None:
                    self.ledger.forget(ref.uid)
                    return
                self._remember(stored)
                cluster, epoch = current_placement(stored)
                assert cluster == decision.cluster
                self.accounting.charge(ref.uid, cluster=cluster, epoch=epoch, gpu_model=decision.gpu_model)
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
            self.evictor.done(decision, victims)
            self.inflight.end(ref.uid)
            self._wake.set()


async def job_placement(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: runs the placement loop while the hub runs (after the job cache and
    job_dispatch)."""
    parts = hub.parts
    controller = PlacementController(hub, dispatcher=parts.dispatcher, jobs=parts.jobs, members=parts.members,
                                     namespaces=parts.namespaces)
    parts.running.placement = controller
    await controller.start()
    try:
        yield
    finally:
        await controller.stop()
        parts.running.placement = None
