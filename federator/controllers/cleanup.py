"""Deletion and garbage collection of the member objects this hub created.

`member_cleanup(hub)` (a cleanup_ctx-style factory, listed in hub/app.py after
status sync) is handed the term's job cache, member object index, member syncs,
epoch fence and Dispatcher (`hub.parts`) and runs two duties. It decides what
goes; the deletes themselves are dispatch's (`Dispatcher.delete_objects`: dispatch
is the only writer of member objects):

- **Deletion (finalizer).** Every TrainingJob carries
  `hubapi.MEMBER_CLEANUP_FINALIZER` while this controller runs. When a job is
  deleted (deletionTimestamp set), its member objects in every cluster (any
  epoch) are deleted, pods first, each with a uid precondition so that a
  newer object of the same name is never touched. Once no dispatch of the
  job is in flight (the term's `InFlight`: objects may still be on
  their way) and every cluster shows none of them left (its index, and then
  the member's own list, which cannot lag), the finalizer is removed
  (fenced) and the API server removes the job. Meanwhile the job keeps its
  phase (a job deleted while Running never turns Failed: status sync leaves
  a deleting job alone) and its condition Terminating=True
  (DeletingMemberObjects) says which clusters still hold its objects. A cluster that stays unreachable does not block a
  deletion forever: after `cleanup_grace_seconds` (HubSettings.gc, default
  60) the finalizer goes anyway and the GC collects the leftovers when the
  cluster returns (they are orphans then).
- **GC and the epoch fence.** Periodically (`member_gc_interval_seconds`,
  default 30), and at once for a cluster whose watches come back after a loss
  of contact, every object labelled by this hub is checked against a fresh
  read of its job: an object whose job no longer exists (or is another
  object of the same name), whose epoch is older than the job's current one,
  or whose job is no longer placed in that cluster at that epoch (pulled
  back, requeued) is deleted and counted
  (`federator_member_orphans_collected_total{cluster,reason}`). The read of
  the job happens after the object was seen, and the hub writes a decision
  before it creates objects, so a live object is never mistaken for an
  orphan. The first pass after a (re)connection goes over what the member
  lists then, not over the watch index (whose resumed watch may not have
  replayed what was written meanwhile). Until that pass has issued its
  deletes, the term's `EpochFence` (controllers/pipeline.py) does not hold
  for that cluster (`cluster_fenced(hub, cluster)` is False): dispatch into a returning
  cluster that is in contact again waits for the fence (`fence_pending`), so
  an older epoch's copy is killed before a newer one can start there.
  That pass also lists the gangs' Services and ConfigMaps (which nothing
  watches) and has dispatch delete those of orphaned gangs, so one left
  behind by a hub that died between a gang's pods and its Service goes too.

It never deletes an object that another hub or job owns (selectors and
ownership labels), never deletes a job, and never logs an object body or a
credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from federator.apis.timestamps import parse_epoch
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.clusters.client import MemberClientError
from federator.controllers.context import HubContext
from federator.controllers.dispatch import GANG_COMPANION_KINDS, Dispatcher
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    JOB_KIND,
    append_history,
    current_placement,
    history_entry,
    set_condition,
    update_job_status,
    InFlight,
    job_ref,
    reservations,
)
from federator.controllers.membercluster import MemberClusters
from federator.controllers.memberobjects import (
    ClusterObjects,
    MemberObject,
    MemberObjects,
    in_delete_order,
    member_object,
)
from federator.controllers.status_sync import lifecycle_tick_seconds
from federator.delegation.adapter import LABEL_JOB_UID
from federator.hub.kinds import MEMBER_CLEANUP_FINALIZER
from federator.obs import get_logger
from federator.store.protocol import StoreError
from federator.runtime.waits import LoopSlice, wait_event
from federator.controllers.loops import background_loop

if TYPE_CHECKING:
    from federator.controllers.pipeline import EpochFence

__all__ = [
    "GarbageCollector",
    "JobFinalizer",
    "cluster_fenced",
    "list_member_objects",
    "fence_pending",
    "member_cleanup",
    "orphan_reason",
]

_log = get_logger("controllers.cleanup")

#: The condition of a job being deleted (True while its member objects are being removed).
CONDITION_TERMINATING = "Terminating"
REASON_DELETING_MEMBER_OBJECTS = "DeletingMemberObjects"

#: orphan reasons that mean an old copy of a live job's gang (the epoch fence at work)
_STALE_COPY_REASONS = frozenset({"stale-epoch", "not-placed-here"})


def cluster_fenced(hub: HubContext, cluster: str) -> bool:
    """True when the epoch fence of `cluster` holds: since the hub last (re)gained contact with it, a GC
    pass deleted every object of an older epoch (True while no GC runs). Dispatch into `cluster` waits
    until then."""
    return hub.parts.fence.holds(cluster)


def fence_pending(hub: HubContext, cluster: str) -> bool:
    """True when `cluster` is in contact (member sync Ready, this hub's watches up) but its epoch fence
    does not hold yet: the GC pass that deletes older epochs there is due and will run within a tick.
    A cluster out of contact is not pending: its fence cannot rise until it returns."""
    return hub.parts.fence.pending(cluster)


# ---------------------------------------------------------------- reading member objects


async def list_member_objects(client: Any, index: ClusterObjects, *, selector: str,
                              why: str) -> list[MemberObject] | None:
    """The objects matching `selector` in `index`'s cluster as the member lists them now, a read
    that (unlike the watch index) cannot lag; None, logged with `why` it matters, if it cannot."""
    found: list[MemberObject] = []
    # the member copies (operator mode) of the kinds the member serves: those its watch has listed
    for resource in (*index.resources, *(r for r in index.copy_resources if r.key in index.synced)):
        try:
            result = await client.list_all(resource, label_selector=selector)
        except MemberClientError as e:
            _log.warning("could not list the member's objects", cluster=index.cluster, resource=resource.key,
                         error=str(e), consequence=why)
            return None
        found.extend(member_object(index.cluster, resource, item) for item in result.items)
    return in_delete_order(found)


# ---------------------------------------------------------------- deletion with the finalizer


class JobFinalizer:
    """Deletes a deleted job's member objects, then removes its finalizer."""

    def __init__(self, hub: HubContext, *, objects: MemberObjects, jobs: JobCache, members: MemberClusters,
                 dispatcher: Dispatcher, in_flight: InFlight) -> None:
        self.hub = hub
        self.objects = objects
        self.jobs = jobs
        self.members = members
        self.dispatcher = dispatcher
        self.in_flight = in_flight
        self.rt = hub.kind(JOB_KIND)
        self.grace = hub.settings.gc.cleanup_grace_seconds
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        jobs.subscribe(self._job_changed)

    def close(self) -> None:
        self.jobs.unsubscribe(self._job_changed)

    def _job_changed(self, uid: str, job: dict[str, Any] | None) -> None:
        if job is not None and _deleting_with_finalizer(job):
            self.dirty.add(uid)
            self.wake.set()

    def pending(self) -> list[str]:
        return [uid for uid, job in self.jobs.jobs.items() if _deleting_with_finalizer(job)]

    async def finalize(self, uid: str) -> bool:
        """One step for a deleted job; True once its finalizer is removed (or the job is gone)."""
        job = self.jobs.get(uid)
        if job is None or not _deleting_with_finalizer(job):
            return True
        ref = job_ref(job)
        if uid in self.in_flight:
            return False  # its objects may still be on their way: look once the dispatch has returned
        left: list[str] = []
        unknown: list[str] = []
        for cluster, index in sorted(self.objects.clusters.items()):
            if not index.ready:
                unknown.append(cluster)
                continue
            client = self.members.client(cluster)
            mine: list[MemberObject] | None = index.objects_of(uid)
            if not mine and client is not None:
                # The index may not show objects created just before the deletion yet: the member's own
                # list decides before the job is let go.
                mine = await list_member_objects(client, index, selector=f"{self.objects.selector},"
                                                 f"{LABEL_JOB_UID}={uid}", why="the job's deletion waits")
                if mine is None:
                    unknown.append(cluster)
                    continue
            if not mine:
                continue
            left.append(cluster)
            outcome = await self.dispatcher.delete_objects(cluster, mine)
            if outcome is not None and outcome.requested:
                _log.info("deleting a deleted job's member objects", job=ref.key, cluster=cluster,
                          requested=outcome.requested)
        registered = set(self.members.syncs)
        unknown += sorted(registered - set(self.objects.clusters))
        if left or unknown:
            await self._say_terminating(job, left=left, unknown=unknown)
            deleted_at = parse_epoch(Body(job).deletion_timestamp)
            if deleted_at is None or time.time() - deleted_at < self.grace:
                return False
            _log.warning("removing the cleanup finalizer although member objects may remain; the GC collects "
                         "them when the cluster answers", job=ref.key, clusters_with_objects=left,
                         clusters_not_synced=unknown, grace_s=self.grace)
        # The reservation goes with the member objects (never before: pods still there may get bound).
        reservations(self.hub).forget(uid)
        await self._remove_finalizer(ref.namespace, ref.name, uid)
        _log.info("job's member objects deleted; finalizer removed", job=ref.key)
        return True

    async def _say_terminating(self, job: dict[str, Any], *, left: Sequence[str], unknown: Sequence[str]) -> None:
        """The job's condition Terminating=True says what its deletion waits for (kubectl and `federator get`
        show it Terminating from its deletionTimestamp); written when that changes, and recorded as an Event
        the first time. Its phase stays what it was: a job deleted while Running never turns Failed."""
        where = ", ".join(left) or "no cluster"
        message = (f"the job is being deleted: its member objects in {where} are being removed (pods first); "
                   "it goes once none are left")
        if unknown:
            message += f"; waiting to hear from {', '.join(unknown)}"
        current = next((c for c in Body(job).status.get("conditions") or ()
                        if isinstance(c, dict) and c.get("type") == CONDITION_TERMINATING), None)
        if current is not None and current.get("status") == "True" and current.get("message") == message:
            return
        ref = job_ref(job)
        now = time.time()

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if not Body(fresh).deleting:
                return None
            changed = set_condition(fresh["status"], type=CONDITION_TERMINATING, state="True",
                                    reason=REASON_DELETING_MEMBER_OBJECTS, message=message, now=now)
            return fresh if changed else None

        try:
            stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                             uid=ref.uid)
        except (ApiError, StoreError) as e:
            _log.info("could not record that the job is terminating; its deletion goes on", job=ref.key,
                      error=str(e))
            return
        if stored is not None and current is None:
            self.hub.events.record(stored, controller="member-cleanup", reason="Terminating", action="Delete",
                                   message=message)

    async def _remove_finalizer(self, namespace: str, name: str, uid: str) -> None:
        def mutate(job: dict[str, Any]) -> dict[str, Any] | None:
            meta = Body(job)
            finalizers = list(meta.finalizers)
            if meta.uid != uid or MEMBER_CLEANUP_FINALIZER not in finalizers:
                return None
            job["metadata"]["finalizers"] = [f for f in finalizers if f != MEMBER_CLEANUP_FINALIZER]
            return job

        try:
            await self.hub.storage.guaranteed_update(self.rt, namespace=namespace, name=name, mutate=mutate)
        except ApiError as e:
            if e.code != 404:
                raise


def _deleting_with_finalizer(job: dict[str, Any]) -> bool:
    meta = Body(job)
    return meta.deleting and MEMBER_CLEANUP_FINALIZER in meta.finalizers


# ---------------------------------------------------------------- GC and fence


def orphan_reason(obj: MemberObject, job: dict[str, Any] | None) -> str | None:
    """Why `obj` (seen in cluster obj.cluster) must go given a fresh read of its job, or None if it is live.

    Reasons: "job-gone", "unlabelled", "stale-epoch", "not-placed-here". A job being deleted is left
    to the finalizer path."""
    if obj.epoch is None or not obj.job_uid:
        return "unlabelled"
    if job is None or Body(job).uid != obj.job_uid:
        return "job-gone"
    if Body(job).deleting:
        return None
    cluster, epoch = current_placement(job)
    if obj.epoch < epoch:
        return "stale-epoch"
    if obj.epoch == epoch and cluster != obj.cluster:
        return "not-placed-here"
    return None  # live (or, impossibly, newer than the job: never delete what we cannot explain)


class GarbageCollector:
    """Periodic GC of orphaned member objects; the epoch fence on reconnection."""

    def __init__(self, hub: HubContext, *, objects: MemberObjects, members: MemberClusters,
                 dispatcher: Dispatcher, fence: EpochFence) -> None:
        self.hub = hub
        self.objects = objects
        self.members = members
        self.dispatcher = dispatcher
        self.rt = hub.kind(JOB_KIND)
        self.interval = hub.settings.gc.interval_seconds
        #: cluster -> whether its epoch fence holds: the EpochFence's state, which this GC is the only writer of
        self.fence: dict[str, bool] = {}
        fence.held = self.fence
        self.epoch_fence = fence
        self._last_pass: dict[str, float] = {}
        #: (cluster, reason) -> objects deleted since start (tests read it; the metric is the public face)
        self.collected: dict[tuple[str, str], int] = {}
        self.passes = 0

    async def tick(self) -> None:
        now = time.monotonic()
        for cluster in list(self.fence):
            if cluster not in self.objects.clusters:
                del self.fence[cluster]
                self.epoch_fence.unreadable.discard(cluster)
                self._last_pass.pop(cluster, None)
        for cluster, index in list(self.objects.clusters.items()):
            reachable = self.objects.reachable(cluster) and index.ready
            if not reachable:
                if self.fence.get(cluster, True):
                    _log.info("cluster out of contact: fence raised until the next GC pass", cluster=cluster)
                self.fence[cluster] = False
                continue
            due = not self.fence.get(cluster, False) or now - self._last_pass.get(cluster, float("-inf")) >= \
                self.interval
            if not due:
                continue
            # The pass that raises the fence reads the member itself: right after contact returns the
            # watch index may not have caught up with what was written while it was away.
            complete = await self.collect(cluster, listed=not self.fence.get(cluster, False))
            self._last_pass[cluster] = now
            if complete and not self.fence.get(cluster, False):
                self.fence[cluster] = True
                _log.info("epoch fence holds: older epochs deleted", cluster=cluster)

    async def collect(self, cluster: str, *, listed: bool = False) -> bool:
        """One GC pass over `cluster`; True when every orphan's delete was accepted (or it was gone).
        It goes over the watch index, or (`listed`) over what the member lists now."""
        index = self.objects.get(cluster)
        client = self.members.client(cluster)
        if index is None or client is None:
            return False
        started = time.perf_counter()
        self.passes += 1
        if listed:
            found_objects = await list_member_objects(client, index, selector=self.objects.selector,
                                                      why="the epoch fence stays down until the next GC pass")
            if found_objects is None:
                self.epoch_fence.unreadable.add(cluster)
                return False
            self.epoch_fence.unreadable.discard(cluster)
        else:
            found_objects = index.objects_of()
        by_job: dict[tuple[str, str, str], list[MemberObject]] = {}
        for obj in found_objects:
            by_job.setdefault((obj.job_namespace, obj.job_name, obj.job_uid), []).append(obj)
        complete = True
        share = LoopSlice()
        for (namespace, name, _uid), found in sorted(by_job.items()):
            await share.maybe_yield()
            job = await self._read_job(namespace, name)
            doomed: dict[str, list[MemberObject]] = {}
            for obj in found:
                reason = orphan_reason(obj, job)
                if reason is not None:
                    doomed.setdefault(reason, []).append(obj)
            for reason, objs in sorted(doomed.items()):
                outcome = await self.dispatcher.delete_objects(cluster, objs)
                if outcome is None or outcome.failed:
                    complete = False
                if outcome is None:
                    continue
                counted = outcome.requested
                if counted:
                    key = (cluster, reason)
                    self.collected[key] = self.collected.get(key, 0) + counted
                    self.hub.metrics.member_orphans_collected.labels(cluster=cluster, reason=reason).inc(counted)
                    _log.info("orphaned member objects deleted", cluster=cluster, reason=reason, deleted=counted,
                              job=f"{namespace}/{name}", epochs=sorted({o.epoch for o in objs if o.epoch is not None}))
                    if job is not None and reason in _STALE_COPY_REASONS:
                        await self._record_kill(job, cluster=cluster, objs=objs, reason=reason)
        if listed:
            await self._collect_companions(cluster, client)
        self.hub.metrics.loop_phase_seconds.labels(loop="member_gc", phase="collect").observe(
            time.perf_counter() - started)
        return complete

    async def _collect_companions(self, cluster: str, client: Any) -> None:
        """On a pass that reads the member: the gangs' Services and ConfigMaps whose gang is orphaned (no
        watch indexes them, so one the gang's deletion missed, say a hub that died between the pods and the
        Service, is found only here). Deleted by dispatch; not counted as orphans (the gang's pods were)."""
        found: list[MemberObject] = []
        for resource in GANG_COMPANION_KINDS:
            try:
                listing = await client.list_all(resource, label_selector=self.objects.selector)
            except MemberClientError as e:
                _log.info("could not list the gangs' companion objects; the next pass that reads the member "
                          "tries again", cluster=cluster, resource=resource.key, error=str(e)[:512])
                return
            found += [member_object(cluster, resource, item) for item in listing.items]
        doomed: list[MemberObject] = []
        jobs: dict[tuple[str, str], dict[str, Any] | None] = {}
        for obj in found:
            key = (obj.job_namespace, obj.job_name)
            if key not in jobs:
                jobs[key] = await self._read_job(*key)
            if not obj.deleting and orphan_reason(obj, jobs[key]) is not None:
                doomed.append(obj)
        if doomed:
            await self.dispatcher.delete_companions(cluster, doomed)

    async def _record_kill(self, job: dict[str, Any], *, cluster: str, objs: Sequence[MemberObject],
                           reason: str) -> None:
        """The job's history shows that an old copy of its gang was killed in `cluster` (the epoch fence)."""
        ref = job_ref(job)
        epochs = sorted({o.epoch for o in objs if o.epoch is not None})
        pods = sum(1 for o in objs if o.resource.kind == "Pod")
        now = time.time()
        why = "an older epoch" if reason == "stale-epoch" else "no longer placed there"
        message = (f"stale copy killed in cluster {cluster}: {len(objs)} member objects ({pods} pods) of epoch "
                   f"{', '.join(map(str, epochs))} deleted ({why}; the job is at epoch {current_placement(job)[1]})")

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            append_history(fresh["status"], history_entry("StaleCopyKilled", cluster=cluster,
                                                          epoch=epochs[-1] if epochs else None, message=message,
                                                          now=now))
            return fresh

        self.hub.events.record(job, controller="cleanup", reason="StaleCopyKilled", action="Fence", warning=True,
                               message=message)
        try:
            await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=ref.uid)
        except (ApiError, StoreError) as e:
            _log.warning("could not record a killed stale copy in the job's history", job=ref.key,
                         cluster=cluster, error=str(e))

    async def _read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        if not namespace or not name:
            return None
        try:
            return await self.hub.storage.get(self.rt, namespace=namespace, name=name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise


# ---------------------------------------------------------------- the controller


async def _loop(hub: HubContext, finalizer: JobFinalizer, gc: GarbageCollector) -> None:
    tick = lifecycle_tick_seconds(hub)
    while True:
        await wait_event(finalizer.wake, tick)
        finalizer.wake.clear()
        uids: Iterable[str] = set(finalizer.dirty) | set(finalizer.pending())
        finalizer.dirty.clear()
        started = time.perf_counter()
        for uid in uids:
            try:
                await finalizer.finalize(uid)
            except (ApiError, StoreError) as e:
                _log.warning("could not finish a job deletion; will retry", job_uid=uid, error=str(e))
        hub.metrics.loop_phase_seconds.labels(loop="member_cleanup", phase="finalize").observe(
            time.perf_counter() - started)
        try:
            await gc.tick()
        except (ApiError, StoreError) as e:
            _log.warning("GC pass failed; will retry", error=str(e))


async def member_cleanup(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: job finalizer and member GC over the term's parts (`hub.parts`)."""
    parts = hub.parts
    finalizer = JobFinalizer(hub, objects=parts.objects, jobs=parts.jobs, members=parts.members,
                             dispatcher=parts.dispatcher, in_flight=parts.in_flight)
    gc = GarbageCollector(hub, objects=parts.objects, members=parts.members, dispatcher=parts.dispatcher,
                          fence=parts.fence)
    parts.running.gc = gc
    try:
        async with background_loop(_loop(hub, finalizer, gc), name="membercleanup:loop",
                                   what="member cleanup loop", log=_log):
            yield
    finally:
        finalizer.close()
        parts.running.gc = None
        parts.fence.held = None  # no GC: nothing to wait for
        parts.fence.unreadable.clear()
