"""Status sync: member PodGroup and pod state flows into TrainingJob.status.

It is the only reader of member pods and PodGroups. `status_sync(hub)` (a
cleanup_ctx-style factory, hub/app.py lists it after placement) is handed the
term's parts (`hub.parts`, controllers/pipeline.py):

- the member object index (`memberobjects.MemberObjects`): this hub's Pods
  and PodGroups in every member, indexed by job uid and epoch, fed by member
  sync's own watches (one member watch per cluster and kind); this loop wakes
  on every batch that touches a job's objects, and starts the lists that
  complete the index of a sync resumed from a checkpoint (`refresh`);
- the job cache (`jobcache.JobCache`), whose changes wake it too;
- the Dispatcher, through which it deletes and creates again a gang's failed
  workers (dispatch is the only writer of member objects);
- the member syncs (`MemberClusters`: fencing leases, schedulers, snapshots)
  and the pull-backs in progress (stuck.py), whose jobs it leaves alone.

- `StatusSync`: for every job in an active phase (Placed, Admitted, Running)
  it reads the gang's member objects of the job's current cluster and epoch
  through that cluster's adapter (`read_status` -> GangStatus) and writes
  phase (never backwards: Placed -> Admitted -> Running -> Succeeded |
  Failed), pod counts per role, the GangGuarantee and Admitted conditions
  (the Admitted condition's message explains a wait with the member's own
  words: an Unschedulable PodGroup condition, a pod's PodScheduled=False
  message), and a history entry per transition. Writes go through
  `jobs.update_job_status` (fenced, only when something changed) and are
  skipped when the job moved on (another cluster or epoch) meanwhile. Once
  the member's snapshot shows every pod of the gang bound, the gang's
  placement reservation is released (invariant 4: never double-booked,
  never counted twice); so it is when the gang finishes (Succeeded or
  Failed) before the snapshot ever showed it bound. The Dispatched condition is
  dispatch's (its only writer); this loop never writes it. Work is driven by events (a member batch touching a
  job's objects, a job change), batched per job: the changes within
  `status_batch_seconds` (HubSettings.status_sync, default 0.5) of a job's first
  one become one status write, as kube's Job controller batches pod
  updates; a full pass over the active jobs runs at most every
  `status_resync_seconds` (default 5).

Failed workers: for a role with restartPolicy OnFailure, a failed pod is
deleted and created again (same cluster, same name, next attempt index:
annotation federator.dev/attempt and env FEDERATOR_ATTEMPT) through the
Dispatcher's `restart_pods` (which deletes the failed pod first, and right before it creates reads the
stored job again: one requeued, moved to another cluster or epoch, or being deleted since this loop saw the
failure gets no pod again, only a log line saying why), and a missing pod of such a role after
admission is created again; failures the infrastructure caused
(DisruptionTarget=True: lost or deleted node) do not count toward
spec.backoffLimit, the others do (counted on the gang's pods, so per
placement); past the limit the job fails with reason BackoffLimitExceeded
and the pods' reasons (`restart_plan`). An elastic role with onWorkerLoss
shrink above its minimum instead loses the failed pod: status.replicas one
smaller, history Resized (reason WorkerLost), written before the pod is
deleted. Roles with restartPolicy Never fail the gang on a counted failure.

Retries by kind of failure: every job has its failed pods (and pods waiting on an image that cannot be
pulled) matched against its spec.failurePolicy's rules, if any, and the defaults
(`apis/failurepolicy.match_pod_failure`, per gang `policy_verdict`, both pure); this loop acts: FailJob
fails the job (reason PodFailurePolicy), Requeue sends the gang elsewhere with its cluster (or, with
requeue.exclude Node and by a GPU fault's default, only the failed pod's node) excluded, a
RestartPod or Ignore in a role that restarts no single pod places the whole gang again, and per-pod restarts
go as above with Ignore's pods not counted; a history entry FailurePolicy and an Event name the rule
(docs/failover.md). So a lost node's pod in a role with restartPolicy Never places the gang again (never
counted) rather than failing it.

Suspend (issue 31): a placed, admitted or running job whose spec.suspend turns true leaves its cluster as a
preempted gang does (`suspend_placed`): one fenced status write (only while it is still placed at the cluster
and epoch this loop saw and still suspended) moves it to phase Suspended with no cluster and its epoch kept
(`jobs.requeue`, not counted), history Suspended, conditions Suspended=True and QuotaReserved=False, and
status.placement.previous, so its next dispatch waits until this copy is gone; then an Event Suspended, its
reservation forgotten, and dispatch deletes the copy (`Dispatcher.delete_previous`: pods first with their
checkpoint grace; the GC takes what is missed). Its status.checkpoint stays: set spec.suspend false and the job
is queued, placed at a higher epoch and resumed from it like any requeued job.

Checkpoints (issue 29, docs/failover.md): the newest report on the gang's pods (annotation
federator.dev/checkpoint, `apis.checkpoint.latest_report`), and on a moved gang's previous copy while its pods
are still there (an evicted copy saves during its grace) or as they left with one (`ClusterObjects.departed`: it
reported and exited at once), becomes status.checkpoint when it is newer
(`with_checkpoint`: a higher step of the same copy, or a later copy), with one Checkpointed history entry per
copy; a malformed report is logged once and ignored.

It never creates or deletes member objects itself (the restarts are dispatch's), never decides placement, and
never logs an object body or a credential.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federator.apis.failurepolicy import (
    ExcludeScope,
    FailureAction,
    FailureMatch,
    failure_policy_of,
    first_failure,
    image_pull_error,
    match_pod_failure,
)
from federator.apis.checkpoint import CheckpointReport, latest_report, supersedes
from federator.apis.trainingjob import DEFAULT_BACKOFF_LIMIT, HISTORY_RESIZED, placed_replicas
from federator.apis.timestamps import format_time
from federator.apis.views import Body, as_mapping
from federator.apiserver.errors import ApiError
from federator.clusters.client import MemberClientError, member_write_reason
from federator.clusters.sync import HubLease
from federator.controllers.context import HubContext
from federator.controllers.decisions import CONDITION_QUOTA_RESERVED, CONDITION_SUSPENDED
from federator.controllers.dispatch import ANNOTATION_ATTEMPT, ANNOTATION_FAILURES, Dispatcher
from federator.controllers.jobcache import JobCache
from federator.controllers.jobs import (
    DispatchError,
    ACTIVE_PHASES,
    PHASE_ADMITTED,
    PHASE_FAILED,
    PHASE_PLACED,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASE_SUSPENDED,
    TERMINAL_PHASES,
    append_history,
    cluster_scheduler,
    current_placement,
    history_entry,
    phase_of,
    placed_at,
    requeue,
    job_ref,
    max_requeues,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.membercluster import MemberClusters
from federator.controllers.memberobjects import ClusterObjects, MemberObjects
from federator.delegation import GangPhase, GangStatus, SchedulerAdapter, adapter_for
from federator.delegation.adapter import LABEL_INDEX, LABEL_ROLE, pod_name
from federator.delegation.membercopy import terminal_phase
from federator.apis.jobkinds import SOURCE_KIND_ANNOTATION, JobKind, job_kind_by_source
from federator.apis.jobkinds.status import mirrored_status
from federator.obs import get_logger
from federator.store.protocol import StoreError
from federator.runtime.tasks import spawn, stop_task
from federator.runtime.waits import LoopSlice, wait_event

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_FAILURES",
    "PolicyVerdict",
    "StatusSync",
    "policy_verdict",
    "expected_roles",
    "gang_status",
    "lifecycle_tick_seconds",
    "release_if_shown",
    "status_sync",
    "synced_status",
]

_log = get_logger("controllers.status_sync")

CONDITION_ADMITTED = "Admitted"
CONDITION_GANG_GUARANTEE = "GangGuarantee"
CONDITION_COMPLETE = "Complete"
CONDITION_FAILED = "Failed"

_PHASE_RANK = {PHASE_PLACED: 0, PHASE_ADMITTED: 1, PHASE_RUNNING: 2, PHASE_SUCCEEDED: 3, PHASE_FAILED: 3}
_GANG_PHASE = {GangPhase.PLACED: PHASE_PLACED, GangPhase.ADMITTED: PHASE_ADMITTED, GangPhase.RUNNING: PHASE_RUNNING,
               GangPhase.SUCCEEDED: PHASE_SUCCEEDED, GangPhase.FAILED: PHASE_FAILED}
# What a gang missing objects after admission means: someone deleted them in the member.
_MISSING_REASONS = frozenset({"PodsMissing", "PodGroupMissing", "NotCreated"})
#: How long a gang seen gone waits for the fencing lease to say whether the member's agent killed it.
FENCE_VERDICT_PATIENCE_SECONDS = 30.0


def lifecycle_tick_seconds(hub: HubContext) -> float:
    """How often the lifecycle loops re-check everything (HubSettings.status_sync, default 1 s)."""
    return hub.settings.status_sync.lifecycle_tick_seconds


# ---------------------------------------------------------------- the status computation (pure)


def expected_roles(job: Mapping[str, Any]) -> dict[str, int]:
    """role -> pods the member should hold: the size the gang was placed at (`placed_replicas`: status.replicas,
    else the spec's replicas), as the adapters render it."""
    return placed_replicas(job)


def gang_status(job: Mapping[str, Any], objects: ClusterObjects, adapter: SchedulerAdapter, *,
                epoch: int, expected: Mapping[str, int] | None = None) -> GangStatus:
    podgroup, pods = objects.gang(Body(job).uid, epoch)
    return adapter.read_status(podgroup, pods, expected=expected if expected is not None else expected_roles(job))


_OPERATOR_CONDITION_LIMITS = (("type", 316), ("status", 16), ("reason", 1024), ("message", 32768),
                              ("lastTransitionTime", 64), ("lastProbeTime", 64), ("lastUpdateTime", 64))
_CAMEL = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def operator_status(copy: Mapping[str, Any], *, kind: JobKind, cluster: str, epoch: int,
                    problems: dict[str, str] | None = None) -> dict[str, Any]:
    """The twin's status.operator from its member copy as last seen (operator mode): the copy's conditions as its
    operator wrote them (string fields only, each within its limit; at most 32), and its status fields
    `kind.mirrored_status_fields` that fit the kind's schema and size limits (`mirrored_status`: status; the
    names of those left out as malformed or oversized: statusDropped, and why in `problems`)."""
    conditions: list[dict[str, str]] = []
    for condition in Body(copy).status.get("conditions") or ():
        if not isinstance(condition, Mapping) or not isinstance(condition.get("type"), str) \
                or not isinstance(condition.get("status"), str):
            continue
        conditions.append({key: condition[key][:limit] for key, limit in _OPERATOR_CONDITION_LIMITS
                           if isinstance(condition.get(key), str)})
        if len(conditions) == 32:
            break
    own, dropped = mirrored_status(kind.schema, kind.mirrored_status_fields, Body(copy).status)
    out: dict[str, Any] = {"cluster": cluster, "epoch": epoch, "kind": kind.source_key, "conditions": conditions,
                           "status": own}
    if dropped:
        out["statusDropped"] = sorted(dropped)
    if problems is not None:
        problems.update(dropped)
    return out


def operated_gang_status(job: Mapping[str, Any], gs: GangStatus, copy: Mapping[str, Any] | None, *,
                         kind: JobKind) -> GangStatus:
    """What an operator-mode gang's state is (issue 28): the member copy's terminal condition ends it (Succeeded or
    Failed, with the operator's reason and message); short of that, single pods that ended or went missing are
    the operator's business (it restarts or re-creates them), so they neither end nor fail the gang."""
    if copy is None:
        return gs
    what = f"{kind.kind} {Body(copy).namespace}/{Body(copy).name}"
    verdict = terminal_phase(kind, copy)
    if verdict is not None:
        phase, condition = verdict
        reason = condition.get("reason")
        message = condition.get("message")
        return dataclasses.replace(
            gs, phase=GangPhase.SUCCEEDED if phase == "Succeeded" else GangPhase.FAILED,
            reason=reason if isinstance(reason, str) and _CAMEL.match(reason) else phase,
            message=f"{what}: {message if isinstance(message, str) and message else condition.get('type')}")
    if gs.phase in (GangPhase.SUCCEEDED, GangPhase.FAILED):
        running = any(counts.running for counts in gs.counts.values())
        return dataclasses.replace(gs, phase=GangPhase.RUNNING if running else GangPhase.ADMITTED,
                                   reason="OperatorRunning",
                                   message=f"{what}: {gs.message}; the operator decides the job's end")
    phase = Body(job).phase
    if gs.phase is GangPhase.PLACED and gs.reason in _MISSING_REASONS \
            and _PHASE_RANK.get(phase if isinstance(phase, str) else "", 0) >= _PHASE_RANK[PHASE_ADMITTED]:
        return dataclasses.replace(gs, phase=GangPhase.ADMITTED, reason="OperatorRecreatingPods",
                                   message=f"{what}: {gs.message}")
    return gs


def with_operator(job: Mapping[str, Any], new: dict[str, Any] | None,
                  operator: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`new` (synced_status's answer: None when nothing changes) with status.operator set to `operator`."""
    if operator is None:
        return new
    base = new if new is not None else dict(Body(job).status)
    if base.get("operator") == operator:
        return new
    base = dict(base)
    base["operator"] = dict(operator)
    return base


HISTORY_CHECKPOINTED = "Checkpointed"


def with_checkpoint(job: Mapping[str, Any], new: dict[str, Any] | None, report: CheckpointReport | None, *,
                    cluster: str, epoch: int, now: float) -> dict[str, Any] | None:
    """`new` (None: nothing changes) with status.checkpoint set to `report` when it is newer than the recorded
    one: a higher step of the same copy (cluster and epoch), or any report of a later copy (never one of an
    earlier copy: an evicted copy's last report, read during its grace, loses to the new copy's). History
    stays bounded: one Checkpointed entry per copy, replaced by each newer report while it is the latest."""
    if report is None:
        return new
    base = new if new is not None else dict(Body(job).status)
    if not supersedes(report, base.get("checkpoint"), cluster=cluster, epoch=epoch):
        return new
    base = dict(base)
    base["checkpoint"] = {"time": format_time(now), "step": report.step, "location": report.location,
                          "cluster": cluster, "epoch": epoch}
    entry = history_entry(HISTORY_CHECKPOINTED, cluster=cluster, epoch=epoch, now=now,
                          message=f"step {report.step} at {report.location}")
    history = list(base.get("history") or ())
    last = history[-1] if history else None
    if isinstance(last, Mapping) and last.get("event") == HISTORY_CHECKPOINTED and last.get("epoch") == epoch \
            and last.get("cluster") == cluster:
        base["history"] = [*history[:-1], entry]
    else:
        append_history(base, entry)
    return base


def with_checkpoints(job: Mapping[str, Any], new: dict[str, Any] | None, report: CheckpointReport | None,
                     previous: tuple[str, int, CheckpointReport] | None, *, cluster: str, epoch: int,
                     now: float) -> dict[str, Any] | None:
    """`with_checkpoint` for the previous copy's report (cluster, epoch, report: a moved gang's old copy saving
    during its grace), then for the current copy's."""
    if previous is not None:
        new = with_checkpoint(job, new, previous[2], cluster=previous[0], epoch=previous[1], now=now)
    return with_checkpoint(job, new, report, cluster=cluster, epoch=epoch, now=now)


def fence_verdict(lease: HubLease | None, job: Mapping[str, Any], *, epoch: int, missing_since: float,
                  now: float) -> bool | None:
    """Were the objects of the job's copy at `epoch`, seen gone since `missing_since`, killed by the member's
    fence agent (`lease`: the hub's fencing Lease there; None: leases off)? None: not known yet (the next
    acknowledged renewal says); after FENCE_VERDICT_PATIENCE_SECONDS without one, no."""
    if lease is None:
        return False
    placed = placed_at(job, epoch=epoch)
    verdict = lease.fence_verdict(placed=placed if placed is not None else 0.0, missing_since=missing_since)
    if verdict is None and now - missing_since > FENCE_VERDICT_PATIENCE_SECONDS:
        return False  # no renewal got through for that long: judge on what the member shows
    return verdict


async def requeue_fenced(hub: HubContext, job: Mapping[str, Any], *, cluster: str, epoch: int, now: float,
                         controller: str) -> dict[str, Any] | None:
    """The agent killed the gang (placed or running) while the hub was cut off, and the hub did not move it:
    back to the queue, not Failed and its cluster not excluded: neither the job nor the cluster did wrong.
    The stored job, or None when it had moved on."""
    ref = job_ref(job)
    message = (f"the fence agent in cluster {cluster} deleted the gang while this hub was out of contact "
               f"(its lease there expired); the gang is placed again at epoch {epoch + 1}")

    def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
        if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) or Body(fresh).deleting:
            return None
        status = fresh["status"]
        append_history(status, history_entry("Fenced", cluster=cluster, epoch=epoch, message=message, now=now))
        requeue(status, reason="Fenced", message=message, now=now, job=ref.key, count=False)
        return fresh

    stored = await update_job_status(hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=ref.uid)
    if stored is not None:
        hub.events.record(stored, controller=controller, reason="Requeued", action="Requeue", warning=True,
                          message=message)
        reservations(hub).forget(ref.uid)
        hub.metrics.job_requeues.labels(reason="Fenced").inc()
        _log.warning("gang killed by the member's fence agent; requeued", job=ref.key, cluster=cluster,
                     epoch=epoch)
    return stored


def objects_missing(job: Mapping[str, Any], gs: GangStatus) -> bool:
    """The gang's objects are gone from its member after it was admitted (and it has not finished)."""
    phase = Body(job).phase
    current = phase if phase in _PHASE_RANK else PHASE_PLACED
    return gs.phase is GangPhase.PLACED and _PHASE_RANK[current] >= _PHASE_RANK[PHASE_ADMITTED] \
        and gs.reason in _MISSING_REASONS and current not in TERMINAL_PHASES


def synced_status(job: Mapping[str, Any], gs: GangStatus, *, adapter: SchedulerAdapter, cluster: str, epoch: int,
                  now: float, quiet: bool = False) -> dict[str, Any] | None:
    """The job's status after folding in what the member shows (`gs`), or None when nothing changes.

    The phase only moves forward (a member showing less than before, e.g. a
    watch that re-listed, never undoes an admission), except that a gang
    whose objects vanish from the member after admission has failed: its
    pods cannot come back (restartPolicy Never). `quiet` computes without
    logging the transition (the dry run before the write that logs it)."""
    ref = job_ref(job)
    old = Body(job).status
    # A shallow copy is enough: every helper below replaces a nested value (set_condition copies the
    # conditions list, append_history the history, podCounts is rebuilt) and never edits one in place, so
    # `old` (often the job cache's shared object) stays untouched. A deepcopy here was ~7% of the hub's CPU.
    status = dict(old)
    raw_phase = status.get("phase")
    current: str = raw_phase if isinstance(raw_phase, str) and raw_phase in _PHASE_RANK else PHASE_PLACED
    rank = _PHASE_RANK.get(current, 0)
    target = _GANG_PHASE[gs.phase]
    reason, message = gs.reason, gs.message
    if gs.phase is GangPhase.PLACED and rank >= _PHASE_RANK[PHASE_ADMITTED] and gs.reason in _MISSING_REASONS \
            and current not in TERMINAL_PHASES:
        target, reason = PHASE_FAILED, "MemberObjectsDeleted"
        message = f"the gang's objects were deleted in cluster {cluster} after it was admitted: {gs.message}"
    new_phase: str = target if _PHASE_RANK[target] > rank or (target in TERMINAL_PHASES and current not in
                                                            TERMINAL_PHASES) else current
    if current in TERMINAL_PHASES:
        new_phase = current
    for condition in adapter.job_conditions():
        set_condition(status, type=condition.type, state=condition.status, reason=condition.reason,
                      message=condition.message, now=now)
    admitted = _PHASE_RANK.get(new_phase, 0) >= _PHASE_RANK[PHASE_ADMITTED]
    if admitted:
        if not _condition_true(old, CONDITION_ADMITTED):
            set_condition(status, type=CONDITION_ADMITTED, state="True", reason="Scheduled",
                          message=f"cluster {cluster} scheduled the gang (epoch {epoch})", now=now)
    else:
        set_condition(status, type=CONDITION_ADMITTED, state="False", reason=reason,
                      message=f"cluster {cluster}: {message}", now=now)
    if new_phase == PHASE_SUCCEEDED:
        set_condition(status, type=CONDITION_COMPLETE, state="True", reason=reason, message=message, now=now)
    elif new_phase == PHASE_FAILED:
        set_condition(status, type=CONDITION_FAILED, state="True", reason=reason,
                      message=f"cluster {cluster}: {message}", now=now)
    if current not in TERMINAL_PHASES or new_phase != current:
        status["podCounts"] = {role: counts.as_dict() for role, counts in gs.counts.items()}
    if new_phase != current:
        # A batch (or a fast gang) can jump phases, e.g. Placed -> Running: the history still shows each
        # step the gang went through (it was admitted before it ran), in one write.
        for passed in _passed_phases(current, new_phase):
            if not quiet:
                set_phase(status, passed, reason="Scheduled" if passed == PHASE_ADMITTED else reason,
                          message=message, now=now, job=ref.key, cluster=cluster)
            append_history(status, history_entry(
                passed, cluster=cluster, epoch=epoch, now=now,
                message=f"cluster {cluster} scheduled the gang (epoch {epoch})" if passed == PHASE_ADMITTED
                else message))
        if quiet:
            status["phase"] = new_phase
        else:
            set_phase(status, new_phase, reason=reason, message=message, now=now, job=ref.key, cluster=cluster)
        append_history(status, history_entry(new_phase, cluster=cluster, epoch=epoch, message=message, now=now))
    return None if status == old else status


_FORWARD = (PHASE_PLACED, PHASE_ADMITTED, PHASE_RUNNING, PHASE_SUCCEEDED)


def _passed_phases(current: str, new: str) -> tuple[str, ...]:
    """The phases strictly between `current` and `new` on the way Placed -> Admitted -> Running ->
    Succeeded (none for Failed: a failed gang may never have run)."""
    if current not in _FORWARD or new not in _FORWARD:
        return ()
    return _FORWARD[_FORWARD.index(current) + 1:_FORWARD.index(new)]


def _condition_true(status: Mapping[str, Any], type_: str) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True"
               for c in status.get("conditions") or ())


def release_if_shown(hub: HubContext, job_uid: str) -> bool:
    """Forget the gang's placed reservation once its cluster's snapshot shows every pod bound (then the
    nodes' allocation counts them; keeping it would count them twice). True if released."""
    return reservations(hub).release_when_bound(job_uid, hub.parts.members.snapshots)


# ---------------------------------------------------------------- retries by kind of failure (spec.failurePolicy)

HISTORY_FAILURE_POLICY = "FailurePolicy"
#: the job's condition Failed reason when a FailJob rule (or default) matched: kube's JobReasonPodFailurePolicy
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"


class GangOutcome(enum.Enum):
    """What spec.failurePolicy makes of the gang's failed pods, worst first."""

    #: the job fails (a FailJob rule or default)
    FAIL = "fail"
    #: the gang moves whole elsewhere, its cluster excluded (Requeue)
    REQUEUE = "requeue"
    #: the gang is placed again whole, its cluster not excluded (RestartPod or Ignore of a pod whose role
    #: restarts no single pod: restartPolicy Never without onWorkerLoss shrink)
    RESTART_GANG = "restart-gang"
    #: per pod, as restart_plan does (its `uncounted` pods not counted)
    PER_POD = "per-pod"


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    """`policy_verdict`'s answer for one gang."""

    outcome: GangOutcome
    #: the match that decided (FAIL, REQUEUE, RESTART_GANG), with the pod and the member's words
    match: FailureMatch | None = None
    pod: str = ""
    why: str = ""
    #: the node the decisive pod ran on ("" when it was never bound): what a Requeue excluding the node excludes
    node: str = ""
    #: RESTART_GANG and REQUEUE: counted in status.requeues (at most spec.failover.maxRequeues); Ignore is not
    counted: bool = True
    #: PER_POD: the failed pods whose failure is not counted toward spec.backoffLimit (Ignore)
    uncounted: frozenset[str] = frozenset()
    #: PER_POD: pod name -> the rule that matched it (FailureMatch.describe)
    notes: Mapping[str, str] = field(default_factory=dict)

    def message(self) -> str:
        """One line for the history, the Event and the Failed condition."""
        assert self.match is not None
        return f"pod {self.pod} failed: {self.why}; matched {self.match.describe()}"


def policy_verdict(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> PolicyVerdict | None:
    """What the job's spec.failurePolicy, and the defaults (which apply to every job, with or without a
    policy), make of its gang's failed pods (phase Failed, or waiting on an image that cannot be pulled), or
    None when no pod failed. FailJob wins over Requeue, Requeue over a whole-gang restart, that over per-pod
    restarts. RestartPod and Ignore restart only the failed pod where its role tolerates it (restartPolicy
    OnFailure, or onWorkerLoss shrink); in any other role they restart the whole gang (placed again, the
    cluster not excluded). Pure."""
    policy = failure_policy_of(Body(job).spec) or {}
    roles = {str(r.get("name")): r for r in Body(job).spec.get("roles") or () if isinstance(r, Mapping)}
    tolerant = {name for name, r in roles.items()
                if r.get("restartPolicy") == "OnFailure" or r.get("onWorkerLoss") == "shrink"}
    seen: list[tuple[str, str, FailureMatch, str]] = []
    nodes: dict[str, str] = {}
    for pod in sorted((Body(p) for p in pods), key=lambda p: p.name):
        if pod.deleting:
            continue
        pulling = image_pull_error(pod.status) if pod.phase in ("Pending", "") else None
        if pod.phase != "Failed" and pulling is None:
            continue
        role = str(pod.labels.get(LABEL_ROLE) or "")
        node = pod.spec.get("nodeName")
        nodes[pod.name] = node if isinstance(node, str) else ""
        seen.append((pod.name, role, match_pod_failure(policy, pod.status), pulling or _pod_failure(pod.status)[0]))
    if not seen:
        return None
    decisive = first_failure([m for _, _, m, _ in seen])
    if decisive is not None:
        name, _, match, why = next(s for s in seen if s[2] is decisive)
        outcome = GangOutcome.FAIL if match.action is FailureAction.FAIL_JOB else GangOutcome.REQUEUE
        return PolicyVerdict(outcome=outcome, match=match, pod=name, why=why, node=nodes[name])
    for name, role, match, why in seen:
        if role not in tolerant and match.action in (FailureAction.RESTART_POD, FailureAction.IGNORE):
            return PolicyVerdict(outcome=GangOutcome.RESTART_GANG, match=match, pod=name, why=why,
                                 counted=match.action is FailureAction.RESTART_POD)
    return PolicyVerdict(outcome=GangOutcome.PER_POD,
                         uncounted=frozenset(n for n, _, m, _ in seen if m.action is FailureAction.IGNORE),
                         notes={n: m.describe() for n, _, m, _ in seen})


# ---------------------------------------------------------------- failed workers (restartPolicy OnFailure)

HISTORY_POD_RESTARTED = "PodRestarted"


@dataclass(frozen=True, slots=True)
class RestartPlan:
    """What to do about the failed and missing pods of a gang's OnFailure and shrink roles (`restart_plan`)."""

    #: pod name -> the annotations of the pod created again (attempt, counted failures)
    recreate: Mapping[str, Mapping[str, str]]
    #: pod name -> uid of the failed pod to delete first
    delete: Mapping[str, str]
    #: one line per failed pod: name, reason, counted or not
    reasons: tuple[str, ...]
    #: failures counted toward backoffLimit, this one included
    counted: int
    #: the job fails instead: more counted failures than spec.backoffLimit
    exceeded: bool
    #: pods per role the plan started from, and after the shrinks (equal when nothing shrinks)
    sizes_before: Mapping[str, int] = field(default_factory=dict)
    sizes_after: Mapping[str, int] = field(default_factory=dict)


def _int_annotation(annotations: Mapping[str, Any], key: str) -> int:
    raw = annotations.get(key)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) < 10 else 0


def _backoff_limit(spec: Mapping[str, Any]) -> int:
    """spec.backoffLimit (DEFAULT_BACKOFF_LIMIT when absent or not a count)."""
    raw = spec.get("backoffLimit")
    return raw if type(raw) is int and raw >= 0 else DEFAULT_BACKOFF_LIMIT


def _pod_failure(status: Mapping[str, Any]) -> tuple[str, bool]:
    """(why the pod failed, in kube's words; whether the infrastructure failed rather than the pod): a
    DisruptionTarget=True condition (taint eviction, PodGC, preemption) is the infrastructure, as a
    Kubernetes Job's podFailurePolicy reads it; anything else (a container's Error) is the workload's."""
    infra = any(isinstance(c, Mapping) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    parts = [str(status[k]) for k in ("reason", "message") if isinstance(status.get(k), str) and status[k]]
    for cs in status.get("containerStatuses") or ():
        container = as_mapping(cs)
        term = as_mapping(as_mapping(container.get("state")).get("terminated"))
        if term:
            parts.append(f"container {container.get('name')} terminated: {term.get('reason') or 'Error'} "
                         f"(exit code {term.get('exitCode')}){': ' + str(term['message']) if term.get('message') else ''}")
    return "; ".join(parts)[:512] or "Failed", infra


def restart_plan(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, admitted: bool,
                 expected: Mapping[str, int] | None = None,
                 verdict: PolicyVerdict | None = None) -> RestartPlan | None:
    """The restarts (and shrinks) for the gang's failed pods, or None when there is nothing to do: roles
    with restartPolicy Never (and no onWorkerLoss shrink) keep failing the gang, as before.

    A failed pod of an elastic role with onWorkerLoss shrink, while the role is above its minimum, is
    deleted and the role shrinks by one (not counted); the role keeps its indices 0..n-1, so the pods at or
    above the new size go and the lost index below it is created again. Otherwise a failed pod of a role with restartPolicy
    OnFailure is deleted and created again under the same name with the next attempt index; once the gang
    was admitted, a role with restartPolicy OnFailure short of its size (`expected`, else
    `placed_replicas`) gets its lowest free pod names created again (the member deleted a pod, e.g. its
    node was deleted). Failures the infrastructure caused (DisruptionTarget) do not count toward
    spec.backoffLimit; the others do. The count lives on the gang's pods (annotation
    federator.dev/counted-failures, carried over to the pod created again), so the window is the gang's
    current placement: a gang placed again (another epoch) starts from 0, as its pods do. With a `verdict`
    (from `policy_verdict`: spec.failurePolicy's rules and the defaults), the pods its rules or defaults Ignore
    are the ones not counted, and each pod's line names the rule that matched."""
    body = Body(job)
    spec = body.spec
    roles = {str(r.get("name")): r for r in spec.get("roles") or () if isinstance(r, Mapping)}
    restartable = {name for name, r in roles.items() if r.get("restartPolicy") == "OnFailure"}
    shrinkable = {name for name, r in roles.items() if r.get("onWorkerLoss") == "shrink"}
    if not restartable and not shrinkable:
        return None
    limit = _backoff_limit(spec)
    job_name, job_uid = body.name, body.uid
    before = dict(expected) if expected is not None else placed_replicas(job)
    sizes = dict(before)
    counted = 0
    taken: set[str] = set()
    alive: dict[str, set[str]] = {}
    failed: list[tuple[str, str, str, Body]] = []
    for pod in sorted((Body(p) for p in pods), key=lambda p: p.name):
        name = pod.name
        taken.add(name)
        counted += _int_annotation(pod.annotations, ANNOTATION_FAILURES)
        role = str(pod.labels.get(LABEL_ROLE) or "")
        if pod.deleting:
            continue
        alive.setdefault(role, set()).add(name)
        if role in restartable | shrinkable and pod.phase == "Failed":
            failed.append((name, pod.uid, role, pod))
    recreate: dict[str, Mapping[str, str]] = {}
    delete: dict[str, str] = {}
    reasons: list[str] = []
    #: shrunk pod name -> the attempt its name gets if a lower index is created again under it
    dropped: dict[str, int] = {}
    for name, uid, role, pod in failed:
        annotations = pod.annotations
        why, infra = _pod_failure(pod.status)
        if verdict is not None:
            infra = name in verdict.uncounted
            if name in verdict.notes:
                why = f"{why} [{verdict.notes[name]}]"
        attempt = _int_annotation(annotations, ANNOTATION_ATTEMPT)
        labels = pod.labels
        spec_role = roles[role]
        low = spec_role.get("minReplicas") or spec_role.get("replicas") or 0
        where = f"pod {name} ({role} {labels.get(LABEL_INDEX)}, attempt {attempt}): {why}"
        if role in shrinkable and isinstance(low, int) and sizes.get(role, 0) > low:
            sizes[role] -= 1
            delete[name] = uid
            dropped[name] = attempt + 1
            alive[role].discard(name)
            reasons.append(f"{where} [worker lost: {role} shrunk to {sizes[role]}, not counted]")
            continue
        if role not in restartable:
            return None  # at its minimum with restartPolicy Never: the gang fails, as before
        own = _int_annotation(annotations, ANNOTATION_FAILURES) + (0 if infra else 1)
        counted += 0 if infra else 1
        reasons.append(f"{where} [{('not counted' if verdict is not None else 'infrastructure, not counted') if infra else 'counted'}]")
        delete[name] = uid
        recreate[name] = {ANNOTATION_ATTEMPT: str(attempt + 1), ANNOTATION_FAILURES: str(own)}
    for role in sorted(r for r in shrinkable if sizes.get(r, 0) < before.get(r, 0)):
        # Each role keeps its indices 0..n-1 (the placement controller's shrink removes the highest, and its
        # elastic pass converges to that): a lost worker below the top leaves its index to the top pod.
        for pod in map(Body, pods):
            name, labels = pod.name, pod.labels
            index = _int_annotation(labels, LABEL_INDEX) if str(labels.get(LABEL_INDEX) or "").isdigit() else -1
            if labels.get(LABEL_ROLE) == role and name in alive.get(role, ()) and index >= sizes[role]:
                delete[name] = pod.uid
                alive[role].discard(name)
                reasons.append(f"pod {name} ({role} {index}) removed: {role} keeps indices 0..{sizes[role] - 1}")
        for index in range(sizes[role]):
            name = pod_name(job_name=job_name, job_uid=job_uid, role=role, index=index)
            if name not in alive.get(role, ()) and name not in recreate:
                recreate[name] = {ANNOTATION_ATTEMPT: str(dropped.get(name, 1))}
                alive.setdefault(role, set()).add(name)
    if admitted:
        for role in sorted(restartable):
            short = sizes.get(role, 0) - len(alive.get(role, ()))
            index = 0
            while short > 0 and index < 100_000:
                name = pod_name(job_name=job_name, job_uid=job_uid, role=role, index=index)
                if name not in taken and name not in recreate:
                    recreate[name] = {ANNOTATION_ATTEMPT: "1"}
                    short -= 1
                index += 1
    if not recreate and not delete:
        return None
    return RestartPlan(recreate=recreate, delete=delete, reasons=tuple(reasons), counted=counted,
                       exceeded=counted > limit, sizes_before=before, sizes_after=sizes)


# ---------------------------------------------------------------- the controller


@dataclass
class _Work:
    """Jobs to reconcile, each with the time it is due (the end of its batch window)."""

    #: seconds from a job's first change to its reconcile; later changes in the window join the batch
    batch_seconds: float = 0.0
    due: dict[str, float] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def mark(self, uids: Iterable[str], *, now: float | None = None) -> None:
        at = (time.monotonic() if now is None else now) + self.batch_seconds
        for uid in uids:
            self.due.setdefault(uid, at)
        self.wake.set()

    def retry(self, uid: str) -> None:
        self.due[uid] = time.monotonic() + max(self.batch_seconds, 0.1)

    def take_due(self, now: float) -> set[str]:
        """Remove and return the jobs whose batch window has ended."""
        ready = {uid for uid, at in self.due.items() if at <= now}
        for uid in ready:
            del self.due[uid]
        return ready

    def next_due(self) -> float | None:
        return min(self.due.values()) if self.due else None


class StatusSync:
    """See the module docstring. Run it with `status_sync(hub)`."""

    def __init__(self, hub: HubContext, *, objects: MemberObjects, jobs: JobCache, dispatcher: Dispatcher,
                 members: MemberClusters, pulling_back: Mapping[str, Any]) -> None:
        self.hub = hub
        self.objects = objects
        self.jobs = jobs
        self.dispatcher = dispatcher
        self.members = members
        self.pulling_back = pulling_back
        self.tick = lifecycle_tick_seconds(hub)
        #: a full pass over every active job at most this often (events drive everything else)
        self.resync = max(self.tick, hub.settings.status_sync.resync_seconds)
        #: a job's member changes within this window are folded into one status write (kube's Job controller
        #: batches pod updates the same way); job changes and the periodic pass use it too
        self.work = _Work(batch_seconds=hub.settings.status_sync.batch_seconds)
        #: gangs the member shows fully bound whose reservation waits for the cluster's snapshot
        self.awaiting_release: set[str] = set()
        #: uid -> what of the job decides a reconcile (phase, cluster, epoch) as last seen
        self._job_views: dict[str, tuple[Any, ...]] = {}
        #: uid -> (cluster, epoch, pods per role) of a shrink this loop wrote that the job cache may not show yet
        self._shrunk: dict[str, tuple[str, int, dict[str, int]]] = {}
        #: uid -> when (wall clock) its gang's objects were first seen gone after admission
        self._missing_since: dict[str, float] = {}
        #: job uid -> (cluster, epoch, the member copy's status fields left out) last logged
        self._dropped_said: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        #: (job uid, cluster) -> the malformed checkpoint reports (pod, why) last logged, so each is logged once
        self._bad_reports_said: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
        objects.subscribe(self._objects_changed)
        jobs.subscribe(self._job_changed)

    def _objects_changed(self, _cluster: str, uids: set[str]) -> None:
        self.work.mark(uids)

    def close(self) -> None:
        """Stop hearing from the job cache and the member object index."""
        self.jobs.unsubscribe(self._job_changed)
        self.objects.unsubscribe(self._objects_changed)

    def _job_changed(self, uid: str, job: dict[str, Any] | None) -> None:
        """A job change needs a reconcile only when its phase or placement moved; a write that changed
        only other status fields (this loop's own counts, dispatch's Dispatched condition) does not (the
        member's changes and the periodic pass still reach it)."""
        if job is None:
            self._job_views.pop(uid, None)
            self._shrunk.pop(uid, None)
            return
        body = Body(job)
        view = (body.phase, *current_placement(job), body.spec.get("suspend") is True)
        if self._job_views.get(uid) != view:
            self._job_views[uid] = view
            self.work.mark((uid,))

    async def run(self) -> None:
        metrics = self.hub.metrics.loop_phase_seconds
        last_full = float("-inf")
        last_tick = time.monotonic()
        while True:
            next_due = self.work.next_due()
            wait = self.tick if next_due is None else max(0.0, min(self.tick, next_due - time.monotonic()))
            await wait_event(self.work.wake, wait)
            self.work.wake.clear()
            now = time.monotonic()
            ticked = now - last_tick >= self.tick
            next_due = self.work.next_due()
            if not ticked and (next_due is None or next_due > now):
                continue  # woken by a change whose batch window is still open
            if ticked:
                last_tick = now
                started = time.perf_counter()
                await self.objects.refresh()
                metrics.labels(loop="status_sync", phase="refresh").observe(time.perf_counter() - started)
            started = time.perf_counter()
            dirty = self.work.take_due(now)
            if ticked:
                dirty |= self.awaiting_release
            if now - last_full >= self.resync:
                # Now and then every active job, e.g. one whose cluster's index became ready meanwhile.
                last_full = now
                dirty.update(uid for uid, job in list(self.jobs.jobs.items())
                             if Body(job).phase in ACTIVE_PHASES)
            share = LoopSlice()
            for uid in dirty:
                await share.maybe_yield()
                try:
                    await self.reconcile(uid)
                except (ApiError, StoreError) as e:
                    _log.warning("could not write job status; will retry", job_uid=uid, error=str(e))
                    self.work.retry(uid)
            metrics.labels(loop="status_sync", phase="reconcile").observe(time.perf_counter() - started)

    def _watched(self, cluster: str) -> tuple[ClusterObjects, SchedulerAdapter] | None:
        """The cluster's member object index and scheduler adapter, or None while it is not watched (yet):
        then absence in the index would mean nothing."""
        objects = self.objects.get(cluster)
        scheduler = cluster_scheduler(self.hub, cluster)
        if objects is None or not objects.ready or scheduler is None:
            return None
        try:
            return objects, adapter_for(scheduler[0])
        except KeyError:
            return None

    def _fence_verdict(self, uid: str, job: Mapping[str, Any], *, cluster: str, epoch: int,
                       now: float) -> bool | None:
        """Were the gang's objects (seen gone) killed by the member's fence agent? None: not known yet."""
        missing_since = self._missing_since.setdefault(uid, now)
        return fence_verdict(self.members.lease(cluster), job, epoch=epoch, missing_since=missing_since, now=now)

    async def _requeue_fenced(self, job: Mapping[str, Any], *, cluster: str, epoch: int, now: float) -> None:
        await requeue_fenced(self.hub, job, cluster=cluster, epoch=epoch, now=now, controller="status-sync")
        self._missing_since.pop(job_ref(job).uid, None)

    async def _requeue_by_policy(self, job: Mapping[str, Any], verdict: PolicyVerdict, *, cluster: str, epoch: int,
                                 now: float) -> None:
        """spec.failurePolicy moves the gang (Requeue: elsewhere, the cluster, or with exclude Node the failed
        pod's node, excluded for HubSettings.stuck.exclusion_seconds) or places it again whole (a RestartPod or
        Ignore of a pod whose role restarts no single pod): history FailurePolicy then Requeued, the old copy
        deleted as a preemption's is (status.placement.previous: the next dispatch waits until it is gone)."""
        ref = job_ref(job)
        exclude = verdict.outcome is GangOutcome.REQUEUE
        until = now + self.hub.settings.stuck.exclusion_seconds if exclude else None
        # a pod never bound has no node to exclude: its cluster is
        node = verdict.node if exclude and verdict.match is not None \
            and verdict.match.exclude is ExcludeScope.NODE and verdict.node else None
        where = ("the whole gang is placed again" if until is None
                 else f"the gang is placed again, node {node} of cluster {cluster} excluded until "
                      f"{format_time(math.ceil(until))}" if node is not None
                 else f"the gang moves elsewhere, cluster {cluster} excluded until {format_time(math.ceil(until))}")
        message = (f"{verdict.message()}; {where} (epoch {epoch + 1}"
                   + (", counted in status.requeues)" if verdict.counted else ", not counted)"))

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) \
                    or Body(fresh).deleting:
                return None
            status = fresh["status"]
            append_history(status, history_entry(HISTORY_FAILURE_POLICY, cluster=cluster, epoch=epoch,
                                                 message=message, now=now))
            requeue(status, reason=HISTORY_FAILURE_POLICY, message=f"requeued: {message}", now=now, job=ref.key,
                    exclude_until=until, exclude_node=node, count=verdict.counted)
            status["placement"]["previous"] = {"cluster": cluster, "epoch": epoch}
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                         uid=ref.uid)
        if stored is None:
            return
        self.hub.events.record(stored, controller="status-sync", reason=HISTORY_FAILURE_POLICY,
                               action=verdict.match.action.value if verdict.match else "Requeue", warning=True,
                               message=message)
        reservations(self.hub).forget(ref.uid)
        self.hub.metrics.job_requeues.labels(reason=HISTORY_FAILURE_POLICY).inc()
        _log.warning("gang requeued by its failure policy", job=ref.key, cluster=cluster, epoch=epoch,
                     action=verdict.match.action.value if verdict.match else "", excluded=exclude,
                     excluded_node=node or "")
        try:
            await self.dispatcher.delete_previous(stored, cluster="")
        except Exception as e:  # noqa: BLE001 - the GC deletes what is left (not placed there any more)
            _log.warning("could not ask the member to delete a requeued gang; the GC will", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}")

    async def suspend_placed(self, job: Mapping[str, Any], *, cluster: str, epoch: int, now: float) -> None:
        """spec.suspend is true on a placed gang: it leaves `cluster` as a preempted one does (see the module
        docstring), into phase Suspended; nothing when it moved on or was resumed meanwhile."""
        ref = job_ref(job)
        message = (f"spec.suspend is true: the gang in cluster {cluster} (epoch {epoch}) is deleted and its quota "
                   f"released; set spec.suspend to false to place the job again (it resumes from its last "
                   f"checkpoint at epoch {epoch + 1} or later)")

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            body = Body(fresh)
            if body.spec.get("suspend") is not True or body.deleting or phase_of(fresh) not in ACTIVE_PHASES \
                    or current_placement(fresh) != (cluster, epoch):
                return None
            status = fresh["status"]
            requeue(status, reason="Suspended", message=message, now=now, job=ref.key, count=False,
                    phase=PHASE_SUSPENDED, event="Suspended")
            # its next dispatch, wherever it goes, waits until this copy is gone (design.md invariant 2)
            status["placement"]["previous"] = {"cluster": cluster, "epoch": epoch}
            set_condition(status, type=CONDITION_SUSPENDED, state="True", reason="Suspended", message=message,
                          now=now)
            set_condition(status, type=CONDITION_QUOTA_RESERVED, state="False", reason="Suspended",
                          message=message, now=now)
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                         uid=ref.uid)
        if stored is None:
            return
        self._missing_since.pop(ref.uid, None)
        self.hub.events.record(stored, controller="status-sync", reason="Suspended", action="Suspend",
                               message=message)
        reservations(self.hub).forget(ref.uid)
        _log.info("placed gang suspended; deleting its member objects", job=ref.key, cluster=cluster, epoch=epoch)
        try:
            with member_write_reason("suspend"):
                await self.dispatcher.delete_previous(stored, cluster="")
        except Exception as e:  # noqa: BLE001 - the GC deletes what is left (not placed there any more)
            _log.warning("could not ask the member to delete a suspended gang; the GC will", job=ref.key,
                         cluster=cluster, error=f"{type(e).__name__}: {e}")

    async def _restart(self, job: Mapping[str, Any], plan: RestartPlan, *, cluster: str, epoch: int,
                       now: float) -> None:
        """Delete the gang's failed pods and create them again (`restart_plan`); a history entry
        PodRestarted says which, why and how many failures count toward spec.backoffLimit."""
        ref = job_ref(job)
        if self.members.client(cluster) is None:
            self.work.retry(ref.uid)
            return
        if plan.sizes_after != plan.sizes_before:
            stored = await self._shrink(job, plan, cluster=cluster, epoch=epoch, now=now)
            if stored is None:
                self.work.retry(ref.uid)
                return
            job = stored  # the pods created again are rendered at the new size
        try:
            created = await self.dispatcher.restart_pods(job, cluster=cluster, epoch=epoch, delete=plan.delete,
                                                         recreate=plan.recreate)
        except DispatchError as e:
            if e.outdated:
                # the stored job moved on (requeued, another cluster or epoch, being deleted) since this pass
                # read it: its pods of this epoch are not created again; the job's next event says what now
                _log.info("not restarting the gang's failed pods: the job moved on", job=ref.key, cluster=cluster,
                          epoch=epoch, reason=str(e))
                return
            _log.warning("could not restart the gang's failed pods; will retry", job=ref.key, cluster=cluster,
                         error=str(e))
            self.work.retry(ref.uid)
            return
        except MemberClientError as e:
            _log.warning("could not restart the gang's failed pods; will retry", job=ref.key, cluster=cluster,
                         error=str(e))
            self.work.retry(ref.uid)
            return
        if plan.sizes_after != plan.sizes_before or (
                not created and not any(name in plan.recreate for name in plan.delete)):
            return  # a shrink (its Resized entry says it all), or missing pods already back
        limit = _backoff_limit(Body(job).spec)
        message = (f"pods created again in cluster {cluster} (epoch {epoch}): "
                   f"{', '.join(sorted(plan.recreate))}; {plan.counted} of spec.backoffLimit {limit} failures "
                   f"counted" + (": " + "; ".join(plan.reasons) if plan.reasons else " (missing pods)"))
        _log.info("restarted the gang's failed pods", job=ref.key, cluster=cluster, epoch=epoch,
                  pods=sorted(plan.recreate), counted=plan.counted)

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) \
                    or Body(fresh).deleting:
                return None
            append_history(fresh["status"], history_entry(HISTORY_POD_RESTARTED, cluster=cluster, epoch=epoch,
                                                          message=message, now=now))
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                         uid=ref.uid)
        if stored is not None:
            self.hub.events.record(stored, controller="status-sync", reason=HISTORY_POD_RESTARTED,
                                   action="Restart", warning=True, message=message)

    async def _shrink(self, job: Mapping[str, Any], plan: RestartPlan, *, cluster: str, epoch: int,
                      now: float) -> dict[str, Any] | None:
        """Write the gang's smaller size (status.replicas, history Resized with reason WorkerLost) before its
        lost pods are deleted, so that nothing takes the missing pods for ones to create again. False when
        the job moved on or its size changed meanwhile; else the job as stored."""
        ref = job_ref(job)
        message = (f"workers lost in cluster {cluster} (epoch {epoch}); the gang goes on smaller: "
                   + "; ".join(plan.reasons))

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) \
                    or Body(fresh).deleting or placed_replicas(fresh) != dict(plan.sizes_before):
                return None
            status = fresh["status"]
            status["replicas"] = dict(plan.sizes_after)
            entry = history_entry(HISTORY_RESIZED, cluster=cluster, epoch=epoch, message=message, now=now)
            entry.update({"from": dict(plan.sizes_before), "to": dict(plan.sizes_after), "reason": "WorkerLost"})
            append_history(status, entry)
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                         uid=ref.uid)
        if stored is None:
            return None
        self._shrunk[ref.uid] = (cluster, epoch, dict(plan.sizes_after))
        self.hub.events.record(stored, controller="status-sync", reason=HISTORY_RESIZED, action="Shrink",
                               warning=True, message=message)
        _log.info("gang shrunk: workers lost", job=ref.key, cluster=cluster, epoch=epoch,
                  to=dict(plan.sizes_after))
        return stored

    def _say_dropped(self, uid: str, kind: JobKind, copy: Mapping[str, Any], *, cluster: str, epoch: int,
                     dropped: Mapping[str, str]) -> None:
        """One log line per change of which of the member copy's status fields are left out (malformed or
        oversized: the hub shows its computed values for them)."""
        said = (cluster, epoch, tuple(sorted(dropped)))
        if not dropped or self._dropped_said.get(uid) == said:
            if not dropped:
                self._dropped_said.pop(uid, None)
            return
        self._dropped_said[uid] = said
        _log.warning("the member copy's status has fields the hub does not mirror (malformed or too large); the "
                     "hub shows its own values for them", kind=kind.kind, namespace=Body(copy).namespace,
                     name=Body(copy).name, cluster=cluster, epoch=epoch,
                     fields="; ".join(why[:200] for why in list(dropped.values())[:8]))

    def _checkpoint_report(self, uid: str, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *,
                           cluster: str) -> CheckpointReport | None:
        """The newest checkpoint report on the gang's pods; a malformed one is logged once and ignored."""
        report, bad = latest_report(pods)
        said = tuple((b.pod, b.reason) for b in bad)
        if said and self._bad_reports_said.get((uid, cluster)) != said:
            for b in bad:
                _log.warning("checkpoint report ignored", job=job_ref(job).key, cluster=cluster, pod=b.pod,
                             annotation="federator.dev/checkpoint", reason=b.reason)
        if said:
            self._bad_reports_said[(uid, cluster)] = said
        else:
            self._bad_reports_said.pop((uid, cluster), None)
        return report

    def _previous_report(self, uid: str, job: Mapping[str, Any]) -> tuple[str, int, CheckpointReport] | None:
        """The newest report on the pods of a moved gang's previous copy (status.placement.previous) while they
        are still there: an evicted copy saves during its grace (docs/failover.md)."""
        placement = Body(job).status.get("placement")
        previous = placement.get("previous") if isinstance(placement, Mapping) else None
        if not isinstance(previous, Mapping):
            return None
        cluster, epoch = previous.get("cluster"), previous.get("epoch")
        if not isinstance(cluster, str) or type(epoch) is not int:
            return None
        watched = self._watched(cluster)
        if watched is None:
            return None
        # its pods still there, and those that left with a report (a process that saved, reported and exited)
        report = self._checkpoint_report(uid, job, watched[0].gang(uid, epoch)[1] + watched[0].departed(uid, epoch),
                                         cluster=cluster)
        return (cluster, epoch, report) if report is not None else None

    async def reconcile(self, uid: str) -> None:
        self.awaiting_release.discard(uid)
        job = self.jobs.get(uid)
        if job is None:
            self._dropped_said.pop(uid, None)
            for key in [k for k in self._bad_reports_said if k[0] == uid]:
                del self._bad_reports_said[key]
            return
        body = Body(job)
        phase = body.phase
        cluster, epoch = current_placement(job)
        if phase not in ACTIVE_PHASES or cluster is None or uid in self.pulling_back or body.deleting:
            # A job being deleted loses its member objects on purpose (cleanup.py): that is no failure, and
            # what the member shows no longer changes what the job is (its Terminating condition says it).
            self._missing_since.pop(uid, None)
            return
        now = time.time()
        if body.spec.get("suspend") is True:
            await self.suspend_placed(job, cluster=cluster, epoch=epoch, now=now)
            return
        gs: GangStatus | None = None
        operator: dict[str, Any] | None = None
        report: CheckpointReport | None = None
        previous: tuple[str, int, CheckpointReport] | None = None
        watched = self._watched(cluster)
        if watched is not None:
            objects, adapter = watched
            shrunk = self._shrunk.get(uid)
            if shrunk is not None and (shrunk[:2] != (cluster, epoch) or placed_replicas(job) == shrunk[2]):
                shrunk = None  # the job cache caught up with our own shrink (or the job moved on)
                self._shrunk.pop(uid, None)
            sizes = shrunk[2] if shrunk is not None else None
            gs = gang_status(job, objects, adapter, epoch=epoch, expected=sizes)
            report = self._checkpoint_report(uid, job, objects.gang(uid, epoch)[1], cluster=cluster)
            previous = self._previous_report(uid, job)
            source_key = body.annotations.get(SOURCE_KIND_ANNOTATION)
            kind = job_kind_by_source(source_key) if isinstance(source_key, str) else None
            plan: RestartPlan | None = None
            if kind is not None and self.dispatcher.operated_gang(job, cluster=cluster, epoch=epoch):
                # operator mode: the member's operator restarts and re-creates single pods, never the hub
                found = objects.member_copy(uid, kind.source_key, epoch)
                copy = found[1] if found is not None else None
                gs = operated_gang_status(job, gs, copy, kind=kind)
                if copy is not None:
                    dropped: dict[str, str] = {}
                    operator = operator_status(copy, kind=kind, cluster=cluster, epoch=epoch, problems=dropped)
                    self._say_dropped(uid, kind, copy, cluster=cluster, epoch=epoch, dropped=dropped)
            else:
                podgroup, pods = objects.gang(uid, epoch)
                policy = policy_verdict(job, pods)
                if policy is not None and policy.outcome in (GangOutcome.REQUEUE, GangOutcome.RESTART_GANG) \
                        and not (policy.counted and int(body.status.get("requeues") or 0) >= max_requeues(job)):
                    await self._requeue_by_policy(job, policy, cluster=cluster, epoch=epoch, now=now)
                    return
                if policy is not None and policy.outcome is not GangOutcome.PER_POD:
                    fail = policy.outcome is GangOutcome.FAIL
                    gs = dataclasses.replace(
                        gs, phase=GangPhase.FAILED, reason=REASON_POD_FAILURE_POLICY if fail else "RequeueLimit",
                        message=policy.message() + ("" if fail else (
                            f"; the job was requeued {int(body.status.get('requeues') or 0)} times already "
                            f"(spec.failover.maxRequeues {max_requeues(job)})")))
                elif not (adapter.pods_owned_by_group and podgroup is None and objects_missing(job, gs)):
                    # (a gang whose owning PodGroup is gone too gets no pods created again: they would have
                    # no owner, e.g. the member's fence agent deleted the whole gang; the fence verdict below
                    # says whether it did, and the gang is requeued, or failed as a restartPolicy Never one)
                    plan = restart_plan(job, pods, expected=sizes, verdict=policy,
                                        admitted=_PHASE_RANK.get(phase, 0) >= _PHASE_RANK[PHASE_ADMITTED])
            if plan is not None and plan.exceeded:
                gs = dataclasses.replace(gs, phase=GangPhase.FAILED, reason="BackoffLimitExceeded", message=(
                    f"{plan.counted} pod failures counted, more than spec.backoffLimit "
                    f"{_backoff_limit(body.spec)}: "
                    + "; ".join(plan.reasons)))
            elif plan is not None:
                await self._restart(job, plan, cluster=cluster, epoch=epoch, now=now)
                return
            if gs.expected > 0 and gs.bound >= gs.expected and not release_if_shown(self.hub, uid) \
                    and reservations(self.hub).get(uid) is not None:
                self.awaiting_release.add(uid)
            missing = objects_missing(job, gs)
            if not missing:
                self._missing_since.pop(uid, None)
            if with_checkpoints(job, with_operator(job, synced_status(
                    job, gs, adapter=adapter, cluster=cluster, epoch=epoch, now=now, quiet=True), operator),
                    report, previous, cluster=cluster, epoch=epoch, now=now) is None:
                gs = None  # the member shows nothing new
            elif missing:
                verdict = self._fence_verdict(uid, job, cluster=cluster, epoch=epoch, now=now)
                if verdict is None:
                    self.work.retry(uid)  # the next renewal of the fencing lease says whether its agent did it
                    return
                if verdict:
                    if uid in self.dispatcher.in_flight:
                        # A dispatch of this job (a restarted hub's re-dispatch waiting for the cluster's
                        # fences) may still create this epoch's gang: requeueing now would let a newer epoch
                        # start while it does. It reads the stored decision again before creating; once it
                        # returns, the member shows whether the gang is back (as failover waits too).
                        self.work.retry(uid)
                        return
                    await self._requeue_fenced(job, cluster=cluster, epoch=epoch, now=now)
                    return
        if gs is None:
            return
        ref = job_ref(job)

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            fresh_phase = Body(fresh).phase
            if fresh_phase not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) or Body(fresh).deleting:
                return None  # the job moved on (requeued, another epoch, deleted) since we looked
            if watched is None:
                return None
            new = with_checkpoints(fresh, with_operator(fresh, synced_status(
                fresh, gs, adapter=watched[1], cluster=cluster, epoch=epoch, now=now), operator),
                report, previous, cluster=cluster, epoch=epoch, now=now)
            if new is None:
                return None
            fresh["status"] = new
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=uid)
        new_phase = stored["status"].get("phase") if stored is not None else phase
        if stored is not None and isinstance(new_phase, str) and new_phase != phase:
            said = {h.get("event"): h.get("message") for h in stored["status"].get("history") or ()
                    if isinstance(h, Mapping)}
            for step in (*_passed_phases(str(phase), new_phase), new_phase):
                self.hub.events.record(stored, controller="status-sync", reason=step, action="Sync",
                                       warning=step == PHASE_FAILED,
                                       message=str(said.get(step) or f"{step} in cluster {cluster} (epoch {epoch})"))
        if stored is not None and stored["status"].get("phase") in TERMINAL_PHASES \
                and reservations(self.hub).forget(uid):
            # A short gang can finish before the snapshot ever shows it bound: its pods hold nothing now.
            _log.info("reservation released: the gang finished", job=ref.key, cluster=cluster,
                      phase=stored["status"]["phase"])


async def status_sync(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: the status loop over the term's member object index and job cache (the job
    cache runs in `jobcache.job_cache`, listed before it)."""
    parts = hub.parts
    controller = StatusSync(hub, objects=parts.objects, jobs=parts.jobs, dispatcher=parts.dispatcher,
                            members=parts.members, pulling_back=parts.pulling_back)
    parts.running.status_sync = controller
    task = spawn(controller.run(), name="statussync:status", log=_log, event="status sync loop failed", loop="status")
    try:
        yield
    finally:
        controller.close()
        await stop_task(task)  # a failure of the loop was logged when it happened
        await parts.objects.stop()
        parts.running.status_sync = None
