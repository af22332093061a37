"""Stuck gangs: placed in a member cluster whose scheduler does not admit them in time, pulled back.

The hub's snapshot can be wrong for a moment (local load arrived, a node
went bad, another tenant's gang got there first), so a gang the hub placed
may sit in the member's queue. `stuck_gangs(hub)` (a cleanup_ctx-style
factory, listed after status sync, whose job cache and member object index
it reads) checks every tick for jobs in phase Placed whose placement
(history entry "Placed" of the current epoch, else when this hub first saw
it) is older than `stuck_timeout_seconds` (HubSettings.stuck, default 120)
while the member, reachable and watched, still shows the gang unadmitted.
Such a gang is pulled back, every step recorded in the job's history:

1. "NotAdmitted": why (the member's own explanation) and for how long; the
   Admitted condition says the gang is being pulled back;
2. its member objects of that epoch are deleted (pods first, uid-guarded;
   through the Dispatcher it is handed, the only writer of member objects)
   and the hub waits until the member shows none left, so the gang can
   never run in two clusters at once (with the default scheduler part of
   it may have started);
3. "ClusterExcluded": the cluster is excluded for this job until
   now + `stuck_exclusion_seconds` (default 600) in
   status.placement.excludedClusters, which placement honours;
4. "Requeued" (`jobs.requeue`): back to Pending with the cluster cleared;
   the next placement takes epoch + 1; the reservation is forgotten.

The same loop then sweeps the jobs' deadlines (controllers/deadlines.py:
spec.activeDeadlineSeconds and spec.placement.giveUpAfterSeconds).

Status sync leaves a job alone while it is being pulled back
(the term's `pulling_back`, controllers/pipeline.py). A cluster that is out of contact is not
judged here (losing a cluster is failover's business). This module never
deletes objects of another epoch, job or hub, and never logs an object
body or a credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.timestamps import format_time
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.controllers.context import HubContext
from federator.controllers.deadlines import JobDeadlines
from federator.controllers.dispatch import Dispatcher
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    PHASE_PLACED,
    append_history,
    cluster_scheduler,
    current_placement,
    history_entry,
    job_ref,
    placed_at,
    requeue,
    reservations,
    set_condition,
    update_job_status,
)
from federator.controllers.memberobjects import MemberObjects
from federator.controllers.membercluster import MemberClusters
from federator.controllers.status_sync import (
    CONDITION_ADMITTED,
    fence_verdict,
    gang_status,
    lifecycle_tick_seconds,
    requeue_fenced,
)
from federator.delegation import GangPhase, adapter_for
from federator.obs import get_logger
from federator.store.protocol import StoreError
from federator.controllers.loops import background_loop

__all__ = ["PullBack", "StuckGangs", "placed_at", "stuck_gangs"]

_log = get_logger("controllers.stuck")


@dataclass
class PullBack:
    """A stuck gang being pulled back from `cluster` at `epoch`."""

    cluster: str
    epoch: int
    why: str
    started: float


class StuckGangs:
    """See the module docstring. Run it with `stuck_gangs(hub)`."""

    def __init__(self, hub: HubContext, *, objects: MemberObjects, jobs: JobCache, dispatcher: Dispatcher,
                 pulling_back: dict[str, PullBack], members: MemberClusters | None = None) -> None:
        self.hub = hub
        self.members = members
        self.objects = objects
        self.jobs = jobs
        self.dispatcher = dispatcher
        self.timeout = hub.settings.stuck.timeout_seconds
        self.exclusion = hub.settings.stuck.exclusion_seconds
        self.first_seen: dict[tuple[str, int], float] = {}
        self.pulling = pulling_back
        #: pull-backs completed since start (tests read it; the metric is the public face)
        self.pulled_back = 0

    async def tick(self) -> None:
        now = time.time()
        seen: set[tuple[str, int]] = set()
        for uid, job in list(self.jobs.jobs.items()):
            if uid in self.pulling:
                await self._continue(uid, job, now=now)
                continue
            body = Body(job)
            if body.phase != PHASE_PLACED or body.deleting:  # (a job being deleted: the finalizer deletes it)
                continue  # the phase first: most jobs are past it, and this runs over every job on every tick
            cluster, epoch = current_placement(job)
            if cluster is None:
                continue
            seen.add((uid, epoch))
            since = self.first_seen.get((uid, epoch))
            if since is None:  # its Placed entry of this epoch does not change: read once per (uid, epoch)
                since = self.first_seen[(uid, epoch)] = placed_at(job, epoch=epoch) or now
            if now - since < self.timeout:
                continue
            await self._begin(uid, job, cluster=cluster, epoch=epoch, since=since, now=now)
        for key in set(self.first_seen) - seen:
            del self.first_seen[key]

    async def _begin(self, uid: str, job: dict[str, Any], *, cluster: str, epoch: int, since: float,
                     now: float) -> None:
        index = self.objects.get(cluster)
        scheduler = cluster_scheduler(self.hub, cluster)
        if index is None or not index.ready or scheduler is None or not self.objects.reachable(cluster):
            return  # out of contact: not ours to judge
        try:
            adapter = adapter_for(scheduler[0])
        except KeyError:
            return
        gs = gang_status(job, index, adapter, epoch=epoch)
        if gs.phase is not GangPhase.PLACED:
            return  # admitted (or further): status sync will say so
        waited = round(now - since)
        why = (f"cluster {cluster} did not admit the gang within {self.timeout:g}s (placed {waited}s ago): "
               f"{gs.message}")
        ref = job_ref(job)

        def mark(fresh: dict[str, Any]) -> dict[str, Any] | None:
            status = fresh["status"]
            if status.get("phase") != PHASE_PLACED or current_placement(fresh) != (cluster, epoch):
                return None
            append_history(status, history_entry("NotAdmitted", cluster=cluster, epoch=epoch, message=why, now=now))
            set_condition(status, type=CONDITION_ADMITTED, state="False", reason="NotAdmittedInTime",
                          message=f"pulling the gang back from cluster {cluster}: {why}", now=now)
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mark, uid=uid)
        if stored is None:
            return
        self.pulling[uid] = PullBack(cluster=cluster, epoch=epoch, why=why, started=now)
        self.hub.events.record(stored, controller="stuck-gangs", reason="NotAdmitted", action="PullBack",
                               warning=True, message=f"pulling the gang back: {why}")
        self.hub.metrics.gangs_pulled_back.labels(cluster=cluster).inc()
        _log.warning("gang not admitted in time; pulling it back", job=ref.key, cluster=cluster, epoch=epoch,
                     waited_s=waited, reason=gs.reason)
        await self._continue(uid, stored, now=now)

    async def _continue(self, uid: str, job: dict[str, Any], *, now: float) -> None:
        pull = self.pulling[uid]
        ref = job_ref(job)
        if Body(job).phase != PHASE_PLACED or current_placement(job) != (pull.cluster, pull.epoch):
            del self.pulling[uid]  # someone else moved it on (deleted, failed over): nothing left to do
            return
        index = self.objects.get(pull.cluster)
        if index is None or self.dispatcher.members.client(pull.cluster) is None or not index.ready:
            return  # wait for the member: its objects must be seen gone before the gang may go elsewhere
        left = [o for o in index.objects_of(uid) if o.epoch == pull.epoch]
        if left:
            await self.dispatcher.delete_objects(pull.cluster, left)
            return
        # Gone: if the member's fence agent deleted them (this hub's lease there expired after the placement,
        # on a loaded machine or in a partition), the cluster did nothing wrong: placed again, not excluded.
        lease = self.members.lease(pull.cluster) if self.members is not None else None
        fenced = fence_verdict(lease, job, epoch=pull.epoch, missing_since=pull.started, now=now)
        if fenced is None:
            return  # the next acknowledged renewal of the lease says
        if fenced:
            await requeue_fenced(self.hub, job, cluster=pull.cluster, epoch=pull.epoch, now=now,
                                 controller="stuck-gangs")
            reservations(self.hub).forget(uid)
            del self.pulling[uid]
            return
        until = now + self.exclusion
        deleted_message = f"the gang's member objects of epoch {pull.epoch} are gone from cluster {pull.cluster}"
        excluded_message = f"cluster {pull.cluster} excluded for this job until {format_time(until)}"

        def pull_back(fresh: dict[str, Any]) -> dict[str, Any] | None:
            status = fresh["status"]
            if status.get("phase") != PHASE_PLACED or current_placement(fresh) != (pull.cluster, pull.epoch):
                return None
            append_history(status, history_entry("PulledBack", cluster=pull.cluster, epoch=pull.epoch,
                                                 message=deleted_message, now=now))
            append_history(status, history_entry("ClusterExcluded", cluster=pull.cluster, epoch=pull.epoch,
                                                 message=excluded_message, now=now))
            requeue(status, reason="NotAdmitted", message=pull.why, now=now, job=ref.key, exclude_until=until)
            set_condition(status, type=CONDITION_ADMITTED, state="False", reason="PulledBack",
                          message=f"pulled back from cluster {pull.cluster}: {pull.why}", now=now)
            return fresh

        if (stored := await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=pull_back,
                                              uid=uid)) is not None:
            self.hub.events.record(stored, controller="stuck-gangs", reason="PulledBack", action="PullBack",
                                   warning=True, message=f"{deleted_message}; requeued, {excluded_message}")
        reservations(self.hub).forget(uid)
        del self.pulling[uid]
        self.pulled_back += 1
        _log.info("gang pulled back and requeued", job=ref.key, cluster=pull.cluster, epoch=pull.epoch,
                  excluded_until=format_time(until))


async def _loop(hub: HubContext, stuck: StuckGangs, deadlines: JobDeadlines) -> None:
    tick = lifecycle_tick_seconds(hub)
    while True:
        await asyncio.sleep(tick)
        started = time.perf_counter()
        try:
            await stuck.tick()
        except (ApiError, StoreError) as e:
            _log.warning("stuck-gang check failed; will retry", error=str(e))
        checked = time.perf_counter()
        hub.metrics.loop_phase_seconds.labels(loop="stuck_gangs", phase="check").observe(checked - started)
        try:  # the same sweep over the job cache judges the jobs' deadlines (controllers/deadlines.py)
            await deadlines.tick()
        except (ApiError, StoreError) as e:
            _log.warning("deadline check failed; will retry", error=str(e))
        hub.metrics.loop_phase_seconds.labels(loop="stuck_gangs", phase="deadlines").observe(
            time.perf_counter() - checked)


async def stuck_gangs(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the stuck-gang loop over the term's parts (`hub.parts`)."""
    parts = hub.parts
    stuck = StuckGangs(hub, objects=parts.objects, jobs=parts.jobs, dispatcher=parts.dispatcher,
                       pulling_back=parts.pulling_back, members=parts.members)
    deadlines = JobDeadlines(hub, objects=parts.objects, jobs=parts.jobs, dispatcher=parts.dispatcher,
                             pulling_back=parts.pulling_back)
    parts.running.stuck = stuck
    try:
        async with background_loop(_loop(hub, stuck, deadlines), name="stuckgangs:loop", what="stuck-gang loop", log=_log):
            yield
    finally:
        parts.running.stuck = None
        parts.pulling_back.clear()
