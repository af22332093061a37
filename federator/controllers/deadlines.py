"""Deadlines: spec.activeDeadlineSeconds and spec.placement.giveUpAfterSeconds, judged in one sweep.

`JobDeadlines.tick()` runs in the stuck-gang loop (controllers/stuck.py), once per lifecycle tick, over the
job cache: no timer per job. Two clocks:

- **Active deadline** (a Kubernetes Job's `spec.activeDeadlineSeconds`): counted from `status.startTime`
  (written with the job's first placement decision, controllers/decisions.py, and never reset, as a Job's
  startTime is not across pod restarts), so time spent requeued and waiting to be placed again counts too.
  Past it, the job is Failed (condition Failed, reason DeadlineExceeded, kube's message "Job was active
  longer than specified deadline"), its placement is cleared at epoch + 1 (which fences any copy: status
  sync leaves it, the GC collects what is left), and every member object of the job in the cluster it held
  is deleted through the Dispatcher (the only writer of member objects), pods first, uid-guarded.
- **Pending deadline** (`spec.placement.giveUpAfterSeconds`, no kube equivalent): a job in phase Pending
  (fits nowhere) is judged from the time it entered the placement queue (`jobs.queued_at`): its creation,
  or its newest Requeued history entry (a requeued job gets the full wait again). Past it the job is Failed
  with reason Unplaceable and the why-not table (status.placement.whyNot, bounded) in the message. A job
  in phase Suspended is not pending.

Either way the reservation is forgotten (queue quota follows the phase: a Failed job is charged nothing).
Sources: batch/v1 JobSpec.activeDeadlineSeconds is "the duration in seconds relative to the startTime that
the job may be active before the system tries to terminate it; value must be positive integer" (int64), and
kube's Job controller fails such a Job with reason DeadlineExceeded, "Job was active longer than specified
deadline" (pkg/controller/job, pastActiveDeadline). kubernetes-sigs/kueue#8602 ("MultiKueue: a mechanism to
give up at some point") asks for the pending one: a workload that no worker cluster can ever admit should not
hold the manager's quota forever; it proposes a time after which the workload is deactivated.

This module never deletes objects of another job or hub, and never logs an object body or a credential.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.timestamps import parse_epoch
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.controllers.context import HubContext
from federator.controllers.dispatch import Dispatcher
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_PLACED,
    TERMINAL_PHASES,
    append_history,
    current_placement,
    history_entry,
    job_ref,
    queued_at,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.memberobjects import MemberObjects
from federator.controllers.status_sync import CONDITION_FAILED
from federator.obs import get_logger
from federator.store.protocol import StoreError

__all__ = ["DEADLINE_EXCEEDED", "DEADLINE_MESSAGE", "UNPLACEABLE", "JobDeadlines", "Verdict", "due", "started_at",
           "why_not_text"]

_log = get_logger("controllers.deadlines")

#: reason and message of a job past spec.activeDeadlineSeconds (a Kubernetes Job's)
DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
#: reason of a job pending past spec.placement.giveUpAfterSeconds
UNPLACEABLE = "Unplaceable"
#: the why-not table in an Unplaceable message: at most this many rows and characters
_MAX_ROWS = 32
_MAX_TEXT = 4000


def _seconds(spec: Mapping[str, Any], *path: str) -> int | None:
    value: Any = spec
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if type(value) is int and value > 0 else None


def started_at(job: Mapping[str, Any]) -> float | None:
    """status.startTime; for a job placed before the hub wrote it, its oldest Placed history entry."""
    status = Body(job).status
    start = parse_epoch(status.get("startTime"))
    if start is not None:
        return start
    for entry in status.get("history") or ():
        if isinstance(entry, Mapping) and entry.get("event") == PHASE_PLACED:
            return parse_epoch(entry.get("time"))
    return None


def why_not_text(job: Mapping[str, Any]) -> str:
    """The job's why-not table (status.placement.whyNot) as one bounded line: "cluster: filter/reason
    (message); ..."; its Schedulable condition's message when there is no table."""
    status = Body(job).status
    rows = [r for r in (status.get("placement") or {}).get("whyNot") or () if isinstance(r, Mapping)]
    if not rows:
        said = next((c.get("message") for c in status.get("conditions") or ()
                     if isinstance(c, Mapping) and c.get("type") == "Schedulable"), None)
        return str(said)[:_MAX_TEXT] if said else "no placement decision was recorded"
    parts = [f"{r.get('cluster')}: {r.get('filter')}/{r.get('reason')}"
             + (f" ({str(r.get('message'))[:256]})" if r.get("message") else "") for r in rows[:_MAX_ROWS]]
    text = "; ".join(parts)
    more = len(rows) - min(len(rows), _MAX_ROWS)
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + "..."
    return text + (f"; and {more} more clusters" if more else "")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A job past one of its deadlines: the reason (DEADLINE_EXCEEDED or UNPLACEABLE) and the message."""

    reason: str
    message: str


def due(job: Mapping[str, Any], *, now: float) -> Verdict | None:
    """The deadline `job` is past at `now`, if any: the active deadline first (from status.startTime, across
    requeues), then, for a job Pending with no cluster, the pending deadline (from `queued_at`: creation or
    the newest requeue). None for a finished or deleted job, or one within both."""
    body = Body(job)
    phase = body.phase or PHASE_PENDING
    if phase in TERMINAL_PHASES or body.deleting:
        return None
    spec = body.spec
    active = _seconds(spec, "activeDeadlineSeconds")
    if active is not None and (start := started_at(job)) is not None and now - start >= active:
        return Verdict(reason=DEADLINE_EXCEEDED, message=f"{DEADLINE_MESSAGE} (spec.activeDeadlineSeconds {active}, "
                                                         f"started {round(now - start)}s ago)")
    give_up = _seconds(spec, "placement", "giveUpAfterSeconds")
    if give_up is None or phase != PHASE_PENDING or current_placement(job)[0] is not None:
        return None
    since = queued_at(job)
    if since is None or now - since < give_up:
        return None
    return Verdict(reason=UNPLACEABLE, message=f"pending for {round(now - since)}s, past "
                                               f"spec.placement.giveUpAfterSeconds {give_up}: it fits in no cluster: "
                                               f"{why_not_text(job)}")


class JobDeadlines:
    """See the module docstring."""

    def __init__(self, hub: HubContext, *, objects: MemberObjects, jobs: JobCache, dispatcher: Dispatcher,
                 pulling_back: Mapping[str, object]) -> None:
        self.hub = hub
        self.objects = objects
        self.jobs = jobs
        self.dispatcher = dispatcher
        self.pulling = pulling_back
        #: jobs failed by each deadline since start (tests read it)
        self.failed: dict[str, int] = {DEADLINE_EXCEEDED: 0, UNPLACEABLE: 0}

    async def tick(self) -> None:
        now = time.time()
        for uid, job in list(self.jobs.jobs.items()):
            if uid in self.pulling:
                continue  # the stuck-gang pull-back finishes first; the job is judged once requeued
            verdict = due(job, now=now)
            if verdict is not None:
                await self._fail(job, reason=verdict.reason, message=verdict.message, now=now)

    async def _fail(self, job: Mapping[str, Any], *, reason: str, message: str, now: float) -> None:
        ref = job_ref(job)
        held: list[str] = []

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            body = Body(fresh)
            if (body.phase or PHASE_PENDING) in TERMINAL_PHASES or body.deleting:
                return None
            if reason == UNPLACEABLE and (body.phase not in (None, PHASE_PENDING)
                                          or current_placement(fresh)[0] is not None):
                return None  # placed meanwhile: the pending deadline no longer applies
            status = fresh["status"]
            cluster, epoch = current_placement(fresh)
            held[:] = [cluster] if cluster else []
            if cluster:  # epoch + 1 fences the copy, as failover's fail path does
                placement = dict(status.get("placement") or {})
                for key in ("cluster", "decisionResourceVersion", "mode"):
                    placement.pop(key, None)
                placement["epoch"] = epoch + 1
                status["placement"] = placement
                epoch += 1
            set_condition(status, type=CONDITION_FAILED, state="True", reason=reason, message=message, now=now)
            set_phase(status, PHASE_FAILED, reason=reason, message=message, now=now, job=ref.key, cluster=cluster)
            append_history(status, history_entry(PHASE_FAILED, cluster=cluster, epoch=epoch, message=message,
                                                 now=now))
            return fresh

        try:
            stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                             uid=ref.uid)
        except (ApiError, StoreError) as e:
            _log.warning("could not fail a job past its deadline; will retry", job=ref.key, reason=reason,
                         error=str(e))
            return
        if stored is None:
            return
        self.failed[reason] += 1
        reservations(self.hub).forget(ref.uid)
        self.hub.events.record(stored, controller="deadlines", reason=reason, action="Fail", warning=True,
                               message=message)
        _log.warning("job failed: deadline", job=ref.key, reason=reason, clusters=held)
        for cluster in held:
            await self._delete_copy(ref.uid, cluster=cluster, job=ref.key)

    async def _delete_copy(self, uid: str, *, cluster: str, job: str) -> None:
        """Delete the job's member objects in `cluster` now; what this misses (cluster out of contact, objects
        the index does not show yet) the GC collects: the job is no longer placed there."""
        index = self.objects.get(cluster)
        if index is None or not index.ready:
            return
        mine = index.objects_of(uid)
        if not mine:
            return
        outcome = await self.dispatcher.delete_objects(cluster, mine)
        if outcome is not None:
            _log.info("deleting the member objects of a job past its deadline", job=job, cluster=cluster,
                      requested=outcome.requested)
