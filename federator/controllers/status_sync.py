"""Status sync: member PodGroup and pod state flows into TrainingJob.status.

Three parts, all started by the `status_sync(hub)` cleanup_ctx factory (hub/app.py
lists it after member sync):

- `MemberObjects` (published as `hub.shared["member_objects"]`): for every
  member cluster that member sync holds a client for, one list/watch per
  member kind the hub creates there (Pods, and the PodGroups of the cluster's
  gang scheduler), cluster-wide, restricted by label selector to the objects
  *this hub* labelled (`federator.dev/hub=<hub id>`). It reuses member sync's
  `MemberClient` (no second connection) and the `Reflector` (resume from the
  last resourceVersion, re-list only after 410, capped backoff with jitter),
  so there is one watch per cluster and kind, never one per job. Objects are
  kept slimmed (metadata, nodeName, status) and indexed by job uid and
  epoch; the GC (cleanup.py) and the stuck-gang detector (stuck.py) read the
  same index.
- `JobCache` (published as `hub.shared["job_cache"]`): a list+watch of the
  hub's TrainingJobs, with subscribers notified of every change.
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
  Failed) before the snapshot ever showed it bound. A dispatch's Dispatched record
  (`jobs.DispatchRecords`) is written with the gang's next status write
  rather than in a write of its own. Work is driven by events (a member batch touching a
  job's objects, a job change), batched per job: the changes within
  `status_batch_seconds` (HubSettings.status_sync, default 0.5) of a job's first
  one become one status write, as kube's Job controller batches pod
  updates; a full pass over the active jobs runs at most every
  `status_resync_seconds` (default 5).

Failed workers: for a role with restartPolicy OnFailure, a failed pod is
deleted and created again (same cluster, same name, next attempt index:
annotation federator.dev/attempt and env FEDERATOR_ATTEMPT) through the
Dispatcher's `recreate_pods`, and a missing pod of such a role after
admission is created again; failures the infrastructure caused
(DisruptionTarget=True: lost or deleted node) do not count toward
spec.backoffLimit, the others do (counted on the gang's pods, so per
placement); past the limit the job fails with reason BackoffLimitExceeded
and the pods' reasons (`restart_plan`). An elastic role with onWorkerLoss
shrink above its minimum instead loses the failed pod: status.replicas one
smaller, history Resized (reason WorkerLost), written before the pod is
deleted. Roles with restartPolicy Never fail the gang as before.

Apart from those restarts it never creates or deletes member objects, never decides placement, and
never logs an object body or a credential.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federator.apis.trainingjob import DEFAULT_BACKOFF_LIMIT, HISTORY_RESIZED, placed_replicas
from federator.apiserver.errors import ApiError
from federator.clusters.client import NODES, PODS, MemberApiError, MemberClientError, ResourceKind
from federator.clusters.reflector import Backoff, Reflector
from federator.controllers.context import HubContext
from federator.controllers.loops import watch_hub_kind
from federator.controllers.jobs import (
    DISPATCHER,
    DispatchError,
    ACTIVE_PHASES,
    JOB_KIND,
    MEMBER_SYNCS,
    PHASE_ADMITTED,
    PHASE_FAILED,
    PHASE_PLACED,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    SNAPSHOTS,
    TERMINAL_PHASES,
    append_history,
    apply_dispatch_record,
    cluster_scheduler,
    current_placement,
    dispatch_records,
    history_entry,
    phase_of,
    placed_at,
    requeue,
    hub_id,
    job_ref,
    member_client,
    reservations,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.delegation import GangPhase, GangStatus, SchedulerAdapter, adapter_for, hub_selector
from federator.delegation.adapter import (
    LABEL_EPOCH,
    LABEL_INDEX,
    LABEL_JOB_NAME,
    LABEL_JOB_NAMESPACE,
    LABEL_JOB_UID,
    LABEL_ROLE,
    pod_name,
)
from federator.obs import get_logger
from federator.store.protocol import StoreError
from federator.runtime.tasks import supervised
from federator.runtime.waits import LoopSlice, wait_event

__all__ = [
    "JOB_CACHE",
    "MEMBER_OBJECTS",
    "PULLING_BACK",
    "ClusterObjects",
    "JobCache",
    "MemberObject",
    "MemberObjects",
    "in_delete_order",
    "member_object",
    "StatusSync",
    "expected_roles",
    "gang_status",
    "lifecycle_tick_seconds",
    "release_if_shown",
    "status_sync",
    "synced_status",
]

_log = get_logger("controllers.status_sync")

MEMBER_OBJECTS = "member_objects"
JOB_CACHE = "job_cache"
#: uid -> pull-back in progress (stuck.py); status sync leaves those jobs alone
PULLING_BACK = "pulling_back"
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


# ---------------------------------------------------------------- member objects


@dataclass(frozen=True, slots=True)
class MemberObject:
    """One object this hub made in a member cluster, as last seen there."""

    cluster: str
    resource: ResourceKind
    namespace: str
    name: str
    uid: str
    job_uid: str
    job_namespace: str
    job_name: str
    #: None when the epoch label is missing or malformed
    epoch: int | None
    deleting: bool


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What status sync, GC and stuck detection read of a member object (not its spec or env)."""
    meta = _mapping(obj.get("metadata"))
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                                      "deletionTimestamp") if k in meta}
    slim: dict[str, Any] = {"metadata": kept_meta}
    for key in ("apiVersion", "kind"):
        if key in obj:
            slim[key] = obj[key]
    spec = _mapping(obj.get("spec"))
    if spec.get("nodeName"):
        slim["spec"] = {"nodeName": spec["nodeName"]}
    elif "minMember" in spec:
        slim["spec"] = {"minMember": spec["minMember"]}
    status = obj.get("status")
    if isinstance(status, Mapping):
        slim["status"] = status
    return slim


def _epoch_of(labels: Mapping[str, Any]) -> int | None:
    raw = labels.get(LABEL_EPOCH)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 10 else None


def _key_of(obj: Mapping[str, Any]) -> str:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


class ClusterObjects:
    """This hub's Pods and PodGroups in one member cluster, indexed by job uid (a ReflectorSink)."""

    def __init__(self, cluster: str, resources: Sequence[ResourceKind],
                 on_change: Callable[[str, set[str]], None]) -> None:
        self.cluster = cluster
        self.resources = tuple(resources)
        self._by_key_resource = {r.key: r for r in self.resources}
        self.objects: dict[str, dict[str, dict[str, Any]]] = {r.key: {} for r in self.resources}
        self._by_job: dict[str, set[tuple[str, str]]] = {}
        self._job_of: dict[tuple[str, str], str] = {}
        self.synced: set[str] = set()
        self.on_change = on_change
        #: bumped on every applied batch (tests and waiters poll it)
        self.generation = 0

    @property
    def podgroup_resource(self) -> ResourceKind | None:
        return next((r for r in self.resources if r.key != PODS.key), None)

    @property
    def ready(self) -> bool:
        """Every kind has been listed at least once: absence in the index means absence in the member."""
        return all(r.key in self.synced for r in self.resources)

    # ReflectorSink

    def known(self, resource: str) -> Mapping[str, str]:
        return {key: str(_mapping(obj.get("metadata")).get("resourceVersion") or "")
                for key, obj in self.objects.get(resource, {}).items()}

    def apply(self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str,
              received_at: float) -> None:
        store = self.objects.get(resource)
        if store is None:
            return
        touched: set[str] = set()
        for kind, obj in events:
            key = _key_of(obj)
            if not key:
                continue
            ref = (resource, key)
            old_job = self._job_of.pop(ref, None)
            if old_job is not None:
                touched.add(old_job)
                members = self._by_job.get(old_job)
                if members is not None:
                    members.discard(ref)
                    if not members:
                        del self._by_job[old_job]
            if kind == "DELETED":
                store.pop(key, None)
                continue
            slim = _slim(obj)
            store[key] = slim
            job_uid = _mapping(_mapping(slim["metadata"]).get("labels")).get(LABEL_JOB_UID)
            if isinstance(job_uid, str) and job_uid:
                self._job_of[ref] = job_uid
                self._by_job.setdefault(job_uid, set()).add(ref)
                touched.add(job_uid)
        self.synced.add(resource)
        self.generation += 1
        if touched:
            self.on_change(self.cluster, touched)

    # reads

    def gang(self, job_uid: str, epoch: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """(PodGroup, pods) of the job's gang at `epoch` in this cluster."""
        podgroup: dict[str, Any] | None = None
        pods: list[dict[str, Any]] = []
        for resource, key in sorted(self._by_job.get(job_uid, ())):
            obj = self.objects[resource].get(key)
            if obj is None or _epoch_of(_mapping(_mapping(obj.get("metadata")).get("labels"))) != epoch:
                continue
            if resource == PODS.key:
                pods.append(obj)
            else:
                podgroup = obj
        return podgroup, pods

    def objects_of(self, job_uid: str | None = None) -> list[MemberObject]:
        """Every indexed object (of one job, if given), pods first (delete order)."""
        refs: Iterable[tuple[str, str]]
        if job_uid is None:
            refs = [(r, k) for r, objs in self.objects.items() for k in objs]
        else:
            refs = self._by_job.get(job_uid, ())
        out: list[MemberObject] = []
        for resource, key in refs:
            obj = self.objects.get(resource, {}).get(key)
            if obj is not None:
                out.append(member_object(self.cluster, self._by_key_resource[resource], obj))
        return in_delete_order(out)

    def job_uids(self) -> set[str]:
        return set(self._by_job)


def member_object(cluster: str, resource: ResourceKind, obj: Mapping[str, Any]) -> MemberObject:
    """What the hub needs of one of its member objects (an indexed one or a listed one)."""
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    return MemberObject(
        cluster=cluster, resource=resource, namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        job_uid=str(labels.get(LABEL_JOB_UID) or ""), job_namespace=str(labels.get(LABEL_JOB_NAMESPACE) or ""),
        job_name=str(labels.get(LABEL_JOB_NAME) or ""), epoch=_epoch_of(labels),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def in_delete_order(objects: list[MemberObject]) -> list[MemberObject]:
    """Pods first (a PodGroup outliving its pods is harmless; the reverse leaves pods ungrouped)."""
    objects.sort(key=lambda o: (o.resource.key != PODS.key, o.namespace, o.name))
    return objects


class _ClusterWatch:
    """The reflectors of one cluster's ClusterObjects, over member sync's client."""

    def __init__(self, *, objects: ClusterObjects, client: Any, selector: str, backoff: Backoff,
                 watch_timeout_seconds: tuple[int, int]) -> None:
        self.objects = objects
        self.client = client
        self.tasks: list[asyncio.Task[None]] = []
        self.lost: dict[str, str] = {}
        rng = random.Random()
        self.reflectors = [
            Reflector(client=client, resource=resource, sink=objects, listener=self, backoff=backoff,
                      watch_timeout_seconds=watch_timeout_seconds, rng=rng, label_selector=selector,
                      logger=get_logger("controllers.status_sync.reflector"))
            for resource in objects.resources
        ]

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for reflector in self.reflectors:
            self.tasks.append(loop.create_task(
                self._supervised(reflector), name=f"statussync:{self.objects.cluster}:{reflector.key}"))

    async def _supervised(self, reflector: Reflector) -> None:
        await supervised(reflector.run(), log=_log, event="member object watch failed",
                         cluster=self.objects.cluster, resource=reflector.key)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - logged by _supervised
                pass
        self.tasks.clear()

    # ReflectorListener

    def watch_established(self, resource: str) -> None:
        self.lost.pop(resource, None)

    def watch_lost(self, resource: str, error: MemberClientError) -> None:
        self.lost[resource] = str(error)[:256]

    def relisting(self, resource: str, reason: str) -> None:
        pass


class MemberObjects:
    """Every member cluster's ClusterObjects, following member sync's clusters and clients."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.selector = hub_selector(hub_id(hub))
        self.clusters: dict[str, ClusterObjects] = {}
        self._watches: dict[str, _ClusterWatch] = {}
        self._listeners: list[Callable[[str, set[str]], None]] = []
        s = hub.settings
        self.backoff = Backoff(initial=s.watch.backoff_initial_seconds, maximum=s.watch.backoff_max_seconds)
        self.watch_timeout_seconds = s.member_sync.watch_timeout_seconds

    def subscribe(self, listener: Callable[[str, set[str]], None]) -> None:
        """`listener(cluster, job_uids)` after every batch that touched those jobs' objects."""
        self._listeners.append(listener)

    def _changed(self, cluster: str, job_uids: set[str]) -> None:
        for listener in self._listeners:
            listener(cluster, job_uids)

    def get(self, cluster: str) -> ClusterObjects | None:
        return self.clusters.get(cluster)

    def reachable(self, cluster: str) -> bool:
        """Member sync says the cluster is Ready and our own watches are up."""
        sync = (self.hub.shared.get(MEMBER_SYNCS) or {}).get(cluster)
        health = getattr(sync, "health", None)
        watch = self._watches.get(cluster)
        return bool(getattr(health, "ready", False)) and watch is not None and not watch.lost

    async def refresh(self) -> None:
        """Start, restart (new client or scheduler) and stop per-cluster watches to match member sync."""
        syncs: Mapping[str, Any] = self.hub.shared.get(MEMBER_SYNCS) or {}
        for name in list(self._watches):
            if name not in syncs:
                await self._watches.pop(name).stop()
                gone = self.clusters.pop(name, None)
                if gone is not None and gone.job_uids():
                    self._changed(name, gone.job_uids())
        for name, sync in list(syncs.items()):
            client = getattr(sync, "client", None)
            if client is None:
                continue
            resources = tuple(r for r in getattr(sync, "resources", ()) if r.key != NODES.key)
            watch = self._watches.get(name)
            if watch is not None and watch.client is client and watch.objects.resources == resources:
                continue
            if watch is not None:
                await watch.stop()
            objects = self.clusters.get(name)
            if objects is None or objects.resources != resources:
                objects = ClusterObjects(name, resources, self._changed)
                self.clusters[name] = objects
            watch = _ClusterWatch(objects=objects, client=client, selector=self.selector, backoff=self.backoff,
                                  watch_timeout_seconds=self.watch_timeout_seconds)
            self._watches[name] = watch
            watch.start()
            _log.info("watching this hub's member objects", cluster=name, resources=[r.key for r in resources],
                      selector=self.selector)

    async def stop(self) -> None:
        for watch in self._watches.values():
            await watch.stop()
        self._watches.clear()


# ---------------------------------------------------------------- hub jobs


JobListener = Callable[[str, dict[str, Any] | None], None]


class JobCache:
    """The hub's TrainingJobs by uid, kept by a list+watch (re-list after 410); notifies subscribers."""

    def __init__(self, hub: HubContext) -> None:
        self.hub = hub
        self.rt = hub.kind(JOB_KIND)
        self.jobs: dict[str, dict[str, Any]] = {}
        self._listeners: list[JobListener] = []
        self.synced = asyncio.Event()

    def subscribe(self, listener: JobListener) -> None:
        """`listener(uid, job or None when deleted)` on every change."""
        self._listeners.append(listener)

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.jobs.get(uid)

    def _set(self, job: dict[str, Any]) -> None:
        uid = (job.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid:
            self.jobs[uid] = job
            for listener in self._listeners:
                listener(uid, job)

    def _drop(self, uid: str) -> None:
        if self.jobs.pop(uid, None) is not None:
            for listener in self._listeners:
                listener(uid, None)

    async def _relist(self) -> str:
        listing = await self.hub.storage.list(self.rt)
        present = set()
        for job in listing.items:
            present.add(job["metadata"]["uid"])
            self._set(job)
        for uid in set(self.jobs) - present:
            self._drop(uid)
        self.synced.set()
        return listing.resource_version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._drop(str((obj.get("metadata") or {}).get("uid") or ""))
        elif kind in ("ADDED", "MODIFIED"):
            self._set(obj)

    async def run(self) -> None:
        await watch_hub_kind(self.hub, self.rt, relist=self._relist, apply=self._apply, log=_log)


# ---------------------------------------------------------------- the status computation (pure)


def expected_roles(job: Mapping[str, Any]) -> dict[str, int]:
    """role -> pods the member should hold: the size the gang was placed at (`placed_replicas`: status.replicas,
    else the spec's replicas), as the adapters render it."""
    return placed_replicas(job)


def gang_status(job: Mapping[str, Any], objects: ClusterObjects, adapter: SchedulerAdapter, *,
                epoch: int, expected: Mapping[str, int] | None = None) -> GangStatus:
    uid = str(_mapping(job.get("metadata")).get("uid") or "")
    podgroup, pods = objects.gang(uid, epoch)
    return adapter.read_status(podgroup, pods, expected=expected if expected is not None else expected_roles(job))


def _deleting(job: Mapping[str, Any]) -> bool:
    return bool(_mapping(job.get("metadata")).get("deletionTimestamp"))


def objects_missing(job: Mapping[str, Any], gs: GangStatus) -> bool:
    """The gang's objects are gone from its member after it was admitted (and it has not finished)."""
    phase = (job.get("status") or {}).get("phase")
    current = phase if isinstance(phase, str) and phase in _PHASE_RANK else PHASE_PLACED
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
    old = _mapping(job.get("status"))
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
    return reservations(hub).release_when_bound(job_uid, hub.shared.get(SNAPSHOTS) or {})


# ---------------------------------------------------------------- failed workers (restartPolicy OnFailure)

#: a pod's attempt index and its failures counted toward spec.backoffLimit (the same keys as dispatch.py's)
ANNOTATION_ATTEMPT = "federator.dev/attempt"
ANNOTATION_FAILURES = "federator.dev/counted-failures"
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


def _pod_failure(status: Mapping[str, Any]) -> tuple[str, bool]:
    """(why the pod failed, in kube's words; whether the infrastructure failed rather than the pod): a
    DisruptionTarget=True condition (taint eviction, PodGC, preemption) is the infrastructure, as a
    Kubernetes Job's podFailurePolicy reads it; anything else (a container's Error) is the workload's."""
    infra = any(isinstance(c, Mapping) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    parts = [str(status[k]) for k in ("reason", "message") if isinstance(status.get(k), str) and status[k]]
    for cs in status.get("containerStatuses") or ():
        term = _mapping(_mapping(_mapping(cs).get("state")).get("terminated"))
        if term:
            parts.append(f"container {_mapping(cs).get('name')} terminated: {term.get('reason') or 'Error'} "
                         f"(exit code {term.get('exitCode')}){': ' + str(term['message']) if term.get('message') else ''}")
    return "; ".join(parts)[:512] or "Failed", infra


def restart_plan(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, admitted: bool,
                 expected: Mapping[str, int] | None = None) -> RestartPlan | None:
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
    current placement: a gang placed again (another epoch) starts from 0, as its pods do."""
    spec = _mapping(job.get("spec"))
    roles = {str(r.get("name")): r for r in spec.get("roles") or () if isinstance(r, Mapping)}
    restartable = {name for name, r in roles.items() if r.get("restartPolicy") == "OnFailure"}
    shrinkable = {name for name, r in roles.items() if r.get("onWorkerLoss") == "shrink"}
    if not restartable and not shrinkable:
        return None
    raw_limit = spec.get("backoffLimit")
    limit = raw_limit if isinstance(raw_limit, int) and raw_limit >= 0 else DEFAULT_BACKOFF_LIMIT
    job_name = str(_mapping(job.get("metadata")).get("name") or "")
    job_uid = str(_mapping(job.get("metadata")).get("uid") or "")
    before = dict(expected) if expected is not None else placed_replicas(job)
    sizes = dict(before)
    counted = 0
    taken: set[str] = set()
    alive: dict[str, set[str]] = {}
    failed: list[tuple[str, str, str, Mapping[str, Any]]] = []
    for pod in sorted(pods, key=lambda p: str(_mapping(p.get("metadata")).get("name") or "")):
        meta = _mapping(pod.get("metadata"))
        name = str(meta.get("name") or "")
        taken.add(name)
        counted += _int_annotation(_mapping(meta.get("annotations")), ANNOTATION_FAILURES)
        role = str(_mapping(meta.get("labels")).get(LABEL_ROLE) or "")
        if meta.get("deletionTimestamp"):
            continue
        alive.setdefault(role, set()).add(name)
        if role in restartable | shrinkable and _mapping(pod.get("status")).get("phase") == "Failed":
            failed.append((name, str(meta.get("uid") or ""), role, pod))
    recreate: dict[str, Mapping[str, str]] = {}
    delete: dict[str, str] = {}
    reasons: list[str] = []
    #: shrunk pod name -> the attempt its name gets if a lower index is created again under it
    dropped: dict[str, int] = {}
    for name, uid, role, pod in failed:
        meta = _mapping(pod.get("metadata"))
        annotations = _mapping(meta.get("annotations"))
        why, infra = _pod_failure(_mapping(pod.get("status")))
        attempt = _int_annotation(annotations, ANNOTATION_ATTEMPT)
        labels = _mapping(meta.get("labels"))
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
        reasons.append(f"{where} [{'infrastructure, not counted' if infra else 'counted'}]")
        delete[name] = uid
        recreate[name] = {ANNOTATION_ATTEMPT: str(attempt + 1), ANNOTATION_FAILURES: str(own)}
    for role in sorted(r for r in shrinkable if sizes.get(r, 0) < before.get(r, 0)):
        # Each role keeps its indices 0..n-1 (the placement controller's shrink removes the highest, and its
        # elastic pass converges to that): a lost worker below the top leaves its index to the top pod.
        for pod in pods:
            meta = _mapping(pod.get("metadata"))
            name, labels = str(meta.get("name") or ""), _mapping(meta.get("labels"))
            index = _int_annotation(labels, LABEL_INDEX) if str(labels.get(LABEL_INDEX) or "").isdigit() else -1
            if labels.get(LABEL_ROLE) == role and name in alive.get(role, ()) and index >= sizes[role]:
                delete[name] = str(meta.get("uid") or "")
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

    def __init__(self, hub: HubContext, *, objects: MemberObjects, jobs: JobCache) -> None:
        self.hub = hub
        self.objects = objects
        self.jobs = jobs
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
        #: dispatches whose Dispatched record this loop writes with the gang's next status
        self.records = dispatch_records(hub)
        objects.subscribe(lambda _cluster, uids: self.work.mark(uids))
        jobs.subscribe(self._job_changed)
        self.records.subscribe(self._dispatched)

    def _dispatched(self, uid: str) -> None:
        self.work.mark((uid,))

    def close(self) -> None:
        """Stop consuming dispatch records (dispatch writes them itself again)."""
        self.records.unsubscribe(self._dispatched)

    def _job_changed(self, uid: str, job: dict[str, Any] | None) -> None:
        """A job change needs a reconcile only when its phase or placement moved; a write that changed
        only other status fields (this loop's own counts, dispatch's Dispatched record) does not (the
        member's changes and the periodic pass still reach it)."""
        if job is None:
            self._job_views.pop(uid, None)
            self._shrunk.pop(uid, None)
            self.records.forget(uid)
            return
        view = ((job.get("status") or {}).get("phase"), *current_placement(job))
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
                             if (job.get("status") or {}).get("phase") in ACTIVE_PHASES)
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
        lease = getattr((self.hub.shared.get(MEMBER_SYNCS) or {}).get(cluster), "lease", None)
        if lease is None:
            return False
        placed = placed_at(job, epoch=epoch)
        verdict: bool | None = lease.fence_verdict(placed=placed if placed is not None else 0.0,
                                                   missing_since=missing_since)
        if verdict is None and now - missing_since > FENCE_VERDICT_PATIENCE_SECONDS:
            return False  # no renewal got through for that long: judge on what the member shows
        return verdict

    async def _requeue_fenced(self, job: Mapping[str, Any], *, cluster: str, epoch: int, now: float) -> None:
        """The agent killed the gang while the hub was cut off (and the hub did not move it): back to the
        queue, not Failed: the job did nothing wrong."""
        ref = job_ref(job)
        message = (f"the fence agent in cluster {cluster} deleted the gang while this hub was out of contact "
                   f"(its lease there expired); the gang is placed again at epoch {epoch + 1}")

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) or _deleting(fresh):
                return None
            status = fresh["status"]
            append_history(status, history_entry("Fenced", cluster=cluster, epoch=epoch, message=message, now=now))
            requeue(status, reason="Fenced", message=message, now=now, job=ref.key, count=False)
            return fresh

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                         uid=ref.uid)
        self._missing_since.pop(ref.uid, None)
        if stored is not None:
            self.hub.events.record(stored, controller="status-sync", reason="Requeued", action="Requeue",
                                   warning=True, message=message)
            reservations(self.hub).forget(ref.uid)
            self.hub.metrics.job_requeues.labels(reason="Fenced").inc()
            _log.warning("gang killed by the member's fence agent; requeued", job=ref.key, cluster=cluster,
                         epoch=epoch)

    async def _restart(self, job: Mapping[str, Any], plan: RestartPlan, *, cluster: str, epoch: int,
                       now: float) -> None:
        """Delete the gang's failed pods and create them again (`restart_plan`); a history entry
        PodRestarted says which, why and how many failures count toward spec.backoffLimit."""
        ref = job_ref(job)
        dispatcher = self.hub.shared.get(DISPATCHER)
        client = member_client(self.hub, cluster)
        if dispatcher is None or client is None:
            self.work.retry(ref.uid)
            return
        if plan.sizes_after != plan.sizes_before:
            stored = await self._shrink(job, plan, cluster=cluster, epoch=epoch, now=now)
            if stored is None:
                self.work.retry(ref.uid)
                return
            job = stored  # the pods created again are rendered at the new size
        try:
            for name, pod_uid in plan.delete.items():
                try:
                    await client.delete(PODS, namespace=ref.namespace, name=name, grace_period_seconds=0,
                                        precondition_uid=pod_uid or None)
                except MemberApiError as e:
                    if e.code not in (404, 409):
                        raise
            created = await dispatcher.recreate_pods(job, cluster=cluster, epoch=epoch, pods=plan.recreate) \
                if plan.recreate else 0
        except (MemberClientError, DispatchError) as e:
            _log.warning("could not restart the gang's failed pods; will retry", job=ref.key, cluster=cluster,
                         error=str(e))
            self.work.retry(ref.uid)
            return
        if plan.sizes_after != plan.sizes_before or (
                not created and not any(name in plan.recreate for name in plan.delete)):
            return  # a shrink (its Resized entry says it all), or missing pods already back
        limit = _mapping(job.get("spec")).get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        message = (f"pods created again in cluster {cluster} (epoch {epoch}): "
                   f"{', '.join(sorted(plan.recreate))}; {plan.counted} of spec.backoffLimit {limit} failures "
                   f"counted" + (": " + "; ".join(plan.reasons) if plan.reasons else " (missing pods)"))
        _log.info("restarted the gang's failed pods", job=ref.key, cluster=cluster, epoch=epoch,
                  pods=sorted(plan.recreate), counted=plan.counted)

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            if phase_of(fresh) not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) \
                    or _deleting(fresh):
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
                    or _deleting(fresh) or placed_replicas(fresh) != dict(plan.sizes_before):
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

    async def reconcile(self, uid: str) -> None:
        self.awaiting_release.discard(uid)
        job = self.jobs.get(uid)
        if job is None:
            return
        phase = (job.get("status") or {}).get("phase")
        cluster, epoch = current_placement(job)
        if phase not in ACTIVE_PHASES or cluster is None or uid in (self.hub.shared.get(PULLING_BACK) or ()) \
                or _deleting(job):
            # A job being deleted loses its member objects on purpose (cleanup.py): that is no failure, and
            # what the member shows no longer changes what the job is (its Terminating condition says it).
            self._missing_since.pop(uid, None)
            return
        now = time.time()
        # A dispatch of this (cluster, epoch) not in the job's status yet goes into this write (or one of
        # its own); one of another epoch waits (the cache may lag the write-ahead) or expires.
        record = self.records.get(uid, now=now)
        if record is not None and (record.cluster, record.epoch) != (cluster, epoch):
            record = None
        gs: GangStatus | None = None
        watched = self._watched(cluster)
        if watched is not None:
            objects, adapter = watched
            shrunk = self._shrunk.get(uid)
            if shrunk is not None and (shrunk[:2] != (cluster, epoch) or placed_replicas(job) == shrunk[2]):
                shrunk = None  # the job cache caught up with our own shrink (or the job moved on)
                self._shrunk.pop(uid, None)
            sizes = shrunk[2] if shrunk is not None else None
            gs = gang_status(job, objects, adapter, epoch=epoch, expected=sizes)
            plan = restart_plan(job, objects.gang(uid, epoch)[1], expected=sizes,
                                admitted=_PHASE_RANK.get(str(phase), 0) >= _PHASE_RANK[PHASE_ADMITTED])
            if plan is not None and plan.exceeded:
                gs = dataclasses.replace(gs, phase=GangPhase.FAILED, reason="BackoffLimitExceeded", message=(
                    f"{plan.counted} pod failures counted, more than spec.backoffLimit "
                    f"{_mapping(job.get('spec')).get('backoffLimit', DEFAULT_BACKOFF_LIMIT)}: "
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
            if synced_status(job, gs, adapter=adapter, cluster=cluster, epoch=epoch, now=now, quiet=True) is None:
                gs = None  # the member shows nothing new
            elif missing:
                verdict = self._fence_verdict(uid, job, cluster=cluster, epoch=epoch, now=now)
                if verdict is None:
                    self.work.retry(uid)  # the next renewal of the fencing lease says whether its agent did it
                    return
                if verdict:
                    await self._requeue_fenced(job, cluster=cluster, epoch=epoch, now=now)
                    return
        if gs is None and record is None:
            return
        ref = job_ref(job)

        def mutate(fresh: dict[str, Any]) -> dict[str, Any] | None:
            fresh_phase = (fresh.get("status") or {}).get("phase")
            if fresh_phase not in ACTIVE_PHASES or current_placement(fresh) != (cluster, epoch) or _deleting(fresh):
                return None  # the job moved on (requeued, another epoch, deleted) since we looked
            changed = record is not None and apply_dispatch_record(fresh["status"], record)
            if gs is not None and watched is not None:
                new = synced_status(fresh, gs, adapter=watched[1], cluster=cluster, epoch=epoch, now=now)
                if new is not None:
                    fresh["status"] = new
                    changed = True
            return fresh if changed else None

        stored = await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=uid)
        if record is not None:
            self.records.done(uid, record)  # written, already there, or its job moved on
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
    """cleanup_ctx-style factory: member object watches, the job cache and the status loop."""
    objects = MemberObjects(hub)
    jobs = JobCache(hub)
    controller = StatusSync(hub, objects=objects, jobs=jobs)
    hub.shared[MEMBER_OBJECTS] = objects
    hub.shared[JOB_CACHE] = jobs
    loop = asyncio.get_running_loop()
    tasks = [
        loop.create_task(_supervised("jobs", jobs.run()), name="statussync:jobs"),
        loop.create_task(_supervised("status", controller.run()), name="statussync:status"),
    ]
    try:
        yield
    finally:
        controller.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - logged by _supervised
                pass
        await objects.stop()
        hub.shared.pop(MEMBER_OBJECTS, None)
        hub.shared.pop(JOB_CACHE, None)


async def _supervised(what: str, coro: Any) -> None:
    await supervised(coro, log=_log, event="status sync loop failed", loop=what)
