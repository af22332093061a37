"""Failover: the gangs of a lost member cluster move whole, fail, or wait, and never run twice.

`cluster_failover(hub)` (a cleanup_ctx-style factory, listed in hub/app.py after
the job cache and member sync) is handed the term's job cache, member syncs
(`MemberClusters`: each cluster's health) and dispatches in flight (`hub.parts`)
and checks every tick:

1. **Lost.** A cluster out of contact for longer than its grace, counted from
   the *first* failed contact (`ClusterHealth.lost_at`; grace from
   `MemberCluster.spec.failover.gracePeriodSeconds`, else the hub's
   `--cluster-loss-grace`), is Lost: the health's Lost condition says so on
   the MemberCluster. A blip shorter than the grace moves nothing.
2. **The hub may be the one cut off.** When at least `mass_loss_threshold`
   (default 0.5) of the registered clusters, and at least 2, lost contact
   within one grace window of a lost cluster's first loss, the hub assumes
   it is itself partitioned (kube's node-lifecycle controller in full
   disruption) and moves nothing: the Lost condition's reason turns
   `HubPartitioned`, `federator_hub_partitioned` is 1 and a log line says so.
   When the hub is no longer judged cut off, every cluster held back by it
   gets a fresh grace from that moment (kube's node-lifecycle controller
   resets its nodes' probe times on leaving full disruption): the end of a
   partition of every cluster reaches the clusters one by one, and the
   last one back must not be judged lost alone.
3. **Fenced first.** The gangs of a Lost cluster move only once its fence
   holds too: `max(lost_at, MemberLease.fenced_after())`, i.e. the member's
   fence agent has deleted this hub's pods there (fencing/hublease.py,
   docs/failover.md). Without a lease (turned off) only the grace counts.
4. **Per gang, by `spec.failover.onClusterLoss`:** `requeue` (default): a
   "ClusterLost" history entry (cluster, old epoch, new epoch), back to the
   queue (`jobs.requeue`; the next decision takes epoch + 1, and placement's
   health filter keeps the cluster out until it is Ready again), at most
   `maxRequeues` times, then Failed with reason `RequeueLimit`; `fail`:
   Failed with reason `ClusterLost`; `wait`: stays, with the condition
   `WaitingForCluster` (cleared when the cluster is back). A failed gang's
   epoch is raised and its cluster cleared, so the epoch fence kills its old
   copy when the cluster returns. Failovers are rate-limited
   (`failover_rate`, gangs per second, default 20, a token bucket) so that a
   flapping link cannot stampede the other clusters.

Jobs being deleted (the finalizer's business) or whose dispatch is in flight
are left alone. Every status write is fenced with the leader's token. This
module never talks to a member cluster and never logs an object body or a
credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apiserver.errors import ApiError
from federator.apis.timestamps import format_time
from federator.apis.views import Body
from federator.controllers.context import HubContext
from federator.controllers.jobs import (
    ACTIVE_PHASES,
    PHASE_FAILED,
    append_history,
    current_placement,
    InFlight,
    failover_policy,
    history_entry,
    job_ref,
    max_requeues,
    phase_of,
    requeue,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.loops import background_loop
from federator.controllers.jobcache import JobCache
from federator.controllers.membercluster import MemberClusters
from federator.controllers.status_sync import CONDITION_FAILED, lifecycle_tick_seconds
from federator.obs import get_logger
from federator.store.protocol import StoreError

__all__ = ["CONDITION_WAITING", "ClusterFailover", "LossView", "cluster_failover", "mass_loss"]

_log = get_logger("controllers.failover")

CONDITION_WAITING = "WaitingForCluster"

_WRITE_CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class LossView:
    """One cluster's loss, as the failover controller judges it at one moment."""

    cluster: str
    first_loss: float
    lost_at: float
    #: when its gangs may move: lost, and the member's fence agent has killed this hub's pods there
    move_at: float
    grace: float


def mass_loss(first_losses: Mapping[str, float], *, cluster: str, window: float, registered: int,
              threshold: float) -> int | None:
    """How many clusters lost contact within `window` of `cluster`'s first loss, when that many (at least 2,
    and at least `threshold` of the `registered` clusters) mean the hub itself is cut off; else None."""
    first = first_losses[cluster]
    together = sum(1 for t in first_losses.values() if abs(t - first) <= window)
    if together >= 2 and registered > 0 and together >= threshold * registered:
        return together
    return None


#: A cluster not heard from for this many probe intervals counts as out of contact in the mass-loss
#: judgement (only there: it is not Lost for that).
SILENT_PROBES = 3


class _TokenBucket:
    def __init__(self, rate: float, *, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.at = now

    def take(self, now: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class ClusterFailover:
    """See the module docstring. Run it with `cluster_failover(hub)`."""

    def __init__(self, hub: HubContext, *, jobs: JobCache, members: MemberClusters, in_flight: InFlight) -> None:
        self.hub = hub
        self.jobs = jobs
        self.members = members
        self.threshold = hub.settings.failover.mass_loss_threshold
        self.rate = hub.settings.failover.rate_per_second
        self.bucket = _TokenBucket(self.rate, now=time.monotonic())
        self.inflight = in_flight
        #: True while the hub judges itself cut off (mass loss)
        self.partitioned = False
        #: outcome -> gangs handled since start (tests read it; the metric is the public face)
        self.handled: dict[str, int] = {}
        self._throttled_logged = False
        #: clusters held back by the last mass loss -> when it ended (their grace counts from then)
        self._fresh_grace: dict[str, float] = {}
        self._held: set[str] = set()
        #: jobs waiting for a lost cluster at the last scan (the first tick scans everything, e.g. after a restart)
        self._waiting = 1

    # ------------------------------------------------------------ judging clusters

    def losses(self, *, now: float) -> tuple[dict[str, LossView], set[str]]:
        """(the Lost clusters whose gangs may move or will once fenced, the Lost clusters held back by a
        mass loss). Updates each health's `hub_partitioned` flag and the hub's partitioned state."""
        syncs = self.members.syncs
        # A cluster whose probe is still hanging has no failed contact on record yet, but has been silent
        # since its last contact: counted as out of contact from then, so that a partition of every
        # cluster is seen as one even when one cluster's probe fails later than another's (a loaded hub).
        silence = SILENT_PROBES * self.hub.settings.member_sync.probe_interval_seconds
        first_losses: dict[str, float] = {}
        for name, sync in syncs.items():
            health = sync.health
            if health.first_loss_of_contact is not None:
                first_losses[name] = health.first_loss_of_contact
            elif health.last_contact is not None and now - health.last_contact > silence:
                first_losses[name] = health.last_contact
        # The Lost condition itself (not only the clock): when it is True the cluster's snapshot is already
        # unhealthy (Lost is never Ready), so placement cannot send a requeued gang straight back there.
        held = {name for name, sync in syncs.items()
                if sync.health.lost and now >= (sync.health.lost_at() or now + 1.0)
                and mass_loss(first_losses, cluster=name, window=sync.health.loss_grace_seconds,
                              registered=len(syncs), threshold=self.threshold) is not None}
        partitioned = bool(held)
        if not partitioned and self._held:
            # the mass loss is over: its clusters get a fresh grace from now, not from their first loss
            self._fresh_grace.update(dict.fromkeys(self._held & set(syncs), now))
        self._held = held
        lost: dict[str, LossView] = {}
        for name, sync in syncs.items():
            health = sync.health
            lost_at = health.lost_at()
            if lost_at is None:
                self._fresh_grace.pop(name, None)  # back in contact: its next loss is a new one
            elif name in self._fresh_grace:
                lost_at = max(lost_at, self._fresh_grace[name] + health.loss_grace_seconds)
            if name not in held and lost_at is not None and now >= lost_at and health.lost:
                lease = getattr(sync, "lease", None)
                fenced = lease.fenced_after() if lease is not None else lost_at
                lost[name] = LossView(cluster=name, first_loss=first_losses[name], lost_at=lost_at,
                                      move_at=max(lost_at, fenced), grace=health.loss_grace_seconds)
            if health.hub_partitioned != (name in held):
                health.hub_partitioned = name in held
                refresh = getattr(sync, "refresh_health", None)
                if refresh is not None:
                    refresh()
        if partitioned != self.partitioned:
            self.partitioned = partitioned
            self.hub.metrics.hub_partitioned.set(1 if partitioned else 0)
            if partitioned:
                _log.warning("so many clusters lost contact at once that the hub assumes it is itself cut off; "
                             "failover suspended", lost=sorted(held), registered=len(syncs),
                             threshold=self.threshold)
            else:
                _log.info("the hub is no longer judged cut off; failover resumes, with a fresh grace for "
                          "the clusters still out of contact", fresh_grace=sorted(self._fresh_grace))
        return lost, held

    # ------------------------------------------------------------ the tick

    async def tick(self) -> None:
        now = time.time()
        lost, held = self.losses(now=now)
        if not lost and not self._waiting:
            return  # nothing lost, no job waiting for a cluster: no need to look at every job
        waiting_back: list[tuple[str, dict[str, Any], str]] = []
        due: list[tuple[str, dict[str, Any], LossView, int]] = []
        waiting = 0
        for uid, job in list(self.jobs.jobs.items()):
            cluster, epoch = current_placement(job)
            if cluster is None or phase_of(job) not in ACTIVE_PHASES:
                continue
            waiting += _waiting_for(job) is not None
            if Body(job).deleting:
                continue  # the deletion finalizer handles it (and its grace for unreachable clusters)
            view = lost.get(cluster)
            if view is None:
                if cluster not in held and _waiting_for(job) == cluster:
                    waiting_back.append((uid, job, cluster))
                continue
            if now < view.move_at or uid in self.inflight:
                continue
            if failover_policy(job) == "wait" and _waiting_for(job) == cluster:
                continue
            due.append((uid, job, view, epoch))
        # jobs that wait keep the scans going (to see their cluster return); a wait begun this tick counts too
        self._waiting = waiting + sum(1 for item in due if failover_policy(item[1]) == "wait") - len(waiting_back)
        for uid, job, cluster in waiting_back:
            await self._cluster_back(uid, job, cluster=cluster, now=now)
        throttled = 0
        chosen = []
        for item in due:
            if not self.bucket.take(time.monotonic()):
                throttled += 1
                continue
            chosen.append(item)
        # Independent jobs: their status writes go out together, a few at a time (500 gangs of a lost
        # cluster one after the other took seconds of store round trips).
        for start in range(0, len(chosen), _WRITE_CONCURRENCY):
            await asyncio.gather(*(self._fail_over(uid, job, view=view, epoch=epoch, now=now)
                                   for uid, job, view, epoch in chosen[start:start + _WRITE_CONCURRENCY]))
        if throttled and not self._throttled_logged:
            _log.info("failovers rate-limited; the rest follow at the failover rate", waiting=throttled,
                      rate_per_s=self.rate)
        self._throttled_logged = throttled > 0

    async def _fail_over(self, uid: str, job: dict[str, Any], *, view: LossView, epoch: int, now: float) -> None:
        ref = job_ref(job)
        policy = failover_policy(job)
        cluster = view.cluster
        since = format_time(view.first_loss)
        lost_message = f"cluster {cluster} lost: no contact since {since} (grace {view.grace:g}s)"
        outcome = ""

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal outcome
            status = fresh["status"]
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch):
                return None
            if Body(fresh).deleting:
                return None
            requeues = int(status.get("requeues") or 0)
            limit = max_requeues(fresh)
            if policy == "wait":
                if _waiting_for(fresh) == cluster:
                    return None
                outcome = "waiting"
                append_history(status, history_entry("ClusterLost", cluster=cluster, epoch=epoch, now=now,
                                                     message=f"{lost_message}; the gang waits for it to return "
                                                             "(onClusterLoss: wait)"))
                set_condition(status, type=CONDITION_WAITING, state="True", reason="ClusterLost",
                              message=f"waiting for cluster {cluster}: {lost_message}", now=now)
                return fresh
            if policy == "requeue" and requeues < limit:
                outcome = "requeued"
                append_history(status, history_entry(
                    "ClusterLost", cluster=cluster, epoch=epoch, now=now,
                    message=f"{lost_message}; the gang moves whole elsewhere at epoch {epoch + 1} (requeue "
                            f"{requeues + 1} of at most {limit}); {cluster} is excluded until it is Ready again "
                            "and its copy is fenced (the member's agent deleted it; any leftover is deleted "
                            "when the cluster returns)"))
                requeue(status, reason="ClusterLost", message=f"requeued: {lost_message}", now=now, job=ref.key)
                return fresh
            if policy == "requeue":
                outcome, reason = "requeue_limit", "RequeueLimit"
                message = f"{lost_message}; the job was requeued {requeues} times already (maxRequeues {limit})"
            else:
                outcome, reason = "failed", "ClusterLost"
                message = f"{lost_message}; onClusterLoss: fail"
            append_history(status, history_entry("ClusterLost", cluster=cluster, epoch=epoch, now=now,
                                                 message=f"{message}; the job fails (epoch {epoch + 1} fences "
                                                         "the old copy)"))
            placement = dict(status.get("placement") or {})
            placement.pop("cluster", None)
            placement.pop("decisionResourceVersion", None)
            placement.pop("mode", None)
            placement["epoch"] = epoch + 1
            status["placement"] = placement
            set_condition(status, type=CONDITION_FAILED, state="True", reason=reason, message=message, now=now)
            set_phase(status, PHASE_FAILED, reason=reason, message=message, now=now, job=ref.key, cluster=cluster)
            append_history(status, history_entry(PHASE_FAILED, cluster=cluster, epoch=epoch + 1, message=message,
                                                 now=now))
            return fresh

        try:
            stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                             uid=uid)
        except (ApiError, StoreError) as e:
            _log.warning("could not fail a gang over; will retry", job=ref.key, cluster=cluster, error=str(e))
            return
        if stored is None or not outcome:
            return
        self.hub.events.record(stored, controller="failover", reason="ClusterLost", action="Failover", warning=True,
                               message=lost_message + {
                                   "waiting": "; the gang waits for it to return (onClusterLoss: wait)",
                                   "requeued": f"; requeued: the gang moves whole elsewhere at epoch {epoch + 1}",
                               }.get(outcome, "; the job fails"))
        if outcome != "waiting":
            reservations(self.hub).forget(uid)
        if outcome == "requeued":
            self.hub.metrics.job_requeues.labels(reason="ClusterLost").inc()
        self.handled[outcome] = self.handled.get(outcome, 0) + 1
        self.hub.metrics.failovers.labels(cluster=cluster, outcome=outcome).inc()
        _log.warning("gang failed over from a lost cluster", job=ref.key, cluster=cluster, epoch=epoch,
                     outcome=outcome, policy=policy, first_loss=since)

    async def _cluster_back(self, uid: str, job: dict[str, Any], *, cluster: str, now: float) -> None:
        ref = job_ref(job)

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if _waiting_for(fresh) != cluster:
                return None
            status = fresh["status"]
            set_condition(status, type=CONDITION_WAITING, state="False", reason="ClusterReturned",
                          message=f"cluster {cluster} is back in contact", now=now)
            append_history(status, history_entry("ClusterReturned", cluster=cluster,
                                                 epoch=current_placement(fresh)[1], now=now,
                                                 message=f"cluster {cluster} is back in contact"))
            return fresh

        try:
            await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=uid)
        except (ApiError, StoreError) as e:
            _log.warning("could not record a cluster's return on a waiting job; will retry", job=ref.key,
                         cluster=cluster, error=str(e))


def _waiting_for(job: Mapping[str, Any]) -> str | None:
    """The cluster a `wait` job waits for (its WaitingForCluster condition is True), else None."""
    for condition in Body(job).status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_WAITING \
                and condition.get("status") == "True":
            cluster, _ = current_placement(job)
            return cluster
    return None


async def _loop(hub: HubContext, failover: ClusterFailover) -> None:
    tick = lifecycle_tick_seconds(hub)
    while True:
        await asyncio.sleep(tick)
        started = time.perf_counter()
        try:
            await failover.tick()
        except (ApiError, StoreError) as e:
            _log.warning("failover check failed; will retry", error=str(e))
        hub.metrics.loop_phase_seconds.labels(loop="failover", phase="check").observe(time.perf_counter() - started)


async def cluster_failover(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the failover loop over the term's parts (`hub.parts`)."""
    parts = hub.parts
    failover = ClusterFailover(hub, jobs=parts.jobs, members=parts.members, in_flight=parts.in_flight)
    parts.running.failover = failover
    try:
        async with background_loop(_loop(hub, failover), name="failover:loop", what="failover loop", log=_log):
            yield
    finally:
        parts.running.failover = None
        hub.metrics.hub_partitioned.set(0)
