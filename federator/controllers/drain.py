"""Drain and failover plans: move a cluster's gangs elsewhere whole, a few at a time; say where they would go.

- `failover_plan(hub, cluster, purpose=...)`: where each active gang placed in
  `cluster` would go now, by the real placement engine over the hub's current
  snapshots and reservations, excluding `cluster`, changing nothing. For
  purpose "loss" only gangs whose `spec.failover.onClusterLoss` is `requeue`
  get a target (the others stay: fail, wait); for "drain" every gang does.
  The hub serves it as the `memberclusters/{name}/failoverplan` subresource
  (`federator drill --dry-run`).
- `cluster_drain(hub)` (a cleanup_ctx-style factory, listed after the job
  cache, dispatch, placement and failover; handed the job cache, the member
  syncs and the Dispatcher, `hub.parts`): for every MemberCluster with `spec.drain`
  (set by `federator cluster drain`, which also cordons it), at most
  `spec.drain.maxConcurrent` gangs move at a time, each in this order:
  1. its new home is decided by placement (the drained cluster excluded) and
     reserved in the hub's reservation book (assume);
  2. the decision is written (write-ahead): history "Drained" (old cluster
     and epoch), phase Placed in the new cluster at epoch + 1, and
     `status.placement.previous = {cluster, epoch}`;
  3. its member objects in the drained cluster are deleted (by dispatch:
     `Dispatcher.delete_previous`), and
  4. it is dispatched; the dispatcher itself waits until the previous copy is
     gone from the drained cluster (`Dispatcher.wait_for_previous`), also when
     a restarted hub re-dispatches, so the two copies never run at once.
  Gangs that fit nowhere stay and are listed with their why-not in
  `status.drain.unplaceable`; they are tried again every tick. Progress is in
  `MemberCluster.status.drain` (phase Draining | Complete | Stuck, counts).
  Removing `spec.drain` (uncordon) stops starting new moves.

Writes are fenced with the leader's token (job status) or go through the
status subresource (MemberCluster). Never logs an object body or a credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from federator.apiserver.errors import ApiError
from federator.clusters.client import member_write_reason
from federator.apis.timestamps import format_time
from federator.apis.views import Body
from federator.controllers.context import HubContext
from federator.controllers.dispatch import Dispatcher
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    ACTIVE_PHASES,
    PHASE_PLACED,
    append_history,
    current_placement,
    failover_policy,
    gang_request,
    history_entry,
    job_ref,
    phase_of,
    placed_pods,
    record_placed_size,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.loops import background_loop
from federator.controllers.membercluster import MemberClusters
from federator.controllers.placement import SCHEDULABLE, score_rows, why_not_rows
from federator.controllers.status_sync import lifecycle_tick_seconds
from federator.obs import get_logger
from federator.placement import Decision, GangRequest, Profile, run_cycle
from federator.placement.snapshot import ClusterSnapshot
from federator.runtime.tasks import stop_tasks
from federator.store.protocol import StoreError

__all__ = ["ClusterDrain", "cluster_drain", "failover_plan", "gangs_in"]

_log = get_logger("controllers.drain")

#: how long the drained cluster stays excluded for a moved gang (placement's excludedClusters is not
#: written: this exclusion only shapes the drain's own decision)
_EXCLUDE_SECONDS = 3600.0
_MAX_UNPLACEABLE_ROWS = 1024


def gangs_in(jobs: Mapping[str, Mapping[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """The active gangs (Placed, Admitted, Running; not being deleted) placed in `cluster`, by key."""
    found = [dict(job) for job in jobs.values()
             if current_placement(job)[0] == cluster and phase_of(job) in ACTIVE_PHASES
             and not Body(job).deleting]
    return sorted(found, key=lambda j: job_ref(j).key)


def _previous_cluster(job: Mapping[str, Any]) -> str | None:
    previous = (Body(job).status.get("placement") or {}).get("previous")
    cluster = previous.get("cluster") if isinstance(previous, Mapping) else None
    return cluster if isinstance(cluster, str) else None


def _profile(hub: HubContext) -> Profile:
    """The placement loop's profile (the default while it does not run)."""
    controller = hub.parts.running.placement
    return controller.profile if controller is not None else Profile()


def _snapshots(hub: HubContext) -> dict[str, ClusterSnapshot]:
    return dict(hub.parts.members.snapshots)


def _decide(hub: HubContext, jobs: Sequence[Mapping[str, Any]], *, away_from: str, now: float) -> tuple[
        dict[str, Decision], dict[str, list[dict[str, str]]], dict[str, GangRequest], Any]:
    """Placement for `jobs` with `away_from` excluded, over the current snapshots and reservations (each
    gang's own reservation set aside). (decisions by uid, why-not rows of the unplaced by uid, the gang
    requests by uid, the cycle result)."""
    gangs: dict[str, GangRequest] = {}
    book = reservations(hub).book
    for job in jobs:
        try:
            gang = gang_request(job, now=now)
        except (ValueError, TypeError):
            continue
        gang = replace(gang, excluded_clusters={**gang.excluded_clusters, away_from: now + _EXCLUDE_SECONDS})
        gangs[gang.uid] = gang
        book = book.forget(gang.uid)
    result = run_cycle(list(gangs.values()), _snapshots(hub), _profile(hub), now=now, reservations=book)
    decided = {d.gang_uid: d for d in result.decisions}
    # the cluster being left is excluded by the caller: its own row would only say so
    unplaced = {u.gang_uid: [r for r in why_not_rows(u.why_not) if r["cluster"] != away_from] for u in result.unplaced}
    return decided, unplaced, gangs, result


def failover_plan(hub: HubContext, cluster: str, *, purpose: str = "loss", now: float | None = None) -> dict[str, Any]:
    """Where each active gang of `cluster` would go now (see the module docstring); changes nothing."""
    now = time.time() if now is None else now
    jobs = hub.parts.jobs.jobs
    affected = gangs_in(jobs, cluster)
    movable = [j for j in affected if purpose == "drain" or failover_policy(j) == "requeue"]
    decided, unplaced, _, _ = _decide(hub, movable, away_from=cluster, now=now) if movable else ({}, {}, {}, None)
    rows = []
    for job in affected:
        ref = job_ref(job)
        pods = placed_pods(job)
        decision = decided.get(ref.uid)
        rows.append({
            "namespace": ref.namespace, "name": ref.name, "uid": ref.uid, "epoch": current_placement(job)[1],
            "phase": phase_of(job), "pods": pods, "onClusterLoss": failover_policy(job),
            "target": decision.cluster if decision is not None else None,
            "whyNot": unplaced.get(ref.uid, []),
        })
    return {
        "apiVersion": hub.kind("MemberCluster").api_version, "kind": "FailoverPlan", "cluster": cluster,
        "for": purpose, "generatedAt": format_time(now), "gangs": rows,
        "movable": sum(1 for r in rows if r["target"] is not None),
        "unplaceable": sum(1 for r in rows if r["target"] is None
                           and (purpose == "drain" or r["onClusterLoss"] == "requeue")),
    }


class ClusterDrain:
    """See the module docstring. Run it with `cluster_drain(hub)`."""

    def __init__(self, hub: HubContext, *, jobs: JobCache, members: MemberClusters, dispatcher: Dispatcher) -> None:
        self.hub = hub
        self.jobs = jobs
        self.members = members
        self.dispatcher = dispatcher
        self.rt = hub.kind("MemberCluster")
        self.inflight = dispatcher.in_flight
        #: cluster -> uid -> the task moving that gang
        self.moving: dict[str, dict[str, asyncio.Task[None]]] = {}
        #: cluster -> gangs moved since its drain started
        self.moved: dict[str, int] = {}
        #: cluster -> (gangs when the drain started, when)
        self.started: dict[str, tuple[int, float]] = {}
        self._written: dict[str, dict[str, Any]] = {}

    async def tick(self) -> None:
        now = time.time()
        syncs = self.members.syncs
        for cluster, sync in list(syncs.items()):
            drain = (sync.spec or {}).get("drain")
            if not isinstance(drain, Mapping):
                if cluster in self.started:
                    _log.info("drain stopped (spec.drain removed)", cluster=cluster, moved=self.moved.get(cluster, 0))
                    self.started.pop(cluster, None)
                    self.moved.pop(cluster, None)
                    await self._write_status(cluster, None)
                continue
            await self._drain(cluster, max_concurrent=int(drain.get("maxConcurrent") or 5), now=now)
        for cluster in set(self.started) - set(syncs):
            self.started.pop(cluster, None)
            self.moved.pop(cluster, None)

    async def _drain(self, cluster: str, *, max_concurrent: int, now: float) -> None:
        here = gangs_in(self.jobs.jobs, cluster)
        if cluster not in self.started:
            self.started[cluster] = (len(here), now)
            self.moved[cluster] = 0
            _log.info("drain started", cluster=cluster, gangs=len(here), max_concurrent=max_concurrent)
        tasks = self.moving.setdefault(cluster, {})
        for uid in [u for u, t in tasks.items() if t.done()]:
            del tasks[uid]
        # A gang is moving from its decision until its new home admitted it (a task, then phase Placed).
        arriving = {uid for uid, job in self.jobs.jobs.items() if uid not in tasks and phase_of(job) == PHASE_PLACED
                    and _previous_cluster(job) == cluster}
        moving = len(tasks) + len(arriving)
        slots = max_concurrent - moving
        candidates = [j for j in here if job_ref(j).uid not in tasks and job_ref(j).uid not in self.inflight]
        unplaceable: list[dict[str, str]] = []
        started = 0
        if candidates and slots > 0:
            decided, unplaced, _gangs, result = _decide(self.hub, candidates, away_from=cluster, now=now)
            for job in candidates:
                ref = job_ref(job)
                decision = decided.get(ref.uid)
                if decision is None:
                    rows = unplaced.get(ref.uid, [])
                    detail = "; ".join(f"{r['cluster']}: {r['reason']} ({r['message']})" for r in rows[:6])
                    unplaceable.append({"namespace": ref.namespace, "name": ref.name, "reason": "NoClusterFits",
                                        "message": (f"no other cluster can take the whole gang now: {detail}"
                                                    if detail else "no other cluster can take the whole gang now")
                                        [:4096]})
                    continue
                if started >= slots:
                    continue
                reservation = result.reservations.get(ref.uid)
                if reservation is None:
                    continue
                reservations(self.hub).assume(reservation)  # before anything is written
                started += 1
                self.inflight.begin(ref.uid)
                tasks[ref.uid] = asyncio.get_running_loop().create_task(
                    self._move(job, decision, cluster=cluster), name=f"drain:{cluster}:{ref.key}")
        elif candidates:
            # every slot is busy: keep the last known unplaceable list
            unplaceable = list(((self._written.get(cluster) or {}).get("unplaceable")) or [])
        total, since = self.started[cluster]
        remaining = len(here)
        moving += started
        if remaining == 0 and not moving:
            phase = "Complete"
        elif not moving and remaining and len(unplaceable) >= remaining:
            phase = "Stuck"
        else:
            phase = "Draining"
        status: dict[str, Any] = {"phase": phase, "gangs": total, "moved": self.moved.get(cluster, 0),
                                  "moving": moving, "remaining": remaining,
                                  "startedAt": format_time(since)}
        if unplaceable:
            status["unplaceable"] = unplaceable[:_MAX_UNPLACEABLE_ROWS]
        if phase == "Complete":
            previous = self._written.get(cluster) or {}
            status["finishedAt"] = previous.get("finishedAt") if previous.get("phase") == "Complete" \
                else format_time(now)
        await self._write_status(cluster, status)

    async def _move(self, job: Mapping[str, Any], decision: Decision, *, cluster: str) -> None:
        ref = job_ref(job)
        _, epoch = current_placement(job)
        target = decision.cluster
        now = time.time()
        rows = why_not_rows(decision.why_not)
        scores = score_rows(decision)
        message = f"drained from {cluster}: moves whole to {target} at epoch {epoch + 1}"
        try:
            def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
                if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch):
                    return None
                if Body(fresh).deleting:
                    return None
                status = fresh["status"]
                append_history(status, history_entry("Drained", cluster=cluster, epoch=epoch, message=message,
                                                     now=now))
                placement = dict(status.get("placement") or {})
                placement.pop("mode", None)  # the drained copy's dispatch's
                placement.update(cluster=target, epoch=epoch + 1, whyNot=rows, scores=scores,
                                 decisionResourceVersion=decision.resource_version[:64] or "0",
                                 previous={"cluster": cluster, "epoch": epoch})
                status["placement"] = placement
                status.pop("podCounts", None)
                size = record_placed_size(status, decision)
                model = f" on {decision.gpu_model}" if decision.gpu_model else ""
                placed = (f"placed in {target}{model} ({len(decision.assignment)} pods on {len(decision.nodes)} "
                          f"nodes) at epoch {epoch + 1}{size}, drained from {cluster}")
                append_history(status, history_entry(PHASE_PLACED, cluster=target, epoch=epoch + 1, message=placed,
                                                     now=now))
                set_condition(status, type=SCHEDULABLE, state="True", reason="Placed", message=placed, now=now)
                set_phase(status, PHASE_PLACED, reason="Drained", message=placed, now=now, job=ref.key,
                          cluster=target)
                return fresh

            stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                             uid=ref.uid)
            if stored is None:
                reservations(self.hub).forget(ref.uid)
                return
            _log.info("drain: gang moving", job=ref.key, cluster=cluster, target=target, epoch=epoch + 1)
            self.hub.events.record(stored, controller="drain", reason="Drained", action="Drain", message=message)
            # The old copy goes first (the dispatcher waits until the member shows it gone).
            with member_write_reason("drain"):
                await self.dispatcher.delete_previous(stored, cluster=target)
            result = await self.dispatcher.dispatch(stored, cluster=target, epoch=epoch + 1,
                                                    assignment=decision.assignment, decision_stored=True)
            if not result.ok:
                reservations(self.hub).forget(ref.uid)
                return
            self.moved[cluster] = self.moved.get(cluster, 0) + 1
        except asyncio.CancelledError:
            raise
        except (ApiError, StoreError) as e:
            reservations(self.hub).forget(ref.uid)
            _log.warning("drain: could not move a gang; it is tried again", job=ref.key, cluster=cluster,
                         error=str(e))
        finally:
            self.inflight.end(ref.uid)

    async def _write_status(self, cluster: str, drain: dict[str, Any] | None) -> None:
        if cluster in self._written and self._written[cluster] == drain:
            return

        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            status = dict(Body(obj).status)
            if status.get("drain") == drain or (drain is None and "drain" not in status):
                return None
            if drain is None:
                status.pop("drain", None)
            else:
                status["drain"] = drain
            obj["status"] = status
            return obj

        try:
            await self.hub.storage.guaranteed_update(self.rt, namespace=None, name=cluster, mutate=mutate,
                                                     subresource="status")
        except ApiError as e:
            if e.code != 404:
                _log.warning("could not write the drain status; will retry", cluster=cluster, error=str(e))
                return
        except StoreError as e:
            _log.warning("could not write the drain status; will retry", cluster=cluster, error=str(e))
            return
        if drain is None:
            self._written.pop(cluster, None)
        else:
            self._written[cluster] = drain

    async def stop(self) -> None:
        await stop_tasks(t for per in self.moving.values() for t in per.values())  # failures were logged in _move


async def _loop(hub: HubContext, drain: ClusterDrain) -> None:
    tick = lifecycle_tick_seconds(hub)
    while True:
        await asyncio.sleep(tick)
        started = time.perf_counter()
        try:
            await drain.tick()
        except (ApiError, StoreError) as e:
            _log.warning("drain check failed; will retry", error=str(e))
        hub.metrics.loop_phase_seconds.labels(loop="drain", phase="check").observe(time.perf_counter() - started)


async def cluster_drain(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the drain loop over the term's parts (`hub.parts`)."""
    parts = hub.parts
    drain = ClusterDrain(hub, jobs=parts.jobs, members=parts.members, dispatcher=parts.dispatcher)
    parts.running.drain = drain
    try:
        async with background_loop(_loop(hub, drain), name="drain:loop", what="drain loop", log=_log):
            yield
    finally:
        await drain.stop()
        parts.running.drain = None
