"""Elastic resizing for the placement loop (issue 19): converge, then grow, the running elastic gangs.

A running elastic gang's size is its status.replicas (pods per role, within
each role's minimum and maximum). Placement shrinks one to make room for a
preemptor (`preemption.py`); `ElasticResizer` runs the rest as a named
background task ("placement:elastic", every HubSettings.elastic.tick_seconds,
default 5 s), `elastic_pass`:

a. trim and fill: every settled elastic gang (no pod failed, finished or
   being deleted: those are status sync's) is converged to its
   status.replicas: per role, dispatch deletes the highest-indexed pods
   above the count (`MemberWrites.delete_pods`) and creates pods at the
   lowest free indices below it (`MemberWrites.recreate_pods`: rendered at
   that size; creates are idempotent, the PodGroup is left alone);
b. grow: `placement.plan_growth` over the running gangs, the pending queue
   (pending gangs first), the reservation book and the queues, with a
   cooldown ("elastic_grow_cooldown_seconds", default 60 s) from the gang's
   placement or last resize; each growth is assumed into the book (a
   PLACED reservation of the new pods), written (status.replicas, history
   Resized reason Grown, an Event Grown), then dispatch creates its new pods.

Operator mode (issue 28: the member's own operator runs the gang from the
member copy dispatch created, `MemberWrites.operated_gang`): the hub creates
and deletes none of its pods. (a) and the growth's last step then ask dispatch
to patch the member copy to status.replicas instead
(`MemberWrites.resize_member_copy`: PyTorchJob's Worker replicas, within its
elasticPolicy, as the training operator's HPA does), and the operator creates
the pods of new indices and deletes those above; a preemption's shrink does
the same (`preemption.py`). A kind whose operator cannot resize in place
(JobSet: replicatedJobs are immutable while it runs) keeps its placed size:
`queue_accounting` hands placement such a gang as `RunningGang.fixed` (with
the reason), so it is never grown (held back with that reason) nor shrunk.

Crash safety: status.replicas is written before the member changes and is
the truth: a hub that dies after writing a shrink leaves pods above the new
size running until (a) deletes them on the next pass (the snapshot counts
them while they run, so nothing double-books, and no shrink is planned on
them); one that dies after writing a growth has (a) create the missing
pods. Pods are named by role and index and labelled with the epoch, so a
re-created pod is never a second copy, and the written size is within each
role's minimum, so a gang is never cut below it; the PodGroup's minMember
(the minimum) never changes. What is lost is the growth's reservation:
until the new pods bind, a placement may take that room, and they wait in
the member (the gang runs on).

Must never: touch a gang that is not settled, in flight or being shrunk by a
decision, write a size outside a role's minimum and maximum, create or delete
one pod of a gang the member's operator runs, or create, delete or patch
member objects itself (dispatch does, through `MemberWrites`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Set
from typing import Any

from federator.apis.timestamps import parse_epoch
from federator.apis.trainingjob import HISTORY_RESIZED, placed_replicas
from federator.apis.views import Body
from federator.controllers.dispatch import crash_point
from federator.controllers.jobs import (
    ACTIVE_PHASES,
    PHASE_PLACED,
    InFlight,
    append_history,
    current_placement,
    gang_request,
    history_entry,
    job_ref,
    phase_of,
)
from federator.controllers.placement_ports import EventSink, JobStore, MemberViews, MemberWrites
from federator.controllers.queue_accounting import Preempting, QueueAccounting, member_pod
from federator.controllers.reservations import ReservationLedger
from federator.delegation.adapter import pod_name
from federator.obs import Metrics, get_logger
from federator.placement import GangRequest, Profile
from federator.placement.growth import Growth, GrowthResult, plan_growth
from federator.placement.snapshot import ClusterSnapshot

__all__ = ["ElasticResizer"]

_log = get_logger("controllers.placement")


class ElasticResizer:
    """See the module docstring. `jobs`, `active` and `queued` are the loop's job index and `inflight` its
    decisions being written or dispatched (read only here); `remember` is handed every job a write stored;
    `spawn(coroutine, name)` runs a growth's write and creates in a task the loop owns."""

    def __init__(self, *, store: JobStore, members: MemberWrites, views: MemberViews, events: EventSink,
                 metrics: Metrics, accounting: QueueAccounting, preempting: Preempting, ledger: ReservationLedger,
                 profile: Profile, snapshots: Callable[[], Mapping[str, ClusterSnapshot]],
                 jobs: Mapping[str, dict[str, Any]], active: Set[str], queued: Set[str], inflight: InFlight,
                 remember: Callable[[dict[str, Any]], object],
                 spawn: Callable[[Coroutine[Any, Any, None], str], None],
                 tick_seconds: float, cooldown_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.members = members
        self.views = views
        self.events = events
        self.metrics = metrics
        self.accounting = accounting
        self.preempting = preempting
        self.ledger = ledger
        self.profile = profile
        self.snapshots = snapshots
        self.jobs = jobs
        self.active = active
        self.queued = queued
        self.inflight = inflight
        self.remember = remember
        self.spawn = spawn
        self.tick_seconds = tick_seconds
        self.cooldown_seconds = cooldown_seconds
        self.clock = clock
        #: the latest grow plan (who grew, who was held back and why): for tests and debugging
        self.last_growth: GrowthResult | None = None

    async def trim_and_fill(self, job: Mapping[str, Any]) -> None:
        """Make an elastic gang's member pods at its (cluster, epoch) as many per role as status.replicas:
        delete the highest-indexed pods above a role's count (a shrink), create pods at the lowest free
        indices below it (a growth). Only on a settled gang: no pod of it failed, finished or being
        deleted (status sync restarts or shrinks for failed workers; a deletion in progress is someone's
        resize). So a hub that died between writing status.replicas and changing the member converges here
        on its next pass: the written size is the truth, never exceeded for long and never cut below
        (status.replicas is always within each role's minimum and maximum); pods are named by role and
        index, so a pod created again is never a second copy."""
        cluster, epoch = current_placement(job)
        body = Body(job)
        recorded = body.status.get("replicas")
        if cluster is None or phase_of(job) not in ACTIVE_PHASES or body.deleting \
                or not isinstance(recorded, Mapping) or dict(recorded) != placed_replicas(job):
            return
        if self.members.operated_gang(job, cluster=cluster, epoch=epoch):
            await self._resize_copy(job, cluster=cluster, epoch=epoch)
            return
        index = self.views.pods(cluster)
        if index is None:
            return
        ref = job_ref(job)
        by_role: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
        for pod in index.gang(ref.uid, epoch)[1]:
            view = member_pod(pod)
            if view is None:
                return
            role, number = view.role, view.index
            member = Body(pod)
            if member.deleting or member.phase in ("Succeeded", "Failed") \
                    or role not in recorded or number < 0:
                return  # not settled (or not readable): leave it to its owner, look again next pass
            by_role.setdefault(role, []).append((number, pod))
        extra: list[str] = []
        missing: dict[str, Mapping[str, str]] = {}
        for role, count in recorded.items():
            pods = sorted(by_role.get(role, ()), key=lambda item: item[0])
            extra.extend(Body(pod).name for _, pod in pods[count:][::-1])
            used = {number for number, _ in pods}
            free = (i for i in range(count + len(used)) if i not in used)
            for _ in range(count - len(pods)):
                missing[pod_name(job_name=ref.name, job_uid=ref.uid, role=role, index=next(free))] = {}
        try:
            if extra:
                deleted = await self.members.delete_pods(job, cluster=cluster, epoch=epoch, names=extra)
                _log.info("elastic gang trimmed to its size", job=ref.key, cluster=cluster, epoch=epoch,
                          size=_sizes(recorded), deleted=deleted)
            if missing and ref.uid not in self.inflight:
                created = await self.members.recreate_pods(job, cluster=cluster, epoch=epoch, pods=missing)
                _log.info("elastic gang filled to its size", job=ref.key, cluster=cluster, epoch=epoch,
                          size=_sizes(recorded), created=created)
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            _log.warning("could not bring an elastic gang to its size; trying again", job=ref.key, cluster=cluster,
                         error=f"{type(e).__name__}: {e}", waiting_for="the next elastic pass")

    async def _resize_copy(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> bool:
        """A gang the member's own operator runs (operator mode): its member copy brought to status.replicas by
        dispatch (`MemberWrites.resize_member_copy`: a kind whose operator resizes in place; the others keep
        their placed size and are never resized); the operator makes and deletes the pods. False (logged, the
        next pass tries again) when that failed."""
        ref = job_ref(job)
        try:
            if await self.members.resize_member_copy(job, cluster=cluster, epoch=epoch):
                _log.info("elastic gang's member copy resized", job=ref.key, cluster=cluster, epoch=epoch,
                          size=_sizes(placed_replicas(job)))
            return True
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            _log.warning("could not resize an elastic gang's member copy; trying again", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}", waiting_for="the next elastic pass")
            return False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                await self.elastic_pass()
            except Exception as e:  # noqa: BLE001 - one bad pass must not end the loop
                _log.error("elastic pass failed; retrying on the next tick", error=f"{type(e).__name__}: {e}",
                           exc_info=True, waiting_for="the next tick")

    async def elastic_pass(self) -> int:
        """Converge every elastic gang to its status.replicas (`trim_and_fill`), then grow the ones
        `placement.plan_growth` lets grow (pending gangs first, cooldown after a placement or resize).
        Returns how many grew."""
        started = time.perf_counter()
        now = self.clock()
        elastic = False
        for uid in sorted(self.active):
            job = self.jobs.get(uid)
            gang = self.accounting.gang_of(uid, job) if job is not None else None  # cached per generation
            if job is None or gang is None or not gang.elastic:
                continue
            elastic = True
            if uid not in self.inflight and uid not in self.preempting.shrinking:
                await self.trim_and_fill(job)
        if not elastic:
            # no running elastic gang: nothing may grow (plan_growth's candidates are running elastic gangs),
            # so the pending queue's gangs and the running gangs' amounts are not built (a pass over every job)
            self.last_growth = GrowthResult(growths=(), reservations=self.ledger.book)
            self.metrics.loop_phase_seconds.labels(loop="placement", phase="grow").observe(
                time.perf_counter() - started)
            return 0
        snapshots = self.snapshots()
        pending: list[GangRequest] = []
        for uid in sorted(self.queued):
            try:
                pending.append(self.accounting.tiered(gang_request(self.jobs[uid], now=now), self.jobs[uid]))
            except (ValueError, TypeError):
                continue
        queues = self.accounting.cycle_queues(pending)
        views = self.accounting.without_leftovers(snapshots) if queues is not None else snapshots
        running = self.accounting.running(snapshots)
        last: dict[str, float] = {}
        for gang_running in running:
            job = self.jobs.get(gang_running.uid)
            if job is not None:
                when = _last_resized(job)
                last[gang_running.uid] = when if when is not None else gang_running.started_at
        book = self.ledger.book
        result = plan_growth(running, views, pending, self.profile, now=now, last_resized=last,
                             cooldown_seconds=self.cooldown_seconds, reservations=book, queues=queues)
        self.metrics.loop_phase_seconds.labels(loop="placement", phase="grow").observe(
            time.perf_counter() - started)
        self.last_growth = result
        if not result.growths:
            return 0
        self.ledger.adopt(result.reservations, base=book)  # assume, as a decision does
        for growth in result.growths:
            job = self.jobs.get(growth.gang_uid)
            if job is None:
                self.ledger.forget(growth.gang_uid)
                continue
            self.inflight.begin(growth.gang_uid)
            self.spawn(self._grow(job, growth), f"placement:grow:{growth.gang_key}")
        return len(result.growths)

    async def _grow(self, job: Mapping[str, Any], growth: Growth) -> None:
        """Write the growth (status.replicas, history Resized with reason Grown; fenced on the placement the
        plan saw), an Event, then create the new pods (rendered at the new size; creates are idempotent and
        the PodGroup is left as it is: its minimum does not change)."""
        ref = job_ref(job)
        cluster, epoch = current_placement(job)
        now = self.clock()
        message = ""
        try:
            def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
                nonlocal message
                if Body(stored).deleting or phase_of(stored) not in ACTIVE_PHASES \
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

            written, stored = await self.store.write_status(ref, mutate, failed="could not record a growth; planned "
                                                            "again next pass", cluster=growth.cluster)
            if not written or stored is None or cluster != growth.cluster:
                self.ledger.forget(ref.uid)
                return
            self.remember(stored)
            self.events.record(stored, controller="placement", reason="Grown", action="Resize", message=message)
            _log.info("elastic gang grown", job=ref.key, cluster=growth.cluster, epoch=epoch,
                      size=_sizes(growth.replicas), pods=growth.pods)
            crash_point("after-grow-write", job=ref.key)
            if self.members.operated_gang(stored, cluster=growth.cluster, epoch=epoch):
                await self.members.resize_member_copy(stored, cluster=growth.cluster, epoch=epoch)
                return
            names: dict[str, Mapping[str, str]] = {
                pod_name(job_name=ref.name, job_uid=ref.uid, role=p.role, index=p.index): {} for p in growth.added}
            await self.members.recreate_pods(stored, cluster=growth.cluster, epoch=epoch, pods=names)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the next pass fills what is missing
            self.ledger.forget(ref.uid)
            _log.warning("growing an elastic gang failed; the next pass creates what is missing", job=ref.key,
                         error=f"{type(e).__name__}: {e}", waiting_for="the next elastic pass")
        finally:
            self.inflight.end(ref.uid)

def _sizes(replicas: Mapping[str, int]) -> str:
    """{"ps": 1, "worker": 6} -> "ps 1, worker 6"."""
    return ", ".join(f"{role} {count}" for role, count in sorted(replicas.items()))


def _last_resized(job: Mapping[str, Any]) -> float | None:
    """When the job's gang last changed size at its current placement: its newest Placed or Resized entry
    of the current epoch (the grow pass's cooldown counts from it)."""
    _, epoch = current_placement(job)
    for entry in reversed(list(Body(job).status.get("history") or ())):
        if isinstance(entry, Mapping) and entry.get("event") in (PHASE_PLACED, HISTORY_RESIZED) \
                and entry.get("epoch") == epoch:
            return parse_epoch(entry.get("time"))
    return None

