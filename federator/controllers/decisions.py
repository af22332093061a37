"""What the placement loop writes into a TrainingJob's status, and how a job reads as queued.

`DecisionWriter` holds the loop's job status writes (each a fenced
read-mutate-CAS through a `JobStore`, checked again on the stored job):

- `write_decision`: the write-ahead of a decision: phase Placed, cluster,
  epoch = previous epoch + 1, decisionResourceVersion, the why-not table,
  the scores (`score_rows`: the chosen cluster's breakdown per score plugin,
  the runners-up's totals), a history entry, condition Schedulable=True and,
  for a queued job, QuotaReserved (reason WithinQuota or Borrowed); with a
  preemption, history Preempting and an Event Preempting, each naming the
  victims with the GPU-seconds each eviction loses. Only while the job
  still waits for a placement (never placed twice);
- `record_unplaced`: a gang that fits nowhere: phase Pending, the why-not
  table in status.placement.whyNot and condition Schedulable=False with
  reason `NoClusterFits` (or `TooLargeForAnyCluster` when no cluster could
  take it even empty, `NoClusters` when none is registered, `QuotaExceeded`
  or `QueueNotFound` when its queue refuses it). Written only when the
  reasons change (and at most every `unplaced_refresh_seconds` when only
  numbers change), with a history entry when the reason changes;
- `record_suspended`: a queued job with spec.suspend true goes to phase
  Suspended (condition Suspended=True); once suspend is false again it is
  queued like a Pending job (condition Suspended=False, reason Resumed);
- `unschedulable`: Schedulable=False for a job not even tried (InvalidSpec,
  NamespaceNotInQueue), once per (reason, message).

Must never: write a decision for a job that is placed, being deleted or
suspended, or do anything but these status writes and Events.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from federator.apis.trainingjob import MAX_SCORE_PARTS, MAX_SCORE_ROWS
from federator.apis.views import Body
from federator.apis.timestamps import format_time
from federator.controllers.jobs import (
    PHASE_PENDING,
    PHASE_PLACED,
    PHASE_REQUEUED,
    PHASE_SUSPENDED,
    append_history,
    current_placement,
    history_entry,
    job_ref,
    phase_of,
    record_placed_size,
    set_condition,
    set_phase,
)
from federator.controllers.placement_ports import EventSink, JobStore
from federator.obs import get_logger
from federator.placement import Decision, Rejection, ScoreBreakdown, Unplaced
from federator.placement.snapshot import ClusterSnapshot

__all__ = ["CONDITION_QUOTA_RESERVED", "CONDITION_SUSPENDED", "ELIGIBLE_PHASES", "REASON_BORROWED",
           "REASON_NAMESPACE_NOT_IN_QUEUE", "REASON_WITHIN_QUOTA", "SCHEDULABLE", "DecisionWriter", "queued",
           "resumed", "score_rows", "to_suspend", "why_not_rows"]

_log = get_logger("controllers.placement")

SCHEDULABLE = "Schedulable"
#: the phases of a job that waits for a placement
ELIGIBLE_PHASES = frozenset({PHASE_PENDING, PHASE_REQUEUED, PHASE_SUSPENDED})
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


def queued(job: Mapping[str, Any]) -> bool:
    """The job waits for a placement: Pending or Requeued (or no phase yet), not suspended, not being deleted."""
    body = Body(job)
    if body.deleting:
        return False
    if phase_of(job) not in ELIGIBLE_PHASES:
        return False
    return body.spec.get("suspend") is not True


def to_suspend(job: Mapping[str, Any]) -> bool:
    """A job waiting for a placement (not placed, not being deleted) whose spec says suspend, not yet shown
    as Suspended."""
    body = Body(job)
    if body.deleting or body.spec.get("suspend") is not True:
        return False
    return phase_of(job) in (PHASE_PENDING, PHASE_REQUEUED)


def resumed(status: dict[str, Any], *, now: float) -> None:
    """A Suspended job leaves that phase: its Suspended condition turns False (kube Job's JobResumed)."""
    if status.get("phase") == PHASE_SUSPENDED:
        set_condition(status, type=CONDITION_SUSPENDED, state="False", reason="Resumed",
                      message="spec.suspend is false: the job is queued for a placement again", now=now)



class DecisionWriter:
    """See the module docstring. `remember` is handed every job a write stored (the loop's job index)."""

    def __init__(self, store: JobStore, *, events: EventSink, remember: Callable[[dict[str, Any]], object],
                 unplaced_refresh_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.events = events
        self.remember = remember
        self.unplaced_refresh_seconds = unplaced_refresh_seconds
        self.clock = clock
        #: uid -> (reasons signature, when written) of the last unplaced status write
        self.unplaced_written: dict[str, tuple[Any, float]] = {}

    async def write_decision(self, job: Mapping[str, Any], decision: Decision) -> dict[str, Any] | None:
        ref = job_ref(job)
        now = self.clock()
        rows = why_not_rows(decision.why_not)
        scores = score_rows(decision)
        # each victim with what its eviction loses: "ns/a (loses 7,200 GPU-seconds since its last checkpoint)"
        preempted = ", ".join(f"{v.key} ({v.loss_text()})" if v.loss_text() else v.key
                              for v in decision.preemption.victims) if decision.preemption else ""
        shrunk = ", ".join(s.describe() for s in decision.preemption.shrinks) if decision.preemption else ""

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            body = Body(stored)
            if body.deleting or body.spec.get("suspend"):
                return None
            if phase_of(stored) not in ELIGIBLE_PHASES:
                return None  # someone placed or finished it meanwhile: never place twice
            status = stored["status"]
            resumed(status, now=now)
            _, previous_epoch = current_placement(stored)
            epoch = previous_epoch + 1
            placement = dict(status.get("placement") or {})
            placement.pop("mode", None)  # the previous placement's dispatch's; this one's dispatch records its own
            placement.update(cluster=decision.cluster, epoch=epoch,
                             decisionResourceVersion=decision.resource_version[:64] or "0", whyNot=rows,
                             scores=scores)
            status["placement"] = placement
            status.setdefault("startTime", format_time(now))  # the first placement: spec.activeDeadlineSeconds
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

        written, stored = await self.store.write_status(
            ref, mutate, failed="could not record the placement decision; the job stays in the queue",
            cluster=decision.cluster)
        if not written:
            return None
        if stored is None:
            _log.info("placement decision not recorded: the job changed meanwhile", job=ref.key,
                      cluster=decision.cluster)
        else:
            epoch = current_placement(stored)[1]
            if preempted:
                self.events.record(stored, controller="placement", reason="Preempting", action="Preempt",
                                   message=f"preempted {preempted} to make room in {decision.cluster}")
            score = f", score {decision.scores[0].total:.1f}" if decision.scores else ""
            model = f" on {decision.gpu_model}" if decision.gpu_model else ""
            self.events.record(stored, controller="placement", reason="Placed", action="Place",
                               message=f"placed in {decision.cluster}{model}{score} at epoch {epoch}"
                                       + (f" after preempting {preempted}" if preempted else ""))
        self.unplaced_written.pop(ref.uid, None)
        return stored

    # ------------------------------------------------------------ fits nowhere

    async def record_unplaced(
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
        stored_rows = (Body(job).status.get("placement") or {}).get("whyNot")
        already = self.unplaced_written.get(job_ref(job).uid)
        if already is not None and already[0] == signature and phase_of(job) != PHASE_SUSPENDED and (
                stored_rows == rows or now - already[1] < self.unplaced_refresh_seconds):
            return
        ref = job_ref(job)

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(stored) not in ELIGIBLE_PHASES or current_placement(stored)[0] is not None:
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
                resumed(st, now=now)
                set_phase(st, PHASE_PENDING, reason=reason, message=message, now=now, job=ref.key)
                changed = True
            if not changed:
                return None
            if already is None or already[0][0] != reason:
                append_history(st, history_entry("Unschedulable", cluster=None, epoch=None, message=message,
                                                 now=now))
            return stored

        written, stored = await self.store.write_status(ref, mutate, failed="could not record why the job fits nowhere")
        if not written:
            return
        self.unplaced_written[ref.uid] = (signature, now)
        if stored is not None:
            self.remember(stored)
            short = "; ".join(f"{r['cluster']}: {r['reason']}" for r in rows[:8])
            self.events.record(stored, controller="placement", reason=reason, action="Place", warning=True,
                               message=message if quota is not None
                               else f"{message.split(':', 1)[0]}{': ' + short if short else ''}")

    async def record_suspended(self, job: Mapping[str, Any], *, now: float) -> bool:
        """Phase Suspended, condition Suspended=True and a history entry for a suspended queued job (the
        mutate checks again on the stored job: a job placed or resumed meanwhile is left alone). False when
        the write failed (tried again next cycle)."""
        ref = job_ref(job)

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if not to_suspend(stored):
                return None
            st = stored["status"]
            set_phase(st, PHASE_SUSPENDED, reason="Suspended", message=_SUSPENDED_MESSAGE, now=now, job=ref.key)
            set_condition(st, type=CONDITION_SUSPENDED, state="True", reason="Suspended",
                          message=_SUSPENDED_MESSAGE, now=now)
            append_history(st, history_entry("Suspended", cluster=None, epoch=None, message=_SUSPENDED_MESSAGE,
                                             now=now))
            return stored

        written, stored = await self.store.write_status(
            ref, mutate, failed="could not record that the job is suspended; trying again next cycle")
        if not written:
            return False
        if stored is not None:
            self.remember(stored)
            self.events.record(stored, controller="placement", reason="Suspended", action="Suspend",
                               message=_SUSPENDED_MESSAGE)
        return True

    async def unschedulable(self, job: Mapping[str, Any], reason: str, message: str, *, now: float) -> None:
        """Condition Schedulable=False with `reason` for a job that is not even tried (its spec cannot be
        expressed: InvalidSpec; its queue does not take its namespace: NamespaceNotInQueue); written once
        per (reason, message), with an Event and, when the reason changes, a history entry."""
        ref = job_ref(job)
        signature = (reason, message)
        already = self.unplaced_written.get(ref.uid)
        if already is not None and already[0] == signature and phase_of(job) != PHASE_SUSPENDED:
            return

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(stored) not in ELIGIBLE_PHASES or current_placement(stored)[0] is not None:
                return None
            st = stored["status"]
            changed = set_condition(st, type=SCHEDULABLE, state="False", reason=reason, message=message,
                                    now=now)
            if st.get("phase") in (None, PHASE_SUSPENDED):
                resumed(st, now=now)
                set_phase(st, PHASE_PENDING, reason=reason, message=message, now=now, job=ref.key)
                changed = True
            if changed and (already is None or already[0][0] != reason):
                append_history(st, history_entry("Unschedulable", cluster=None, epoch=None, message=message,
                                                 now=now))
            return stored if changed else None

        written, stored = await self.store.write_status(ref, mutate,
                                                        failed="could not record why the job cannot be placed")
        if not written:
            return
        self.unplaced_written[ref.uid] = (signature, now)
        if stored is not None:
            self.remember(stored)
            self.events.record(stored, controller="placement", reason=reason, action="Place",
                               warning=True, message=message)

