"""Preemption for the placement loop: carry out a decision's shrinks and evictions, in order.

A decision that carries victims (`Decision.preemption`) is carried out by
`Evictor` in the decision's task, before the preemptor's decision is written:

1. `mark` (in the cycle, when the decision is made): its victims are being
   evicted and its shrinks' pods are going (`queue_accounting.Preempting`):
   they no longer count as running, and no later cycle chooses them again
   until `done`;
2. `make_room`: the preemptor is read again: if it no longer waits
   (deleted, suspended, placed), nothing is evicted (False: its reservation
   goes). Then, shrinks first (a shrink that cannot be done drops the
   preemption before anyone is evicted: a shrunk gang grows back on its
   own, an evicted one is queued again):
   a. each shrink of an elastic gang (issue 19): a fenced status write
      (status.replicas smaller by the planned pods, only while they are
      still its highest indices above each role's minimum; history Resized
      with from, to, reason Preempted: "shrunk worker 6 -> 4: room for
      team-a/urgent (reason: ...)"), an Event Shrunk, then dispatch deletes
      the pods above the new size (`MemberWrites.delete_pods`, uid-guarded;
      the elastic pass deletes what is missed), or, for a gang the member's
      own operator runs (operator mode), patches its member copy to the new
      size (`MemberWrites.resize_member_copy`: PyTorchJob's Worker replicas)
      and the operator deletes the pods above it (placement plans no shrink
      of an operator's gang it cannot resize in place: `RunningGang.fixed`);
   b. each victim, whole: a fenced status write (only while it is still
      placed at the (cluster, epoch) the decision saw): history Preempted
      and condition Schedulable=False (reason Preempted: "preempted by
      ns/name (reason: lower priority in queue X | reclaiming borrowed
      quota of queue Y)"), back to Pending (`jobs.requeue`; its next
      placement takes epoch + 1) with status.placement.previous set, so
      its next dispatch waits until this copy is gone; an Event Preempted;
      then dispatch deletes its member objects (the drain's pull-back:
      `MemberWrites.delete_previous`; the GC takes what is missed);
3. only then the loop writes the preemptor's decision (history Preempting
   and Placed, an Event Preempting) and dispatches it as any decision. Its
   reservation (made by the cycle on the room the victims free) stays in
   the book across cycles until the member shows its pods bound (or the
   stuck-gang pull-back or the reservation TTL ends it), so no third gang
   takes the room. Should that write be refused (the preemptor was deleted
   or suspended in between), the victims stay evicted.

Crash safety: a crash after (2) leaves the victims queued with their old
copy fenced (it is deleted, and never runs beside a new one) and the
preemptor still Pending in the store: the restarted hub places it again
(the victims' leftovers do not count against it, so it does not evict
more) or, after (3), re-dispatches it with its reservation rebuilt. A shrink
is safe the same way: status.replicas is written before the member changes
and is the truth (`elastic.py` converges the pods to it).
HubSettings.placement.preemption false only explains: a job that
would fit after preemption says "would fit on X after preempting A, B" in
its Schedulable condition.

Must never: evict or shrink a gang that no decision named, evict before
the preemptor was read again, or create or delete member objects itself
(dispatch does, through `MemberWrites`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from federator.apis.trainingjob import HISTORY_RESIZED, placed_replicas
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.controllers.decisions import CONDITION_QUOTA_RESERVED, SCHEDULABLE, queued
from federator.controllers.dispatch import crash_point
from federator.controllers.jobs import (
    ACTIVE_PHASES,
    append_history,
    current_placement,
    history_entry,
    job_ref,
    phase_of,
    requeue,
    set_condition,
)
from federator.controllers.placement_ports import EventSink, JobStore, MemberWrites
from federator.controllers.queue_accounting import Preempting, QueueAccounting, ShrinkPlan
from federator.obs import Metrics, get_logger
from federator.placement import Decision, Shrink, Victim, VictimReason
from federator.store.protocol import StoreError

__all__ = ["Evictor", "Victims"]

_log = get_logger("controllers.placement")

#: a decision's victims with their jobs as the loop knew them (None: gone meanwhile)
Victims = list[tuple[Victim, dict[str, Any] | None]]


class Evictor:
    """See the module docstring. `jobs` is the loop's job index (read only here); `remember` is handed
    every job a write stored."""

    def __init__(self, *, store: JobStore, members: MemberWrites, events: EventSink, metrics: Metrics,
                 accounting: QueueAccounting, preempting: Preempting, jobs: Mapping[str, dict[str, Any]],
                 remember: Callable[[dict[str, Any]], object], clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.members = members
        self.events = events
        self.metrics = metrics
        self.accounting = accounting
        self.preempting = preempting
        self.jobs = jobs
        self.remember = remember
        self.clock = clock

    def mark(self, decision: Decision) -> Victims:
        """The decision's victims with their jobs as this loop knows them, marked as being evicted (no longer
        counted as running, never chosen again) until their eviction is written."""
        victims: Victims = []
        for victim in decision.preemption.victims if decision.preemption is not None else ():
            job = self.jobs.get(victim.uid)
            if job is not None:
                cluster, epoch = current_placement(job)
                self.preempting.evicting[victim.uid] = (cluster or decision.cluster, epoch)
            victims.append((victim, job))
        for shrink in decision.preemption.shrinks if decision.preemption is not None else ():
            job = self.jobs.get(shrink.uid)
            running = self.accounting.running_gang(shrink.uid)
            if job is None or running is None:
                continue  # deleted meanwhile: its room is being freed anyway
            cluster, epoch = current_placement(job)
            pods = {pod.name: (pod.role, pod.index) for pod in running.pods}
            # a planned pod this loop no longer knows: an empty plan, refused by `_shrink` (decided again)
            planned = {name: pods[name] for name in shrink.pods if name in pods}
            self.preempting.shrinking[shrink.uid] = ShrinkPlan(cluster=cluster or decision.cluster, epoch=epoch,
                                                               pods=planned if len(planned) == len(shrink.pods)
                                                               else {})
        return victims


    def done(self, decision: Decision, victims: Victims) -> None:
        """The decision's task ended (placed, dropped or failed): its victims and shrinks are no longer marked."""
        for victim, _ in victims:
            self.preempting.evicting.pop(victim.uid, None)
        for shrink in decision.preemption.shrinks if decision.preemption is not None else ():
            self.preempting.shrinking.pop(shrink.uid, None)

    async def make_room(self, job: Mapping[str, Any], decision: Decision, victims: Victims) -> bool:
        """Evict the decision's victims, whole, before the preemptor's decision is written (see the module
        docstring for why in this order). False (nothing placed; the next cycle decides again) when the
        preemptor no longer waits for a placement or an eviction could not be written."""
        ref = job_ref(job)
        try:
            fresh = await self.store.read(ref)
        except (ApiError, StoreError) as e:
            _log.warning("could not read a preempting job; nothing evicted, it stays in the queue", job=ref.key,
                         error=str(e))
            return False
        if job_ref(fresh).uid != ref.uid or not queued(fresh):
            _log.info("preemption dropped: the preempting job changed meanwhile; nothing evicted", job=ref.key,
                      phase=phase_of(fresh))
            return False
        now = self.clock()
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
        planned pods are deleted through dispatch (what is missed, the elastic pass deletes). False (the
        preemption is dropped) when the write failed or the planned pods are not the gang's highest indices
        above its minimum any more."""
        where = self.preempting.shrinking.get(shrink.uid)
        job = self.jobs.get(shrink.uid)
        if job is None or where is None or not where.pods:
            return job is None  # deleted meanwhile (its room is being freed); unknown pods: decide again
        cluster, epoch, removed = where.cluster, where.epoch, where.pods
        ref = job_ref(job)
        gang = self.accounting.gang_of(shrink.uid, job)
        if gang is None:
            return False
        lows = {role.name: role.low for role in gang.roles}
        why = (f"lower priority in queue {shrink.queue}" if shrink.reason is VictimReason.LOWER_PRIORITY
               else "reclaiming borrowed quota")
        refused: list[str] = []
        message = ""

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal message
            if Body(stored).deleting or phase_of(stored) not in ACTIVE_PHASES \
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

        written, stored = await self.store.write_status(ref, mutate, failed="could not shrink an elastic gang; the "
                                                        "preemption is dropped and decided again", cluster=cluster)
        if not written or refused:
            if refused:
                _log.warning("shrink refused; the preemption is decided again", job=ref.key, why=refused[0])
            return False
        if stored is None:
            return True
        self.remember(stored)
        self.events.record(stored, controller="placement", reason="Shrunk", action="Preempt", warning=True,
                           message=message)
        _log.info("elastic gang shrunk", job=ref.key, cluster=cluster, epoch=epoch, preemptor=preemptor,
                  pods=sorted(removed))
        crash_point("after-shrink-write", job=ref.key)
        try:
            if self.members.operated_gang(stored, cluster=cluster, epoch=epoch):
                # the member's operator deletes the pods above the count (the highest indices: the planned ones)
                await self.members.resize_member_copy(stored, cluster=cluster, epoch=epoch)
            else:
                await self.members.delete_pods(stored, cluster=cluster, epoch=epoch, names=sorted(removed))
        except Exception as e:  # noqa: BLE001 - the elastic pass deletes what is left above the size
            _log.warning("could not delete a shrunk gang's pods; the elastic pass will", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}")
        return True

    async def _evict(self, victim: Victim, job: dict[str, Any] | None, *, preemptor: str, queue: str,
                     now: float) -> bool:
        """Send one victim back to the queue (fenced: only while it is still placed where the decision saw
        it), then ask its member to delete its gang. False when the write failed (the caller gives up)."""
        where = self.preempting.evicting.get(victim.uid)
        if job is None or where is None:
            return True  # deleted meanwhile: its room is being freed anyway
        cluster, epoch = where
        ref = job_ref(job)
        why = (f"lower priority in queue {victim.queue}" if victim.reason is VictimReason.LOWER_PRIORITY
               else f"reclaiming borrowed quota of queue {queue}")
        loss = victim.loss_text()
        message = (f"preempted by {preemptor} (reason: {why}); its gang in {cluster} (epoch {epoch}) is deleted "
                   f"and the job is queued again" + (f"; it {loss}" if loss else ""))

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if Body(stored).deleting or phase_of(stored) not in ACTIVE_PHASES \
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

        written, stored = await self.store.write_status(ref, mutate, failed="could not evict a preemption victim; "
                                                        "the preemption is dropped and decided again", cluster=cluster)
        if not written:
            return False
        if stored is None:
            _log.info("preemption victim already moved on; nothing to evict", job=ref.key, cluster=cluster,
                      epoch=epoch, preemptor=preemptor)
            return True
        self.remember(stored)
        self.metrics.job_requeues.labels(reason="Preempted").inc()
        self.events.record(stored, controller="placement", reason="Preempted", action="Preempt", warning=True,
                           message=message)
        _log.info("gang preempted", job=ref.key, cluster=cluster, epoch=epoch, preemptor=preemptor,
                  reason=victim.reason.value)
        try:
            # the pull-back path a drain uses: pods first, uid-guarded, only this epoch and older
            await self.members.delete_previous(stored, cluster="")
        except Exception as e:  # noqa: BLE001 - the GC deletes what is left (not placed there any more)
            _log.warning("could not ask the member to delete a preempted gang; the GC will", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}")
        return True
