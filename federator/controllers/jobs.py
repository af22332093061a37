"""TrainingJob helpers shared by the job-lifecycle controllers (placement, dispatch, status sync, stuck, cleanup).

The contract between those controllers lives here:

- `gang_request(job, now=...)`: a stored TrainingJob as placement's
  `GangRequest` (roles with an elastic role's min and max replicas,
  network, GPU models, datasets, selectors, tolerations, priority,
  submission time, excluded clusters, queue).
- `record_placed_size(status, decision)`: status.replicas, the pods per role
  a decision placed (the size dispatch renders: `placed_replicas`).
- `update_job_status(hub, namespace=..., name=..., mutate=...)`: a
  read-mutate-CAS write of the status subresource through `hub.storage`
  (whose writes the hub fences with the leader's token, see hub/app.py).
- `history_entry`, `append_history`, `set_condition`, `set_phase`,
  `requeue`: how status changes are spelled. Phase transitions are logged
  with the job and cluster keys.
- the term's pipeline parts, read through `hub.parts` (controllers/pipeline.py):
  the reservation book (`reservations(hub)`, the `ReservationLedger` class),
  the dispatches in flight (`InFlight`), member clients and cluster specs
  (`member_client`, `cluster_scheduler`: the member syncs of
  `controllers/membercluster.py`); and the hub id written into every member
  object's labels.

Lifecycle phases: Pending -> Placed (decision recorded, write-ahead, BEFORE
dispatch) -> Admitted (the member's gang scheduler admitted the gang) ->
Running -> Succeeded | Failed. A pulled-back gang (stuck, cluster lost,
failed dispatch) goes back to Pending with `placement.cluster` cleared and
its epoch kept; the next decision takes epoch + 1, so every placement of a
job has a fresh, larger epoch (the first one is 1).

status.placement = {cluster, epoch, decisionResourceVersion, whyNot, scores
(the decision's; a requeue drops them), excludedClusters: [{cluster, until}], excludedNodes: [{cluster, node,
until}]};
status.replicas = the decision's pods per role (a requeue drops it too).

This module does no I/O of its own except `update_job_status` (the hub
store through `hub.storage`); it never talks to a member cluster and never
starts a task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from federator.apiserver.errors import ApiError
from federator.apis.podtemplate import is_full_form
from federator.apis.timestamps import format_time, parse_epoch
from federator.apis.trainingjob import MAX_EXCLUDED_NODES, placed_replicas
from federator.apis.views import Body
from federator.controllers.context import HubContext
from federator.controllers.reservations import ReservationLedger
from federator.controllers.settings import DEFAULT_HUB_ID
from federator.obs import get_logger
from federator.placement import (
    Decision,
    GangRequest,
    LabelSelector,
    Network,
    Reservation,
    RoleRequest,
    Toleration,
)
from federator.placement.gang import SpotPolicy, TolerationOperator
from federator.placement.resources import template_requests
from federator.placement.snapshot import TaintEffect

__all__ = [
    "ACTIVE_PHASES",
    "DEFAULT_HUB_ID",
    "DispatchError",
    "JOB_KIND",
    "JOB_PHASES",
    "MAX_HISTORY",
    "PHASE_ADMITTED",
    "PHASE_FAILED",
    "PHASE_PENDING",
    "PHASE_PLACED",
    "PHASE_REQUEUED",
    "PHASE_SUSPENDED",
    "PHASE_RUNNING",
    "PHASE_SUCCEEDED",
    "TERMINAL_PHASES",
    "DispatchRecord",
    "InFlight",
    "JobRef",
    "ReservationLedger",
    "append_history",
    "apply_dispatch_record",
    "cluster_scheduler",
    "current_placement",
    "failover_policy",
    "dispatches_in_flight",
    "excluded_clusters",
    "excluded_nodes",
    "gang_request",
    "history_entry",
    "hub_id",
    "job_ref",
    "max_requeues",
    "member_client",
    "phase_of",
    "placed_at",
    "placed_gang",
    "placed_pods",
    "queued_at",
    "record_placed_size",
    "remove_condition",
    "requeue",
    "reservations",
    "set_condition",
    "set_phase",
    "update_job_status",
]

class DispatchError(Exception):
    """A dispatch (controllers/dispatch.py) that did not create the gang: why, and what may follow."""

    def __init__(self, message: str, *, retryable: bool = True, outdated: bool = False,
                 superseded: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        #: the dispatch must not go on (the job moved on)
        self.outdated = outdated or superseded
        #: this (cluster, epoch) is no longer the job's: what it made may be deleted
        self.superseded = superseded


_log = get_logger("controllers.jobs")

JOB_KIND = "TrainingJob"
PHASE_PENDING = "Pending"
PHASE_PLACED = "Placed"
PHASE_ADMITTED = "Admitted"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_REQUEUED = "Requeued"
#: not placed because spec.suspend is true (written by placement for a queued job, by status sync for a placed
#: one, whose gang it deletes; set it false to queue the job)
PHASE_SUSPENDED = "Suspended"
TERMINAL_PHASES = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})
#: every phase a TrainingJob can be in (apis/trainingjob.JobPhase): the label values of obs' federator_jobs
JOB_PHASES = (PHASE_PENDING, PHASE_PLACED, PHASE_ADMITTED, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED,
              PHASE_REQUEUED, PHASE_SUSPENDED)
#: phases in which the job holds (or is about to hold) member objects in status.placement.cluster
ACTIVE_PHASES = frozenset({PHASE_PLACED, PHASE_ADMITTED, PHASE_RUNNING})
#: TrainingJobStatus.history keeps at most 256 entries; we keep the newest
MAX_HISTORY = 64
MAX_WHY_NOT = 1024


#: The toleration delegated GPU pods get for the conventional GPU node taint (nvidia.com/gpu:NoSchedule).
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE)


# ---------------------------------------------------------------- time


# ---------------------------------------------------------------- identity


@dataclass(frozen=True, slots=True)
class JobRef:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def job_ref(job: Mapping[str, Any]) -> JobRef:
    meta = Body(job)
    return JobRef(namespace=meta.namespace, name=meta.name, uid=meta.uid)


def hub_id(hub: HubContext) -> str:
    """The identity this hub writes into member objects' `federator.dev/hub` label.

    Stable across restarts (crash recovery and GC find their objects by it):
    `HubSettings.hub_id` (default DEFAULT_HUB_ID)."""
    return hub.settings.hub_id


def current_placement(job: Mapping[str, Any]) -> tuple[str | None, int]:
    """(cluster, epoch) of the job's current placement; cluster None when not placed."""
    placement = Body(job).status.get("placement") or {}
    cluster = placement.get("cluster")
    epoch = placement.get("epoch")
    return (cluster if isinstance(cluster, str) and cluster else None,
            epoch if type(epoch) is int and epoch >= 0 else 0)


def placed_at(job: Mapping[str, Any], *, epoch: int) -> float | None:
    """When the job was placed at `epoch`: the newest "Placed" history entry of that epoch."""
    history = Body(job).status.get("history") or ()
    for entry in reversed(list(history)):
        if isinstance(entry, Mapping) and entry.get("event") == PHASE_PLACED and entry.get("epoch") == epoch:
            return parse_epoch(entry.get("time"))
    return None


def queued_at(job: Mapping[str, Any]) -> float | None:
    """When the job last entered the placement queue as its status tells: its newest "Requeued" history
    entry, else its creation (whole seconds: for a queue entry this process did not see happen)."""
    history = Body(job).status.get("history") or ()
    for entry in reversed(list(history)):
        if isinstance(entry, Mapping) and entry.get("event") == PHASE_REQUEUED:
            return parse_epoch(entry.get("time"))
    return parse_epoch(Body(job).creation_timestamp)


def failover_policy(job: Mapping[str, Any]) -> str:
    """The job's spec.failover.onClusterLoss: requeue (the default), fail or wait."""
    failover = Body(job).spec.get("failover") or {}
    policy = failover.get("onClusterLoss") if isinstance(failover, Mapping) else None
    return policy if policy in ("requeue", "fail", "wait") else "requeue"


def phase_of(job: Mapping[str, Any]) -> str:
    return Body(job).phase or PHASE_PENDING


# ---------------------------------------------------------------- TrainingJob -> GangRequest


def label_selector(raw: Any) -> LabelSelector | None:
    """A stored (validated) label selector as placement's; None for an absent or empty one (selects all)."""
    selector = LabelSelector.from_wire(raw)
    return None if selector.is_empty() else selector


def _toleration(raw: Mapping[str, Any]) -> Toleration:
    effect = raw.get("effect")
    return Toleration(
        key=str(raw.get("key") or ""),
        operator=TolerationOperator(raw.get("operator") or "Equal"),
        value=str(raw.get("value") or ""),
        effect=TaintEffect(effect) if effect else None,
    )


def excluded_clusters(job: Mapping[str, Any], *, now: float) -> dict[str, float]:
    """status.placement.excludedClusters still in force at `now`: cluster -> until (seconds)."""
    placement = Body(job).status.get("placement") or {}
    out: dict[str, float] = {}
    for item in placement.get("excludedClusters") or ():
        if not isinstance(item, Mapping):
            continue
        cluster, until = item.get("cluster"), parse_epoch(item.get("until"))
        if isinstance(cluster, str) and cluster and until is not None and until > now:
            out[cluster] = max(until, out.get(cluster, until))
    return out


def excluded_nodes(job: Mapping[str, Any], *, now: float) -> dict[str, frozenset[str]]:
    """status.placement.excludedNodes still in force at `now`: cluster -> its excluded node names."""
    placement = Body(job).status.get("placement") or {}
    out: dict[str, set[str]] = {}
    for item in placement.get("excludedNodes") or ():
        if not isinstance(item, Mapping):
            continue
        cluster, node, until = item.get("cluster"), item.get("node"), parse_epoch(item.get("until"))
        if isinstance(cluster, str) and cluster and isinstance(node, str) and node and until is not None \
                and until > now:
            out.setdefault(cluster, set()).add(node)
    return {cluster: frozenset(nodes) for cluster, nodes in out.items()}


def gang_request(job: Mapping[str, Any], *, now: float) -> GangRequest:
    """The stored TrainingJob `job` as a placement GangRequest.

    Per-role nodeSelectors are merged into one gang selector (keys on which
    roles disagree are left out: the member scheduler still enforces each
    pod's own selector); tolerations are the union over roles (likewise).
    Raises ValueError (or a placement QuantityError, a ValueError) naming
    the field when the job cannot be expressed.
    """
    ref = job_ref(job)
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError(f"TrainingJob {ref.key}: spec is missing")
    roles: list[RoleRequest] = []
    node_selector: dict[str, str] = {}
    conflicting: set[str] = set()
    tolerations: list[Toleration] = []
    for index, role in enumerate(spec.get("roles") or ()):
        template = role.get("template") or {}
        try:
            requests = template_requests(template)
        except ValueError as e:
            part = "spec" if is_full_form(template) else "resources"
            raise ValueError(f"TrainingJob {ref.key}: spec.roles[{index}].template.{part}: {e}") from None
        if is_full_form(template):  # the pod spec's selector and tolerations, as the short form's
            pod_spec = template.get("spec")
            template = pod_spec if isinstance(pod_spec, Mapping) else {}
        low, high = role.get("minReplicas"), role.get("maxReplicas")
        roles.append(RoleRequest(name=str(role.get("name")), replicas=int(role.get("replicas") or 0),
                                 requests=requests, min_replicas=low if type(low) is int else None,
                                 max_replicas=high if type(high) is int else None))
        for key, value in (template.get("nodeSelector") or {}).items():
            if key in node_selector and node_selector[key] != value:
                conflicting.add(key)
            node_selector.setdefault(str(key), str(value))
        for raw in template.get("tolerations") or ():
            toleration = _toleration(raw)
            if toleration not in tolerations:
                tolerations.append(toleration)
        if requests.gpu > 0 and GPU_TOLERATION not in tolerations:
            # Delegated GPU pods carry this toleration (delegation.extended_resource_tolerations, what the
            # ExtendedResourceToleration admission plugin adds), so GPU nodes tainted nvidia.com/gpu fit.
            tolerations.append(GPU_TOLERATION)
    for key in conflicting:
        node_selector.pop(key, None)
    placement = spec.get("placement") or {}
    affinity = placement.get("affinity") or {}
    preferred = [(t.get("weight"), label_selector(t.get("preference"))) for t in affinity.get("preferred") or ()]
    created = parse_epoch(Body(job).creation_timestamp)
    priority = spec.get("priority", 0)
    queue = spec.get("queue")
    return GangRequest(
        key=ref.key,
        uid=ref.uid,
        roles=tuple(roles),
        network=Network(placement.get("network") or "any"),
        gpu_models=tuple(placement.get("gpuModels") or ()),
        datasets=tuple(placement.get("datasets") or ()),
        cluster_selector=label_selector(placement.get("clusterSelector")),
        node_selector=node_selector,
        tolerations=tuple(tolerations),
        priority=priority if type(priority) is int else 0,
        submitted_at=created if created is not None else now,
        excluded_clusters=excluded_clusters(job, now=now),
        excluded_nodes=excluded_nodes(job, now=now),
        queue=queue if isinstance(queue, str) else "",
        cluster_names=frozenset(str(n) for n in affinity.get("clusterNames") or ()),
        # an empty required term ({}) matches every cluster, as an absent one
        required_terms=() if any(label_selector(t) is None for t in affinity.get("required") or ())
        else tuple(s for s in (label_selector(t) for t in affinity.get("required") or ()) if s is not None),
        preferred_terms=tuple((int(w), s or LabelSelector()) for w, s in preferred if type(w) is int),
        spot=SpotPolicy(placement.get("spot") or "never"),
    )


def placed_gang(job: Mapping[str, Any], gang: GangRequest) -> GangRequest:
    """`gang` (the job's GangRequest) at the size it was placed at (`placed_replicas`: status.replicas, else
    the spec's replicas): what a placed or running gang holds, e.g. to charge its queue. `gang` itself for a
    fixed-size gang."""
    if not gang.elastic:
        return gang
    return gang.resized(placed_replicas(job))


def placed_pods(job: Mapping[str, Any]) -> int:
    """How many pods the job's gang has as placed (every role at its `placed_replicas`)."""
    return sum(placed_replicas(job).values())


# ---------------------------------------------------------------- status spelling


def record_placed_size(status: dict[str, Any], decision: Decision) -> str:
    """Write status.replicas = the pods per role `decision` placed, which dispatch renders (also after a
    hub restart). Returns what to add to the decision's history message: an elastic gang's size within its
    range ("; size worker 12 (4..16)"), "" for a fixed-size gang."""
    if decision.replicas:
        status["replicas"] = dict(decision.replicas)
    else:
        status.pop("replicas", None)
    sizes = [f"{role} {decision.replicas.get(role, '?')} ({low}..{high})"
             for role, (low, high) in sorted(decision.ranges.items())]
    return f"; size {', '.join(sizes)}" if sizes else ""


def history_entry(event: str, *, cluster: str | None, epoch: int | None, message: str, now: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"time": format_time(now), "event": event, "message": message[:4096]}
    if cluster:
        entry["cluster"] = cluster
    if epoch is not None:
        entry["epoch"] = epoch
    return entry


def append_history(status: dict[str, Any], entry: Mapping[str, Any]) -> None:
    """Append `entry` to status.history, keeping the newest MAX_HISTORY entries."""
    history = list(status.get("history") or ())
    history.append(dict(entry))
    status["history"] = history[-MAX_HISTORY:]


def set_condition(
    status: dict[str, Any], *, type: str, state: str, reason: str, message: str, now: float,
) -> bool:
    """Set condition `type` to `state` ("True" | "False" | "Unknown"). lastTransitionTime moves only
    when the state changes. Returns True if anything changed."""
    conditions = [dict(c) for c in (status.get("conditions") or ()) if isinstance(c, Mapping)]
    for condition in conditions:
        if condition.get("type") == type:
            if (condition.get("status"), condition.get("reason"), condition.get("message")) == (
                    state, reason, message[:32768]):
                return False
            if condition.get("status") != state:
                condition["lastTransitionTime"] = format_time(now)
            condition.update(status=state, reason=reason, message=message[:32768])
            status["conditions"] = conditions
            return True
    conditions.append({"type": type, "status": state, "reason": reason, "message": message[:32768],
                       "lastTransitionTime": format_time(now)})
    status["conditions"] = conditions
    return True


def remove_condition(status: dict[str, Any], type: str) -> bool:
    conditions = [c for c in (status.get("conditions") or ()) if not (isinstance(c, Mapping) and c.get("type") == type)]
    if len(conditions) == len(status.get("conditions") or ()):
        return False
    status["conditions"] = conditions
    return True


def set_phase(
    status: dict[str, Any], phase: str, *, reason: str, message: str, now: float, job: str, cluster: str | None = None,
) -> bool:
    """Set status.phase, logging the transition with the job and cluster keys. True if it changed."""
    previous = status.get("phase")
    if previous == phase:
        return False
    status["phase"] = phase
    _log.info("job phase", job=job, cluster=cluster, phase=phase, previous=previous, reason=reason,
              message=message[:256], at=format_time(now))
    return True


def max_requeues(job: Mapping[str, Any]) -> int:
    """spec.failover.maxRequeues (3 when absent): how often a job moves whole before it fails."""
    failover = Body(job).spec.get("failover") or {}
    value = failover.get("maxRequeues") if isinstance(failover, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 3


def requeue(
    status: dict[str, Any], *, reason: str, message: str, now: float, job: str,
    exclude_until: float | None = None, exclude_node: str | None = None, count: bool = True,
    phase: str = PHASE_PENDING, event: str = "Requeued",
) -> None:
    """Send the job back to the placement queue: phase Pending, no cluster, same epoch (the next
    decision takes epoch + 1), a history entry; optionally exclude the cluster it left (or, with
    `exclude_node`, only that node of it) until `exclude_until`, and count the requeue in status.requeues.
    A suspended gang leaves its cluster the same way, into `phase` Suspended with history `event` Suspended
    (`status_sync.StatusSync.suspend_placed`): setting spec.suspend false queues it like any requeue."""
    placement = dict(status.get("placement") or {})
    cluster = placement.get("cluster")
    epoch = placement.get("epoch") if type(placement.get("epoch")) is int else 0
    if exclude_until is not None and isinstance(cluster, str) and cluster and exclude_node:
        nodes = [e for e in placement.get("excludedNodes") or ()
                 if isinstance(e, Mapping) and (e.get("cluster"), e.get("node")) != (cluster, exclude_node)
                 and (parse_epoch(e.get("until")) or 0) > now]
        nodes.append({"cluster": cluster, "node": exclude_node, "until": format_time(math.ceil(exclude_until))})
        placement["excludedNodes"] = nodes[-MAX_EXCLUDED_NODES:]
    elif exclude_until is not None and isinstance(cluster, str) and cluster:
        kept = [e for e in placement.get("excludedClusters") or ()
                if isinstance(e, Mapping) and e.get("cluster") != cluster
                and (parse_epoch(e.get("until")) or 0) > now]
        kept.append({"cluster": cluster, "until": format_time(math.ceil(exclude_until))})
        placement["excludedClusters"] = kept
    placement.pop("cluster", None)
    placement.pop("decisionResourceVersion", None)
    placement.pop("scores", None)  # the decision's, which no longer holds
    placement.pop("mode", None)  # its dispatch's
    status.pop("replicas", None)  # likewise: the next decision chooses the size again
    placement["epoch"] = epoch
    status["placement"] = placement
    if count:
        status["requeues"] = int(status.get("requeues") or 0) + 1
    append_history(status, history_entry(event, cluster=cluster if isinstance(cluster, str) else None,
                                         epoch=epoch, message=message, now=now))
    set_phase(status, phase, reason=reason, message=message, now=now, job=job,
              cluster=cluster if isinstance(cluster, str) else None)
    status.pop("podCounts", None)


# ---------------------------------------------------------------- status writes


async def update_job_status(
    hub: HubContext,
    *,
    namespace: str,
    name: str,
    mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
    uid: str | None = None,
) -> dict[str, Any] | None:
    """Read the job, `mutate(job)` (a fresh copy; change job["status"], return the job, or None to
    skip), CAS-write the status subresource, retrying on conflict. `hub.storage` fences it with the
    leader's token while leading (store FencedOut when deposed). The write trusts the stored job
    (validated by the API at admission) and this code's status: no full re-validation per write.

    Returns the stored job, or None when skipped, when the job is gone (404) or when `uid` is given
    and the stored job is another object of the same name.
    """
    def guarded(job: dict[str, Any]) -> dict[str, Any] | None:
        if uid is not None and Body(job).uid != uid:
            return None
        job.setdefault("status", {})
        return mutate(job)

    try:
        return await hub.storage.guaranteed_update(hub.kind(JOB_KIND), namespace=namespace, name=name,
                                                    mutate=guarded, subresource="status", trusted_status=True)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


# ---------------------------------------------------------------- the pipeline's small parts





def reservations(hub: HubContext) -> ReservationLedger:
    """The term's one reservation book (`hub.parts.reservations`)."""
    return hub.parts.reservations


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """A dispatch that created (or found) every member object of a job's (cluster, epoch)."""

    cluster: str
    epoch: int
    created: int
    existing: int
    #: time.time() of the dispatch (the history entry's time)
    at: float
    #: how the member runs the gang (jobkinds.status.MODES): "operator" (the hub created the member copy of the
    #: upstream object, which the member's own operator runs) or "render" (the hub rendered the pods)
    mode: str = "render"

    @property
    def message(self) -> str:
        how = "the member's own operator runs the copy" if self.mode == "operator" else "the hub rendered the pods"
        return (f"{self.created + self.existing} member objects in {self.cluster} at epoch {self.epoch} "
                f"({self.created} created, {self.existing} already there); {self.mode} mode: {how}")


def apply_dispatch_record(status: dict[str, Any], record: DispatchRecord) -> bool:
    """Condition Dispatched=True, a "Dispatched" history entry for `record` and the dispatch's mode in
    status.placement.mode (the Mode column; a new placement drops it until its dispatch); False (nothing done)
    when the condition already says so. The caller checks that the job is still at the record's (cluster,
    epoch)."""
    if not set_condition(status, type="Dispatched", state="True", reason="MemberObjectsCreated",
                         message=record.message, now=record.at):
        return False
    status["placement"] = {**(status.get("placement") or {}), "mode": record.mode}
    # A fast member can have scheduled the objects, and status sync recorded that (Admitted, Running, ...), before
    # this record is written: the entry goes before those of the same placement, where it happened (a loaded run
    # on a real member saw history Placed, Admitted, Dispatched).
    history = list(status.get("history") or ())
    at = len(history)
    while at > 0 and isinstance(history[at - 1], Mapping) and history[at - 1].get("event") in _AFTER_DISPATCH \
            and (history[at - 1].get("cluster"), history[at - 1].get("epoch")) == (record.cluster, record.epoch):
        at -= 1
    history.insert(at, history_entry("Dispatched", cluster=record.cluster, epoch=record.epoch,
                                     message=record.message, now=record.at))
    status["history"] = history[-MAX_HISTORY:]
    return True


#: history events of a placement that only follow its dispatch (status sync's, from what the member shows)
_AFTER_DISPATCH = frozenset({PHASE_ADMITTED, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED})


class InFlight:
    """Jobs whose member objects may be being created right now: from placement's decision (or a
    dispatch started by anyone else) until that dispatch has returned. Counted, so that nested holders
    (placement's decision, then the dispatch itself) do not end each other's hold. The deletion
    finalizer waits for a job to leave it: objects created after its last look would outlive the job."""

    def __init__(self) -> None:
        self._holds: dict[str, int] = {}

    def begin(self, uid: str) -> None:
        self._holds[uid] = self._holds.get(uid, 0) + 1

    def end(self, uid: str) -> None:
        left = self._holds.get(uid, 0) - 1
        if left > 0:
            self._holds[uid] = left
        else:
            self._holds.pop(uid, None)

    def __contains__(self, uid: object) -> bool:
        return uid in self._holds

    def __len__(self) -> int:
        return len(self._holds)


def dispatches_in_flight(hub: HubContext) -> InFlight:
    """The term's dispatches in flight (`hub.parts.in_flight`)."""
    return hub.parts.in_flight


def _sync_of(hub: HubContext, cluster: str) -> Any:
    """The member sync of `cluster` (None when not registered, or when this context runs no controllers: the
    API's while this hub follows)."""
    if hub.pipeline is None:
        return None
    return hub.pipeline.members.syncs.get(cluster)


def member_client(hub: HubContext, cluster: str) -> Any:
    """The MemberClient member sync holds for `cluster` (None when not registered or not connected).

    Typed Any so that controllers above `clusters` do not import it just for the annotation."""
    sync = _sync_of(hub, cluster)
    return getattr(sync, "client", None) if sync is not None else None


def cluster_scheduler(hub: HubContext, cluster: str) -> tuple[str, str | None] | None:
    """(scheduler kind, spec.scheduler.schedulerName override) of a registered cluster, or None."""
    sync = _sync_of(hub, cluster)
    spec = getattr(sync, "spec", None) if sync is not None else None
    if not isinstance(spec, Mapping):
        return None
    scheduler = spec.get("scheduler") or {}
    kind = scheduler.get("name")
    if not isinstance(kind, str):
        return None
    override = scheduler.get("schedulerName")
    return kind, override if isinstance(override, str) and override else None
