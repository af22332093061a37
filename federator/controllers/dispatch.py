"""Dispatch: turn a recorded placement decision into member objects, idempotently.

Dispatch is the only code of the hub that creates or deletes member objects
(docs/architecture.md): besides a decision's gang it deletes what other
controllers ask it to (`delete_objects`: the GC's orphans, a deleted job's
objects, a stuck gang's pull-back; `delete_previous`: a moved gang's old copy)
and restarts failed workers for status sync (`restart_pods`). It is the only
writer of the Dispatched condition.

`Dispatcher.dispatch(job, cluster=..., epoch=...)` takes a TrainingJob whose
status already holds the decision (phase Placed, placement.cluster and
placement.epoch written BEFORE this runs: the write-ahead rule), renders it
with the cluster's delegation adapter (PodGroup first, then the pods; labels
carry the job uid, role, index, epoch and this hub's id; GPU pods pinned to
the `nvidia.com/gpu.product` values of the GPU model of the nodes placement
assigned them, read from the cluster's snapshot), makes sure the member
namespace exists and, for a job with a priority, the member PriorityClass its
pods name (`delegation.member_priority_class`; created if missing, never
changed; a member that refuses with 403 gets the pods without a class), waits for the cluster's epoch fence (a cluster back
in contact gets a GC pass that deletes older epochs' objects first:
`EpochFence.pending`, raised by cleanup.py's GC) and for its fence agent to be known idle (the hub's
lease there: `MemberLease.fence_may_be_up`; an agent whose view of the lease
is still expired deletes whatever arrives), and creates each object through
the MemberClient that member sync holds for the cluster (`MemberClusters`). An object that
already exists with the same job uid and epoch counts as created, so a
re-dispatch after a crash creates nothing twice; a pod of an *older* epoch of the same job blocks its
name (pod names are a per-cluster lock across epochs) and is deleted first,
then the create is retried for a while. A gang moved by a drain
(status.placement.previous) starts only once its previous copy is gone
from its old cluster (`wait_for_previous`).

A failed dispatch (member unreachable, a 4xx/5xx, a foreign object in the
way) deletes what this epoch created (best effort; leftovers are orphans the
GC removes), forgets the gang's reservation (idempotent) and requeues the job
with capped exponential backoff and jitter (`RetryBook`): status back to
Pending with a history entry saying what failed and how long it waits.

The hub builds one Dispatcher per term (hub/app.py `build_pipeline`, handed the
member syncs, the member object index, the epoch fence, the reservation book
and the dispatches in flight) and hands it to placement, status sync, stuck
gangs, drain and cleanup (`hub.parts.dispatcher`). `job_dispatch(hub)` is its
controller factory: on start (the hub just gained the leadership) it
re-dispatches every job in phase Placed in a named task: the crash-recovery
path. It must run after member_sync and before job_placement in
hub_controllers().

Test-only crash hook: when the environment variable FEDERATOR_TEST_CRASH_AT
is `after-eviction` (placement.py, after a preemption's victims are evicted
and before the preemptor's decision is written), `after-decision`
(placement.py, after the decision is written and before dispatch),
`mid-dispatch` (after about half of a job's objects exist) or
`after-dispatch` (after every object exists, before the Dispatched status
write), the process kills itself with SIGKILL at that point, once; with
FEDERATOR_TEST_CRASH_JOB=namespace/name only for that job. Unset, it is
inert (one dict lookup).

Must never: create a member object before the decision is in the job's
status, delete an object that is not this job's (uid, hub) or is of a newer
epoch, or log credentials (MemberClient errors never carry them).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from federator.apis.checkpoint import latest_report, restore_from, save_grace_seconds, supersedes
from federator.apis.trainingjob import placed_replicas
from federator.apis.views import Body
from federator.apiserver.errors import ApiError
from federator.apis.jobkinds import SOURCE_KIND_ANNOTATION, JobKind, job_kind_by_source
from federator.clusters.client import (
    MEMBER_WRITE_WHY,
    member_write_reason,
    JOB_KIND_KEYS,
    JOB_KIND_RESOURCES,
    PODS,
    MemberApiError,
    MemberClientError,
    ResourceKind,
)

from federator.controllers.context import HubContext
from federator.controllers.loops import background_loop
from federator.controllers.jobs import (
    DispatchError,
    JOB_KIND,
    ACTIVE_PHASES,
    PHASE_FAILED,
    PHASE_PLACED,
    DispatchRecord,
    InFlight,
    ReservationLedger,
    append_history,
    apply_dispatch_record,
    cluster_scheduler,
    current_placement,
    excluded_nodes,
    history_entry,
    hub_id,
    job_ref,
    phase_of,
    requeue,
    set_condition,
    set_phase,
    update_job_status,
)
from federator.controllers.membercluster import MemberClusters
from federator.controllers.memberobjects import MemberObject as IndexedObject
from federator.controllers.memberobjects import MemberObjects, member_object
from federator.clusters.snapshot_builder import GPU_PRODUCT_LABEL
from federator.delegation import (
    MemberObject,
    Ownership,
    RenderError,
    SchedulerAdapter,
    adapter_for,
    gpu_node_labels,
    is_system_priority_class,
    member_priority_class,
    hub_selector,
    ownership_of,
    selector_for,
)
from federator.delegation.adapter import CONFIG_MAP_GVK, HOSTNAME_LABEL, LABEL_INDEX, LABEL_ROLE, SERVICE_GVK, Gvk
from federator.delegation.membercopy import member_copy, resize_patch, resized_to, resume_patch, suspended
from federator.obs import get_logger
from federator.placement.decision import PodAssignment
from federator.store.protocol import StoreError

if TYPE_CHECKING:
    from federator.controllers.pipeline import EpochFence

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_FAILURES",
    "CRASH_ENV",
    "CRASH_JOB_ENV",
    "NAMESPACES",
    "DeleteOutcome",
    "DispatchResult",
    "Dispatcher",
    "delete_member_objects",
    "RetryBook",
    "crash_point",
    "job_dispatch",
]

_log = get_logger("controllers.dispatch")

CRASH_ENV = "FEDERATOR_TEST_CRASH_AT"
CRASH_JOB_ENV = "FEDERATOR_TEST_CRASH_JOB"
CRASH_POINTS = frozenset({"after-eviction", "after-decision", "mid-dispatch", "after-dispatch"})
NAMESPACES = ResourceKind(group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False)

#: how long a create waits for a same-named pod of an older epoch to disappear
_STALE_WAIT_SECONDS = 10.0
#: a pod's attempt index (also env FEDERATOR_ATTEMPT) and its failures counted toward spec.backoffLimit
#: (status_sync.restart_plan decides them; `restart_pods` writes them)
ANNOTATION_ATTEMPT = "federator.dev/attempt"
ANNOTATION_FAILURES = "federator.dev/counted-failures"


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _writes_for(why: str) -> Callable[[Callable[_P, Coroutine[Any, Any, _R]]], Callable[_P, Coroutine[Any, Any, _R]]]:
    """The member writes of the decorated method are audited with reason `why`, unless its caller named one
    (suspend, drain, ...: `member_write_reason`)."""

    def decorate(method: Callable[_P, Coroutine[Any, Any, _R]]) -> Callable[_P, Coroutine[Any, Any, _R]]:
        @functools.wraps(method)
        async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with member_write_reason(why, keep=True):
                return await method(*args, **kwargs)

        return wrapper

    return decorate


def crash_point(point: str, *, job: str) -> None:
    """Test-only: SIGKILL this process at `point` when FEDERATOR_TEST_CRASH_AT says so (see module doc)."""
    wanted = os.environ.get(CRASH_ENV)
    if wanted is None or wanted != point:
        return
    only = os.environ.get(CRASH_JOB_ENV)
    if only and only != job:
        return
    _log.warning("test crash hook: killing the hub", point=point, job=job)
    os.kill(os.getpid(), signal.SIGKILL)


def _resource_of(gvk: Gvk) -> ResourceKind:
    if gvk.group == "" and gvk.plural == "pods":
        return PODS
    return ResourceKind(group=gvk.group, version=gvk.version, plural=gvk.plural, kind=gvk.kind,
                        namespaced=gvk.namespaced)


@dataclass(frozen=True, slots=True)
class DispatchResult:
    ok: bool
    cluster: str
    epoch: int
    created: int = 0
    existing: int = 0
    error: str = ""
    #: False when retrying cannot help (the job cannot be rendered); the job is failed instead
    retryable: bool = True
    #: the dispatch was skipped because the job moved on (another epoch, deleted, no longer Placed)
    outdated: bool = False


@dataclass
class DeleteOutcome:
    requested: int = 0
    already_gone: int = 0
    failed: list[str] = field(default_factory=list)


async def delete_member_objects(client: Any, objects: Sequence[IndexedObject], *, cluster: str,
                                hub_id: str | None = None, pod_grace_seconds: int | None = None) -> DeleteOutcome:
    """Delete `objects` from one member (pods first, as given), each guarded by its uid: a 404 or a
    failed uid precondition (409: a newer object of that name) counts as already gone. Objects
    already terminating are left to finish. (`Dispatcher.delete_objects` is the way in for the other
    controllers; placement's own evictions still call this directly until they move into dispatch.)
    With `hub_id`, `objects` are whole gangs: each gang's Service and ConfigMaps (which no watch indexes)
    go too (`delete_gang_companions`); a shrink's few pods pass none. `pod_grace_seconds` (an evicted copy's
    spec.checkpoint.saveGraceSeconds) is the pods' deleteOptions.gracePeriodSeconds: SIGTERM, then SIGKILL
    after it; None leaves each pod's own terminationGracePeriodSeconds."""
    if hub_id is not None:
        await delete_gang_companions(client, objects, hub_id=hub_id, cluster=cluster)
    outcome = DeleteOutcome()
    forbidden = 0
    for obj in objects:
        if obj.deleting:
            continue
        try:
            await client.delete(obj.resource, namespace=obj.namespace or None, name=obj.name,
                                precondition_uid=obj.uid or None,
                                grace_period_seconds=pod_grace_seconds if obj.resource.key == PODS.key else None,
                                propagation_policy="Background" if obj.resource.key in JOB_KIND_KEYS else None)
            outcome.requested += 1
        except MemberApiError as e:
            if e.code in (404, 409):
                outcome.already_gone += 1
            else:
                forbidden += e.code == 403
                outcome.failed.append(f"{obj.resource.key} {obj.namespace}/{obj.name}: {e.code} {e.reason}: "
                                      f"{e.message[:300]}")
        except MemberClientError as e:
            outcome.failed.append(f"{obj.resource.key} {obj.namespace}/{obj.name}: {e}")
    if forbidden:
        # the member will refuse again until its RBAC changes: say so, not just "will retry" (the `error`
        # field makes the log throttle summarise the repeats)
        _log.warning("the member's RBAC does not let the hub delete its objects there; will retry (grant the hub's "
                     "identity delete on them: deploy/member)", cluster=cluster, forbidden=forbidden,
                     failed=len(outcome.failed), error=outcome.failed[0][:512])
    elif outcome.failed:
        _log.warning("some member objects could not be deleted; will retry", cluster=cluster,
                     failed=len(outcome.failed), error=outcome.failed[0][:512])
    return outcome


#: the member objects of a gang besides its pods and PodGroup (delegation: network identity, framework files)
GANG_COMPANIONS = (SERVICE_GVK, CONFIG_MAP_GVK)
GANG_COMPANION_KINDS = tuple(_resource_of(gvk) for gvk in GANG_COMPANIONS)


async def delete_gang_companions(client: Any, objects: Sequence[IndexedObject], *, hub_id: str, cluster: str) -> int:
    """Delete the headless Service and the ConfigMaps of every gang (namespace, job uid, epoch) that `objects`
    belong to: listed by the gang's labels (this hub's, that job's, that epoch's), each delete guarded by its
    uid. Best effort: what fails is logged, and the fence agent or the next deletion of the gang takes it.
    How many deletes were requested."""
    gangs = sorted({(o.namespace, o.job_uid, o.epoch) for o in objects
                    if o.namespace and o.job_uid and o.epoch is not None})
    requested = 0
    for namespace, job_uid, epoch in gangs:
        try:
            selector = f"{hub_selector(hub_id)},{selector_for(job_uid, epoch)}"
        except RenderError:
            continue
        for gvk in GANG_COMPANIONS:
            resource = _resource_of(gvk)
            try:
                listing = await client.list(resource, namespace=namespace, label_selector=selector)
                for item in listing.items:
                    meta = Body(item)
                    if meta.deleting:
                        continue
                    try:
                        await client.delete(resource, namespace=namespace, name=meta.name,
                                            precondition_uid=meta.uid or None)
                        requested += 1
                    except MemberApiError as e:
                        if e.code not in (404, 409):
                            raise
            except MemberClientError as e:
                _log.warning("could not delete a gang's companion objects; the fence agent or the gang's next "
                             "deletion takes them", cluster=cluster, resource=resource.key, namespace=namespace,
                             job_uid=job_uid, epoch=epoch, error=str(e)[:512])
    return requested


class RetryBook:
    """Capped exponential backoff with full jitter per job uid, for requeued dispatches."""

    def __init__(self, *, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self._rng = rng or random.Random()
        self._attempts: dict[str, int] = {}
        self._not_before: dict[str, float] = {}

    def failed(self, uid: str, *, now: float) -> float:
        """Record a failure; the delay before the job may be placed again."""
        attempt = self._attempts.get(uid, 0)
        self._attempts[uid] = attempt + 1
        cap = min(self.maximum, self.initial * float(2 ** min(attempt, 30)))
        delay = cap / 2 + self._rng.random() * cap / 2
        self._not_before[uid] = now + delay
        return delay

    def succeeded(self, uid: str) -> None:
        self._attempts.pop(uid, None)
        self._not_before.pop(uid, None)

    def not_before(self, uid: str) -> float:
        return self._not_before.get(uid, 0.0)

    def attempts(self, uid: str) -> int:
        return self._attempts.get(uid, 0)

    def forget(self, uid: str) -> None:
        self.succeeded(uid)


@dataclass(frozen=True, slots=True)
class _Operated:
    """A gang dispatched in operator mode: the kind, its source object as stored, and where its pod templates are
    (the translation's role paths)."""

    kind: JobKind
    source: Mapping[str, Any]
    role_paths: Mapping[str, str]


def _source_owner(job: Mapping[str, Any], kind: JobKind) -> Mapping[str, Any] | None:
    """The twin's controller reference to its source object of `kind` (None: not a twin of that kind)."""
    return next((r for r in Body(job).metadata.get("ownerReferences") or ()
                 if isinstance(r, Mapping) and r.get("controller") is True and r.get("kind") == kind.kind
                 and r.get("apiVersion") == kind.api_version), None)


def _operator_objects(adapter: SchedulerAdapter, job: Mapping[str, Any], operated: _Operated, *,
                      scheduler_name: str, epoch: int, hub_id: str, namespace: str,
                      priority_class_name: str | None) -> list[MemberObject]:
    """The PodGroup (if the scheduler has one) and the member copy of the source object, in creation order."""
    gang = adapter.render_operator_gang(job, cluster_scheduler_name=scheduler_name, epoch=epoch, hub_id=hub_id,
                                        namespace=namespace, priority_class_name=priority_class_name)
    body = member_copy(operated.kind, operated.source, gang, role_paths=operated.role_paths,
                       replicas=placed_replicas(job))
    resource = JOB_KIND_RESOURCES[operated.kind.source_key]
    copy = MemberObject(gvk=Gvk(group=resource.group, version=resource.version, kind=resource.kind,
                                plural=resource.plural), namespace=namespace, name=Body(body).name, body=body)
    return [gang.podgroup, copy] if gang.podgroup is not None else [copy]


class Dispatcher:
    """See the module docstring."""

    def __init__(self, hub: HubContext, *, members: MemberClusters, objects: MemberObjects, fence: EpochFence,
                 reservations: ReservationLedger, in_flight: InFlight,
                 on_requeued: Callable[[float], None] | None = None) -> None:
        self.hub = hub
        self.members = members
        self.objects = objects
        self.fence = fence
        self.reservations = reservations
        self.in_flight = in_flight
        knobs = hub.settings.dispatch
        self.retries = RetryBook(initial=knobs.backoff_initial_seconds, maximum=knobs.backoff_max_seconds)
        self.concurrency = knobs.object_concurrency
        self.client_wait_seconds = knobs.client_wait_seconds
        #: how long a dispatch waits for a returning cluster's epoch fence before it fails (and requeues)
        self.fence_wait_seconds = knobs.fence_wait_seconds
        #: called with the requeue delay after a failed dispatch (placement wakes up then)
        self.on_requeued = on_requeued
        self._namespaces: dict[str, set[str]] = {}
        #: (cluster, PriorityClass) the member refused to create: said once in the log
        self._priority_refused: set[tuple[str, str]] = set()
        #: clusters whose gang scheduler joins pods by a pod field the operators' CRDs drop: said once in the log
        self._rendered_for_gang_field: set[str] = set()
        self._hub_id = hub_id(hub)
        self._recovering: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the dispatch

    @_writes_for("place")
    async def dispatch(
        self, job: Mapping[str, Any], *, cluster: str, epoch: int, assignment: Sequence[PodAssignment] = (),
        wait_for_client: float = 0.0, decision_stored: bool = False,
    ) -> DispatchResult:
        """Create `job`'s member objects for (cluster, epoch); on failure clean up, forget and requeue.

        Unless `decision_stored` (the caller holds the object its own write-ahead just stored), the
        stored job is read first and must still hold this decision; it is read again in any case right
        before the first create, after the waits for the cluster's fences, and a changed decision (another
        cluster or epoch, the job deleted) stops the dispatch there. The job is in
        the dispatches in flight until this returns."""
        uid = job_ref(job).uid
        inflight = self.in_flight
        inflight.begin(uid)
        try:
            return await self._dispatch(job, cluster=cluster, epoch=epoch, assignment=assignment,
                                        wait_for_client=wait_for_client, decision_stored=decision_stored)
        finally:
            inflight.end(uid)

    async def _dispatch(
        self, job: Mapping[str, Any], *, cluster: str, epoch: int, assignment: Sequence[PodAssignment],
        wait_for_client: float, decision_stored: bool,
    ) -> DispatchResult:
        ref = job_ref(job)
        started = time.monotonic()
        metrics = self.hub.metrics
        try:
            if not decision_stored:
                await self._check_current(ref, cluster=cluster, epoch=epoch)
            created, existing, mode = await self._create_all(
                job, cluster=cluster, epoch=epoch, assignment=assignment, wait_for_client=wait_for_client,
                decision_stored=decision_stored)
        except DispatchError as e:
            if e.outdated:
                _log.info("dispatch skipped: the job moved on", job=ref.key, cluster=cluster, epoch=epoch,
                          reason=str(e))
                if e.superseded:
                    # whatever this outdated dispatch made is of a superseded epoch: take it away again
                    await self._cleanup_epoch(job, cluster=cluster, epoch=epoch)  # the GC takes what it misses
                return DispatchResult(ok=False, cluster=cluster, epoch=epoch, error=str(e), outdated=True)
            metrics.dispatches.labels(cluster=cluster, result="failed").inc()
            await self._failed(job, cluster=cluster, epoch=epoch, error=str(e), retryable=e.retryable)
            return DispatchResult(ok=False, cluster=cluster, epoch=epoch, error=str(e), retryable=e.retryable)
        metrics.dispatches.labels(cluster=cluster, result="ok").inc()
        metrics.dispatch_seconds.labels(cluster=cluster).observe(time.monotonic() - started)
        crash_point("after-dispatch", job=ref.key)
        self.retries.succeeded(ref.uid)
        await self._record_dispatched(job, cluster=cluster, epoch=epoch, created=created, existing=existing,
                                      mode=mode)
        return DispatchResult(ok=True, cluster=cluster, epoch=epoch, created=created, existing=existing)

    async def _stored(self, ref: Any) -> Mapping[str, Any]:
        """The job as stored now (not the caller's copy); DispatchError (superseded) when it is gone or was
        re-created under its name."""
        try:
            stored = await self.hub.storage.get(self.hub.kind(JOB_KIND), namespace=ref.namespace, name=ref.name)
        except ApiError as e:
            if e.code == 404:
                raise DispatchError("the job no longer exists", superseded=True) from None
            raise DispatchError(f"reading the job from the hub store: {e}") from None
        except StoreError as e:
            raise DispatchError(f"reading the job from the hub store: {e}") from None
        if Body(stored).uid != ref.uid:
            raise DispatchError("the job was re-created", superseded=True)
        return stored

    async def _check_current(self, ref: Any, *, cluster: str, epoch: int) -> None:
        """The stored job must still hold this decision (phase Placed at (cluster, epoch)): the write-ahead
        rule, checked against the store rather than the caller's copy."""
        stored = await self._stored(ref)
        now_cluster, now_epoch = current_placement(stored)
        if (now_cluster, now_epoch) != (cluster, epoch):
            raise DispatchError(f"the job is now {phase_of(stored)} at cluster {now_cluster} epoch {now_epoch}",
                                superseded=True)
        if phase_of(stored) != PHASE_PLACED:
            # same decision, further on (Admitted, Running, ...): its objects exist; nothing to do or undo
            raise DispatchError(f"the job is already {phase_of(stored)} at this epoch", outdated=True)

    async def _client(self, cluster: str, *, wait: float) -> Any:
        deadline = time.monotonic() + wait
        delay = 0.05
        while True:
            client = self.members.client(cluster)
            if client is not None:
                return client
            if time.monotonic() >= deadline:
                raise DispatchError(f"cluster {cluster} has no connected member client (not registered, or its "
                                    f"connection cannot be built)")
            _log.info("dispatch waiting for the member client", cluster=cluster, waiting_for="member sync to connect",
                      delay_s=round(delay, 3))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def agent_may_fence(self, cluster: str) -> bool:
        """The hub's lease in `cluster` says that the member's fence agent may be deleting this hub's objects
        there now (`MemberLease.fence_may_be_up`: renewals lapsed, or the agent fenced and has not said that
        it saw them resume). False without a lease (leases off)."""
        lease = self.members.lease(cluster)
        return lease is not None and bool(lease.fence_may_be_up())

    async def wait_for_fence(self, cluster: str, *, wait: float) -> None:
        """Return once both fences of `cluster` let a new copy in; DispatchError (retryable) after `wait`
        seconds (the job is requeued and placed again, maybe elsewhere):

        - the epoch fence holds (`EpochFence.holds`: since the hub last regained contact with it, a GC
          pass deleted every older epoch's object there), so that a newer epoch never starts beside an
          older copy. Only a cluster in contact is waited for (`EpochFence.pending`: its GC pass is due
          within a tick). One out of contact is not: the creates then fail with the member's own error and
          the job is requeued, or, if they get through, the pod names (one per job, role and index, across
          epochs) still keep an older epoch's pod and a newer one from running side by side;
        - the member's fence agent is not fencing (`agent_may_fence`): a cluster back from a partition
          longer than the lease has an agent that deletes everything of this hub until it sees a renewal,
          and says on the Lease when it did; a gang created before then would be killed (seed 2061632721
          of the chaos suite: a requeued gang placed straight back into the cluster it was lost from)."""
        epoch_fence, agent = self.fence.pending(cluster), self.agent_may_fence(cluster)
        if not (epoch_fence or agent):
            return
        deadline = time.monotonic() + wait
        delay = 0.05
        while epoch_fence or agent:
            if time.monotonic() >= deadline:
                if epoch_fence:
                    raise DispatchError(f"cluster {cluster}: the epoch fence does not hold yet (the GC pass that "
                                        f"deletes older epochs after a loss of contact has not completed)")
                raise DispatchError(f"cluster {cluster}: its fence agent may still be deleting this hub's objects "
                                    f"(no renewal of the hub's lease there answered since it lapsed, or the last "
                                    f"answer shows the agent's fence not lifted)")
            if epoch_fence:
                _log.info("dispatch waiting for the epoch fence", cluster=cluster, delay_s=round(delay, 3),
                          waiting_for="the GC pass that deletes older epochs' objects in a returning cluster")
            else:
                _log.info("dispatch waiting for the member's fence agent", cluster=cluster, delay_s=round(delay, 3),
                          waiting_for="a renewal of the hub's lease whose answer shows the agent's fence lifted")
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
            epoch_fence, agent = self.fence.pending(cluster), self.agent_may_fence(cluster)

    def _previous_copy(self, job: Mapping[str, Any], *, cluster: str) -> tuple[str, int, list[Any]] | None:
        """(cluster, epoch, objects still there) of a moved gang's previous copy (status.placement.previous,
        written by a drain or by a failed dispatch that could not clean up), or None when there is none to
        wait for: gone from the member's object index, or fenced by the hub's lease there."""
        previous = (Body(job).status.get("placement") or {}).get("previous")
        if not isinstance(previous, Mapping):
            return None
        old_cluster, old_epoch = previous.get("cluster"), previous.get("epoch")
        if not isinstance(old_cluster, str) or old_cluster == cluster or type(old_epoch) is not int:
            return None
        index = self.objects.get(old_cluster)
        if old_cluster not in self.members.syncs:
            return None  # no such cluster any more (unregistered): nothing of it can run
        # No index yet (its watches have not started: e.g. the member does not answer) tells nothing.
        left = [o for o in index.objects_of(job_ref(job).uid)
                if o.epoch is not None and o.epoch <= old_epoch] if index is not None else []
        if not left and index is not None and index.ready:
            return None
        lease = self.members.lease(old_cluster)
        if lease is not None and time.time() >= lease.fenced_after():
            # Out of contact for longer than the hub's lease there plus the margin: the member's fence
            # agent has deleted this hub's pods (docs/failover.md), so nothing of the old copy runs.
            return None
        return old_cluster, old_epoch, left

    def _with_previous_report(self, job: Mapping[str, Any]) -> Mapping[str, Any]:
        """`job` with status.checkpoint set to its previous copy's last report as the member index shows it (its
        pods, and those that left with one: a process that saved, reported and exited at once), when that is newer
        than the recorded one: status sync records it too, but maybe only after this dispatch read the job."""
        status = Body(job).status
        previous = (status.get("placement") or {}).get("previous")
        if not isinstance(previous, Mapping):
            return job
        old_cluster, old_epoch = previous.get("cluster"), previous.get("epoch")
        if not isinstance(old_cluster, str) or type(old_epoch) is not int:
            return job
        index = self.objects.get(old_cluster)
        if index is None:
            return job
        uid = job_ref(job).uid
        report, _ = latest_report([*index.gang(uid, old_epoch)[1], *index.departed(uid, old_epoch)])
        if report is None or not supersedes(report, status.get("checkpoint"), cluster=old_cluster, epoch=old_epoch):
            return job
        checkpoint = {"step": report.step, "location": report.location, "cluster": old_cluster, "epoch": old_epoch}
        return {**job, "status": {**status, "checkpoint": checkpoint}}

    async def delete_previous(self, job: Mapping[str, Any], *, cluster: str) -> int:
        """Ask the member to delete a moved gang's previous copy (pods first, uid-guarded); how many
        deletes were requested. Waiting for them to be gone is `wait_for_previous`'s."""
        found = self._previous_copy(job, cluster=cluster)
        if found is None:
            return 0
        old_cluster, _, left = found
        client = self.members.client(old_cluster)
        pending = [o for o in left if not o.deleting]
        if client is None or not pending:
            return 0
        # audited as its caller's reason (suspend, drain...), else a requeue: also inside a new copy's dispatch
        asked = MEMBER_WRITE_WHY.get()
        # graceful eviction (drain, preemption, a move): the old copy's pods get spec.checkpoint.saveGraceSeconds
        # to save; fencing a partitioned cluster's copy is the member agent's, and immediate (docs/failover.md)
        with member_write_reason("requeue" if asked in ("unspecified", "place") else asked):
            outcome = await delete_member_objects(client, pending, cluster=old_cluster, hub_id=self._hub_id,
                                                  pod_grace_seconds=save_grace_seconds(job))
        return outcome.requested

    async def wait_for_previous(self, job: Mapping[str, Any], *, cluster: str, wait: float) -> None:
        """Return once a moved gang's previous copy (a drain: status.placement.previous) is gone from its
        old cluster, deleting it if it is still there, so the new copy never starts beside it (also when
        a restarted hub re-dispatches). DispatchError (retryable) after `wait` seconds: the job is
        requeued and its next dispatch waits again."""
        found = self._previous_copy(job, cluster=cluster)
        if found is None:
            return
        deadline = time.monotonic() + wait
        delay = 0.05
        asked = 0.0
        while found is not None:
            old_cluster, old_epoch, left = found
            if time.monotonic() - asked >= 2.0:
                await self.delete_previous(job, cluster=cluster)
                asked = time.monotonic()
            if time.monotonic() >= deadline:
                raise DispatchError(f"the gang's previous copy in cluster {old_cluster} (epoch {old_epoch}, "
                                    f"{len(left)} objects) is not gone yet")
            _log.info("dispatch waiting for the previous copy to go", cluster=cluster, previous=old_cluster,
                      epoch=old_epoch, left=len(left), waiting_for="the drained cluster to delete the old copy")
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
            found = self._previous_copy(job, cluster=cluster)

    async def _create_all(
        self, job: Mapping[str, Any], *, cluster: str, epoch: int, assignment: Sequence[PodAssignment],
        wait_for_client: float, decision_stored: bool,
    ) -> tuple[int, int, str]:
        """Create the gang's member objects: (created, already there, the mode: "operator" when the member copy
        of the upstream object went there for the member's operator to run, else "render")."""
        ref = job_ref(job)
        scheduler = cluster_scheduler(self.hub, cluster)
        if scheduler is None:
            if wait_for_client > 0:
                await self._client(cluster, wait=wait_for_client)
                scheduler = cluster_scheduler(self.hub, cluster)
            if scheduler is None:
                raise DispatchError(f"cluster {cluster} is not registered with a scheduler")
        client = await self._client(cluster, wait=wait_for_client)
        operated = await self._operated(job, cluster=cluster, wait=self.fence_wait_seconds)
        adapter, priority_class, render = self._renderer(job, scheduler=scheduler, cluster=cluster, epoch=epoch,
                                                         assignment=assignment, operated=operated)
        objects = render(True)
        await self.wait_for_fence(cluster, wait=self.fence_wait_seconds)
        await self.wait_for_previous(job, cluster=cluster,
                                     wait=self.fence_wait_seconds + (save_grace_seconds(job) or 0))
        if (Body(job).status.get("placement") or {}).get("previous") is not None:
            # the previous copy may have reported a last checkpoint during its grace (status sync recorded it
            # meanwhile): the new copy restores from that one
            stored = self._with_previous_report(await self._stored(ref))
            if restore_from(stored, epoch) != restore_from(job, epoch):
                job = {**job, "status": {**Body(job).status, "checkpoint": Body(stored).status.get("checkpoint")}}
                adapter, priority_class, render = self._renderer(
                    job, scheduler=scheduler, cluster=cluster, epoch=epoch, assignment=assignment, operated=operated)
                objects = render(True)
        await self._ensure_namespace(client, cluster=cluster, namespace=ref.namespace)
        if priority_class is not None and not await self._ensure_priority_class(client, cluster=cluster,
                                                                                 priority_class=priority_class):
            objects = render(False)
        # The waits above can take seconds (a returning cluster's fences), during which the job may have been
        # requeued (its gang killed by the fence agent, its cluster lost) and placed at a newer epoch: creating
        # this epoch's gang then would run it beside the new one (chaos seed 1657557937: a restarted hub's
        # re-dispatch, checked before it waited, created a fenced epoch again). So the stored decision is read
        # again right before the first create; the requeuers wait for a dispatch in flight to return. A caller
        # that stands for its own stored decision (`decision_stored`) goes on with the same decision further on
        # (Admitted: a re-dispatch of a gang that exists), only a changed decision stops it.
        try:
            await self._check_current(ref, cluster=cluster, epoch=epoch)
        except DispatchError as e:
            if e.superseded or not decision_stored:
                raise
        created = existing = 0
        total = len(objects)
        half = max(1, total // 2)
        done = 0
        first, rest = objects[0], objects[1:]
        owner: Mapping[str, Any] | None = None
        state, stored = await self._create_one(client, first, ref_uid=ref.uid, epoch=epoch, cluster=cluster)
        created, existing = created + (state == "created"), existing + (state == "existing")
        done += 1
        if done >= half and total > 1:
            crash_point("mid-dispatch", job=ref.key)
        if first.gvk.kind != "Pod" and adapter.pods_owned_by_group and operated is None:
            owner = stored
        semaphore = asyncio.Semaphore(self.concurrency)

        async def create(obj: MemberObject) -> str:
            nonlocal done
            body = obj.owned_by(owner) if owner is not None else obj
            async with semaphore:
                result, _ = await self._create_one(client, body, ref_uid=ref.uid, epoch=epoch, cluster=cluster)
            done += 1
            if done == half and total > 1:
                crash_point("mid-dispatch", job=ref.key)
            return result

        if rest:
            results = await asyncio.gather(*(create(obj) for obj in rest), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            for r in results:
                if r == "created":
                    created += 1
                elif r == "existing":
                    existing += 1
            if errors:
                outdated = [e for e in errors if isinstance(e, DispatchError) and e.outdated]
                if outdated:
                    raise outdated[0]
                first_error = errors[0]
                if isinstance(first_error, DispatchError):
                    raise first_error
                if isinstance(first_error, Exception):
                    raise DispatchError(f"creating member objects in {cluster}: {first_error}") from None
                raise first_error
        if operated is not None:
            await self._resume(client, objects[-1], kind=operated.kind, cluster=cluster)
        return created, existing, "render" if operated is None else "operator"

    # ------------------------------------------------------------ operator mode (issue 28)

    def operator_kind(self, job: Mapping[str, Any], *, cluster: str) -> JobKind | None:
        """The twin's source kind when `cluster` runs it with the kind's own operator (its effective mode,
        `ClusterSync.operator_mode`, is "operator"), else None (a TrainingJob, a kind the hub renders there, a
        kind without pod templates to carry the gang's labels: TrainJob)."""
        source_key = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        kind = job_kind_by_source(source_key) if isinstance(source_key, str) else None
        sync = self.members.syncs.get(cluster)
        if kind is None or not kind.operator_copyable or sync is None or _source_owner(job, kind) is None:
            return None
        if sync.operator_mode(kind.source_key) != "operator":
            return None
        scheduler = cluster_scheduler(self.hub, cluster)
        try:
            by_pod_field = scheduler is not None and adapter_for(scheduler[0]).joins_by_pod_field
        except KeyError:
            by_pod_field = False
        if by_pod_field:
            if cluster not in self._rendered_for_gang_field:
                self._rendered_for_gang_field.add(cluster)
                _log.info("this member's gang scheduler joins pods by a pod spec field the job operators' CRDs "
                          "drop; the hub renders the upstream kinds' gangs there", cluster=cluster,
                          scheduler=scheduler[0] if scheduler is not None else "")
            return None
        return kind

    def operated_gang(self, job: Mapping[str, Any], *, cluster: str, epoch: int | None) -> bool:
        """Whether the member's operator runs the job's gang in `cluster` (its member copy is there, or the
        cluster runs the kind in operator mode): then the hub never creates or deletes single pods of it."""
        source_key = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        index = self.objects.get(cluster)
        if index is not None and isinstance(source_key, str) \
                and index.member_copy(job_ref(job).uid, source_key, epoch) is not None:
            return True
        return self.operator_kind(job, cluster=cluster) is not None

    async def _operated(self, job: Mapping[str, Any], *, cluster: str, wait: float) -> _Operated | None:
        """The source object and its kind when the gang goes to `cluster` in operator mode (after the member's
        discovery answered, unless spec.operators names the kind), else None."""
        source_key = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        kind = job_kind_by_source(source_key) if isinstance(source_key, str) else None
        sync = self.members.syncs.get(cluster)
        if kind is None or not kind.operator_copyable or sync is None:
            return None
        overrides = sync.spec.get("operators")
        if not (isinstance(overrides, Mapping) and kind.source_key in overrides) \
                and not await sync.wait_discovered(wait):
            raise DispatchError(f"cluster {cluster}: which job kinds it serves is not known yet (its discovery "
                                f"has not answered)")
        if self.operator_kind(job, cluster=cluster) is None:
            return None
        rt = self.hub.registry.by_kind(kind.api_version, kind.kind)
        owner = _source_owner(job, kind)
        if rt is None or owner is None:
            return None  # a TrainingJob that only carries the annotation, no twin: rendered as any job
        ref = job_ref(job)
        try:
            source = await self.hub.storage.get(rt, namespace=ref.namespace, name=str(owner.get("name")))
        except ApiError as e:
            if e.code == 404:
                raise DispatchError(f"its {kind.kind} is gone", superseded=True) from None
            raise DispatchError(f"reading its {kind.kind} from the hub store: {e}") from None
        except StoreError as e:
            raise DispatchError(f"reading its {kind.kind} from the hub store: {e}") from None
        if Body(source).uid != owner.get("uid"):
            raise DispatchError(f"its {kind.kind} was re-created", superseded=True)
        translation = kind.translate(source, self.hub.settings.validation)
        if translation.spec is None:
            raise DispatchError(f"its {kind.kind} cannot be translated: {translation.errors[:3]}", retryable=False)
        return _Operated(kind=kind, source=source, role_paths=translation.role_paths)

    async def _resume(self, client: Any, copy: MemberObject, *, kind: JobKind, cluster: str) -> None:
        """Let the member's operator start the copy (its suspend field false) now that the PodGroup exists."""
        resource = _resource_of(copy.gvk)
        what = f"{copy.kind} {copy.namespace}/{copy.name} in {cluster}"
        try:
            found = await client.get(resource, namespace=copy.namespace, name=copy.name)
            if suspended(kind, found):
                await client.patch(resource, namespace=copy.namespace, name=copy.name, patch=resume_patch(kind))
        except (MemberApiError, MemberClientError) as e:
            raise DispatchError(f"resuming {what}: {e}") from None

    def _renderer(
        self, job: Mapping[str, Any], *, scheduler: tuple[str, str | None], cluster: str, epoch: int,
        assignment: Sequence[PodAssignment], operated: _Operated | None = None,
    ) -> tuple[SchedulerAdapter, MemberObject | None, Callable[[bool], list[MemberObject]]]:
        """(the cluster's adapter, the job's member PriorityClass, render(with_priority) -> the job's member
        objects at (cluster, epoch)); a job that cannot be rendered is a DispatchError (not retryable)."""
        kind, override = scheduler
        ref = job_ref(job)
        try:
            adapter = adapter_for(kind)
            priority_class = member_priority_class(job)
            gpu_pin = self._gpu_node_labels(job, cluster=cluster, assignment=assignment)
            avoid = self._avoid_hostnames(job, cluster=cluster)
        except (RenderError, KeyError) as e:
            raise DispatchError(f"cannot render the job for cluster {cluster}: {e}", retryable=False) from None

        def render(with_priority: bool) -> list[MemberObject]:
            try:
                if operated is not None:
                    return _operator_objects(adapter, job, operated, scheduler_name=override or
                                             adapter.default_scheduler_name, epoch=epoch, hub_id=self._hub_id,
                                             namespace=ref.namespace,
                                             priority_class_name=priority_class.name if priority_class and
                                             with_priority else None)
                return adapter.render(job, cluster_scheduler_name=override or adapter.default_scheduler_name,
                                      epoch=epoch, hub_id=self._hub_id, namespace=ref.namespace,
                                      assignment=assignment, gpu_node_labels=gpu_pin, avoid_hostnames=avoid,
                                      priority_class_name=priority_class.name if priority_class and with_priority
                                      else None)
            except (RenderError, KeyError) as e:
                raise DispatchError(f"cannot render the job for cluster {cluster}: {e}",
                                    retryable=False) from None

        return adapter, priority_class, render

    async def _ensure_namespace(self, client: Any, *, cluster: str, namespace: str) -> None:
        known = self._namespaces.setdefault(cluster, set())
        if namespace in known:
            return
        try:
            await client.get(NAMESPACES, namespace=None, name=namespace)
        except MemberApiError as e:
            if e.code != 404:
                raise DispatchError(f"reading namespace {namespace} in {cluster}: {e}") from None
            try:
                await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace,
                                                              "labels": {"app.kubernetes.io/managed-by": "federator"}}},
                                    namespace=None)
                _log.info("created member namespace", cluster=cluster, namespace=namespace)
            except MemberApiError as e2:
                if e2.code != 409:
                    raise DispatchError(f"creating namespace {namespace} in {cluster}: {e2}") from None
            except MemberClientError as e2:
                raise DispatchError(f"creating namespace {namespace} in {cluster}: {e2}") from None
        except MemberClientError as e:
            raise DispatchError(f"reading namespace {namespace} in {cluster}: {e}") from None
        known.add(namespace)

    async def _ensure_priority_class(self, client: Any, *, cluster: str, priority_class: MemberObject) -> bool:
        """Create the PriorityClass the job's pods will name unless the member has it (409 AlreadyExists: the
        member's own class, and its value, stand). kube's own system- classes are never created. False when
        the member refuses (403: its deploy/member RBAC predates PriorityClasses; 404: it serves no such API):
        the pods then go without a class and the member treats them as its default priority (logged once
        per cluster and class). Any other failure fails the dispatch (retried)."""
        name = priority_class.name
        if is_system_priority_class(name):
            return True
        try:
            await client.create(_resource_of(priority_class.gvk), priority_class.body, namespace=None)
            _log.info("created member PriorityClass", cluster=cluster, priority_class=name,
                      value=priority_class.body.get("value"))
        except MemberApiError as e:
            if e.code == 409:
                return True
            if e.code in (403, 404):
                if (cluster, name) not in self._priority_refused:
                    self._priority_refused.add((cluster, name))
                    _log.warning("the member refuses to create the job's PriorityClass; its pods go without one "
                                 "(the job's priority is not passed down there)", cluster=cluster,
                                 priority_class=name, code=e.code, error=str(e))
                return False
            raise DispatchError(f"creating PriorityClass {name} in {cluster}: {e}") from None
        except MemberClientError as e:
            raise DispatchError(f"creating PriorityClass {name} in {cluster}: {e}") from None
        return True

    def _gpu_node_labels(self, job: Mapping[str, Any], *, cluster: str, assignment: Sequence[PodAssignment]
                         ) -> dict[str, list[str]]:
        """`delegation.gpu_node_labels` over the cluster's snapshot ({} without one): the GPU pods stay on
        the nvidia.com/gpu.product values of the GPU model placement chose."""
        snapshot = self.members.snapshots.get(cluster)
        if snapshot is None:
            return {}
        return gpu_node_labels(job, nodes=snapshot.nodes, assignment=assignment, label=GPU_PRODUCT_LABEL)

    def _avoid_hostnames(self, job: Mapping[str, Any], *, cluster: str) -> list[str]:
        """The kubernetes.io/hostname values of the job's excluded nodes in `cluster` (status.placement.excludedNodes
        in force now; a node the snapshot does not know by that label goes by its name, as kubelet's default)."""
        nodes = excluded_nodes(job, now=time.time()).get(cluster)
        if not nodes:
            return []
        snapshot = self.members.snapshots.get(cluster)
        known = snapshot.nodes if snapshot is not None else {}
        return sorted({str(known[n].labels.get(HOSTNAME_LABEL) or n) if n in known else n for n in nodes})

    async def _create_one(
        self, client: Any, obj: MemberObject, *, ref_uid: str, epoch: int, cluster: str,
    ) -> tuple[str, dict[str, Any]]:
        """Create `obj`; ("created" | "existing", the member's object). AlreadyExists of this epoch is fine."""
        resource = _resource_of(obj.gvk)
        what = f"{obj.kind} {obj.namespace}/{obj.name} in {cluster}"
        deadline = time.monotonic() + _STALE_WAIT_SECONDS
        delay = 0.05
        namespace_checked = False
        while True:
            try:
                stored = await client.create(resource, obj.body, namespace=obj.namespace)
                return "created", stored
            except MemberApiError as e:
                if e.code == 404 and not namespace_checked:
                    # the namespace may have gone away since we saw it: make sure it exists, once
                    namespace_checked = True
                    self._namespaces.get(cluster, set()).discard(obj.namespace)
                    await self._ensure_namespace(client, cluster=cluster, namespace=obj.namespace)
                    continue
                if e.code != 409:
                    raise DispatchError(f"creating {what}: {e}") from None
            except MemberClientError as e:
                raise DispatchError(f"creating {what}: {e}") from None
            try:
                found = await client.get(resource, namespace=obj.namespace, name=obj.name)
            except MemberApiError as e:
                if e.code == 404:
                    continue  # deleted in between: create again
                raise DispatchError(f"reading {what} after AlreadyExists: {e}") from None
            except MemberClientError as e:
                raise DispatchError(f"reading {what} after AlreadyExists: {e}") from None
            owned = ownership_of(found, job_uid=ref_uid, epoch=epoch, hub_id=self._hub_id)
            if owned is Ownership.CURRENT:
                return "existing", found
            if owned is Ownership.NEWER:
                raise DispatchError(f"{what} belongs to a newer epoch of the job", superseded=True)
            if owned is Ownership.FOREIGN:
                if resource.key in JOB_KIND_KEYS:
                    raise DispatchError(f"NameTaken: {what} already exists and is not this hub's copy of the job "
                                        f"(it is never adopted or overwritten)", retryable=True)
                raise DispatchError(f"{what} already exists and is not this job's (another job, hub or owner)",
                                    retryable=True)
            # an older epoch of this job still holds the name: fence it, then try again
            if time.monotonic() >= deadline:
                raise DispatchError(f"{what}: a pod of an older epoch still holds the name after "
                                    f"{_STALE_WAIT_SECONDS:.0f}s")
            if not Body(found).deleting:
                _log.info("deleting an older epoch's object that holds the name", cluster=cluster,
                          object=f"{obj.kind} {obj.namespace}/{obj.name}", epoch=epoch)
                try:
                    await client.delete(resource, namespace=obj.namespace, name=obj.name, grace_period_seconds=0,
                                        precondition_uid=Body(found).uid,
                                        propagation_policy="Background" if resource.key in JOB_KIND_KEYS else None)
                except MemberApiError as e:
                    if e.code not in (404, 409):
                        raise DispatchError(f"deleting the older epoch's {what}: {e}") from None
                except MemberClientError as e:
                    raise DispatchError(f"deleting the older epoch's {what}: {e}") from None
            _log.info("create waits for an older epoch's object to go", cluster=cluster,
                      object=f"{obj.kind} {obj.namespace}/{obj.name}", waiting_for="the old object's deletion",
                      delay_s=round(delay, 3))
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------ deletes other controllers ask for

    @_writes_for("cleanup")
    async def delete_objects(self, cluster: str, objects: Sequence[IndexedObject]) -> DeleteOutcome | None:
        """Delete `objects` (this hub's, as the member object index or a member list showed them) from
        `cluster`, pods first as given, each guarded by its uid (`delete_member_objects`): the GC's orphans,
        a deleted job's objects, a stuck gang's pull-back. None when the cluster has no client now."""
        client = self.members.client(cluster)
        if client is None:
            return None
        return await delete_member_objects(client, objects, cluster=cluster, hub_id=self._hub_id)

    @_writes_for("cleanup")
    async def delete_companions(self, cluster: str, objects: Sequence[IndexedObject]) -> int:
        """Delete the Services and ConfigMaps of the gangs `objects` belong to (the GC's orphaned gangs whose
        pods are already gone). How many deletes were requested; 0 when the cluster has no client now."""
        client = self.members.client(cluster)
        if client is None:
            return 0
        return await delete_gang_companions(client, objects, hub_id=self._hub_id, cluster=cluster)

    # ------------------------------------------------------------ one pod again

    @_writes_for("restart")
    async def restart_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int, delete: Mapping[str, str],
                           recreate: Mapping[str, Mapping[str, str]]) -> int:
        """Status sync's restart of a gang's failed workers (and shrink of lost ones): delete the pods named
        in `delete` (name -> uid, guarded by it; gone already is fine), then create the pods of `recreate`
        again (`recreate_pods`). Returns how many were created; raises DispatchError or MemberClientError."""
        ref = job_ref(job)
        if delete:
            client = await self._client(cluster, wait=0.0)
            for name, pod_uid in delete.items():
                try:
                    await client.delete(PODS, namespace=ref.namespace, name=name, grace_period_seconds=0,
                                        precondition_uid=pod_uid or None)
                except MemberApiError as e:
                    if e.code not in (404, 409):
                        raise
        return await self.recreate_pods(job, cluster=cluster, epoch=epoch, pods=recreate) if recreate else 0

    @_writes_for("restart")
    async def recreate_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int,
                            pods: Mapping[str, Mapping[str, str]]) -> int:
        """Create again the named pods of the gang at (cluster, epoch) (status sync's restart of failed
        workers, restartPolicy OnFailure): each rendered as the job's dispatch renders it at its placed
        size, plus `pods[name]`'s annotations (the attempt index, also in env FEDERATOR_ATTEMPT), and each
        one's own Service when the render has one (a Kubeflow replica's, render mode) and it is missing. The
        caller deleted the failed pod first; an existing pod of this epoch counts as created. Right before
        the first create the stored job is read again (`_check_still_placed`): one that moved on meanwhile
        gets nothing (DispatchError, outdated). Returns how many were created; raises DispatchError
        (nothing is requeued or failed here)."""
        ref = job_ref(job)
        scheduler = cluster_scheduler(self.hub, cluster)
        if scheduler is None:
            raise DispatchError(f"cluster {cluster} is not registered with a scheduler")
        adapter, priority_class, render = self._renderer(job, scheduler=scheduler, cluster=cluster, epoch=epoch,
                                                         assignment=())
        objects = render(True)
        client = await self._client(cluster, wait=0.0)
        if priority_class is not None and not await self._ensure_priority_class(client, cluster=cluster,
                                                                                 priority_class=priority_class):
            objects = render(False)
        owner: Mapping[str, Any] | None = None
        if adapter.pods_owned_by_group and objects and objects[0].gvk.kind != "Pod":
            group = objects[0]
            try:
                owner = await client.get(_resource_of(group.gvk), namespace=group.namespace, name=group.name)
            except (MemberApiError, MemberClientError) as e:
                raise DispatchError(f"reading {group.kind} {group.namespace}/{group.name} in {cluster}: {e}") \
                    from None
        await self._check_still_placed(ref, cluster=cluster, epoch=epoch)
        # a pod's own Service (a Kubeflow replica's, delegation/network.py) comes with it: a grow's new index
        # has none yet (an existing one of this epoch is fine)
        named = {(o.labels.get(LABEL_ROLE), o.labels.get(LABEL_INDEX)) for o in objects
                 if o.gvk.kind == "Pod" and o.name in pods}
        for obj in objects:
            if obj.gvk == SERVICE_GVK and LABEL_INDEX in obj.labels \
                    and (obj.labels.get(LABEL_ROLE), obj.labels.get(LABEL_INDEX)) in named:
                await self._create_one(client, obj, ref_uid=ref.uid, epoch=epoch, cluster=cluster)
        created = 0
        for obj in objects:
            annotations = pods.get(obj.name) if obj.gvk.kind == "Pod" else None
            if annotations is None:
                continue
            body = obj.owned_by(owner) if owner is not None else obj
            meta = body.body.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            attempt = annotations.get(ANNOTATION_ATTEMPT)
            if attempt is not None:
                for container in body.body.get("spec", {}).get("containers") or ():
                    env = [e for e in container.get("env") or () if e.get("name") != "FEDERATOR_ATTEMPT"]
                    container["env"] = [*env, {"name": "FEDERATOR_ATTEMPT", "value": attempt}]
            state, _ = await self._create_one(client, body, ref_uid=ref.uid, epoch=epoch, cluster=cluster)
            created += state == "created"
        return created

    async def _check_still_placed(self, ref: Any, *, cluster: str, epoch: int) -> None:
        """Right before `recreate_pods` creates: the stored job (not the caller's copy, which status sync or
        the elastic pass read before the member writes and waits) must still be placed at (cluster, epoch),
        in an active phase and not being deleted, and the member's fence agent must not be deleting this
        hub's objects there. Meanwhile the job may have been requeued (its gang fenced or its cluster lost),
        moved to another cluster or epoch, or deleted: a pod created again then would be a copy of a
        superseded epoch beside the new one (the race dispatch closed for chaos seed 1657557937).
        DispatchError (outdated) when the job moved on; retryable while the fence agent may be deleting."""
        stored = await self._stored(ref)
        now_cluster, now_epoch = current_placement(stored)
        if (now_cluster, now_epoch) != (cluster, epoch):
            raise DispatchError(f"the job is now {phase_of(stored)} at cluster {now_cluster} epoch {now_epoch}, "
                                f"not cluster {cluster} epoch {epoch}", outdated=True)
        if Body(stored).deleting:
            raise DispatchError("the job is being deleted", outdated=True)
        if phase_of(stored) not in ACTIVE_PHASES:
            raise DispatchError(f"the job is {phase_of(stored)} now", outdated=True)
        if self.agent_may_fence(cluster):
            raise DispatchError(f"cluster {cluster}: its fence agent may be deleting this hub's objects")

    # ------------------------------------------------------------ some pods less (placement's elastic resizes)

    @_writes_for("resize")
    async def delete_pods(self, job: Mapping[str, Any], *, cluster: str, epoch: int, names: Sequence[str]) -> int:
        """Ask `cluster` to delete the named pods of the job's gang at `epoch` (a shrink: its highest indices),
        in the order given, each guarded by its uid, as status sync's index of this hub's member objects
        holds them (a name it does not hold is already gone). How many deletes were requested; 0 when the
        index has not listed the cluster yet or the cluster has no client (the caller's next pass tries
        again). Member errors are logged by `delete_member_objects`, not raised."""
        index = self.objects.get(cluster)
        client = self.members.client(cluster)
        if index is None or not index.ready or client is None or not names:
            return 0
        held = {Body(pod).name: pod for pod in index.gang(job_ref(job).uid, epoch)[1]}
        going = [member_object(cluster, PODS, held[name]) for name in names if name in held]
        if not going:
            return 0
        outcome = await delete_member_objects(client, going, cluster=cluster)
        return outcome.requested

    # ------------------------------------------------------------ an operator's gang resized in place

    @_writes_for("resize")
    async def resize_member_copy(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> bool:
        """Bring the member copy of an elastic gang the member's operator runs (operator mode) to the gang's
        size (status.replicas): a merge patch of the field the kind's operator resizes in place
        (`membercopy.resize_patch`: PyTorchJob's spec.pytorchReplicaSpecs.Worker.replicas, within its
        elasticPolicy bounds, read off the hub's source object), as the training operator's HPA scales it; the
        operator then creates the pods of new indices and deletes those above the count. True when a patch was
        sent; False when there is nothing to do: the copy (as status sync's index last saw it) is at that size
        already, no copy of this epoch is indexed, or the kind cannot be resized in place (its gang keeps its
        placed size: placement plans no resize of it). Right before the patch the stored job is read again
        (`_check_still_placed`). Raises DispatchError (a size the copy cannot take, the job moved on, the member
        refused)."""
        ref = job_ref(job)
        source_key = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        kind = job_kind_by_source(source_key) if isinstance(source_key, str) else None
        index = self.objects.get(cluster)
        client = self.members.client(cluster)
        if kind is None or kind.in_place_resize is None or index is None or not index.ready or client is None:
            return False
        found = index.member_copy(ref.uid, kind.source_key, epoch)
        if found is None:
            return False
        resource, current = found
        operated = await self._operated(job, cluster=cluster, wait=0.0)
        if operated is None:
            return False
        try:
            patch = resize_patch(kind, operated.source, placed_replicas(job))
        except RenderError as e:
            raise DispatchError(f"resizing its {kind.kind} in {cluster}: {e}", retryable=False) from None
        if resized_to(kind, patch) == resized_to(kind, current):
            return False
        await self._check_still_placed(ref, cluster=cluster, epoch=epoch)
        name = Body(current).name
        try:
            await client.patch(resource, namespace=ref.namespace, name=name, patch=patch)
        except (MemberApiError, MemberClientError) as e:
            raise DispatchError(f"resizing {kind.kind} {ref.namespace}/{name} in {cluster}: {e}") from None
        _log.info("member copy resized in place", job=ref.key, cluster=cluster, epoch=epoch, kind=kind.kind,
                  replicas=resized_to(kind, patch))
        return True

    # ------------------------------------------------------------ after the dispatch

    async def _record_dispatched(
        self, job: Mapping[str, Any], *, cluster: str, epoch: int, created: int, existing: int, mode: str,
    ) -> None:
        """Condition Dispatched and a history entry, written here: dispatch is the Dispatched condition's only
        writer."""
        ref = job_ref(job)
        self.hub.events.record(job, controller="dispatch", reason="Dispatched", action="Dispatch",
                               message=f"gang created in {cluster} at epoch {epoch} ({created} objects created, "
                                       f"{existing} already there; {mode} mode)")
        record = DispatchRecord(cluster=cluster, epoch=epoch, created=created, existing=existing, at=time.time(),
                                mode=mode)

        def mutate(stored: dict[str, Any]) -> dict[str, Any] | None:
            if current_placement(stored) != (cluster, epoch):
                return None
            return stored if apply_dispatch_record(stored["status"], record) else None

        try:
            await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate, uid=ref.uid)
        except (ApiError, StoreError) as e:
            # informational only: the objects exist and status sync takes over
            _log.warning("could not record the dispatch in the job's status", job=ref.key, cluster=cluster,
                         error=str(e))

    @_writes_for("cleanup")
    async def _cleanup_epoch(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> tuple[int, bool]:
        """Delete this epoch's objects of the job in `cluster` (best effort): (how many deletes were
        requested, whether the member was read in full: False when some of the epoch may remain)."""
        ref = job_ref(job)
        client = self.members.client(cluster)
        scheduler = cluster_scheduler(self.hub, cluster)
        if client is None or scheduler is None:
            return 0, False
        try:
            gvks = adapter_for(scheduler[0]).gvk_list()
            selector = selector_for(ref.uid, epoch)
        except (KeyError, RenderError):
            return 0, False
        deleted = 0
        resources = [_resource_of(gvk) for gvk in reversed(gvks)]  # pods first, then the PodGroup
        kind = self.operator_kind(job, cluster=cluster)
        sync = self.members.syncs.get(cluster)
        if kind is not None and sync is not None and (sync.operators or {}).get(kind.source_key) == "operator":
            resources.insert(0, JOB_KIND_RESOURCES[kind.source_key])  # its operator would make the pods again
        for resource in resources:
            try:
                listing = await client.list(resource, namespace=ref.namespace, label_selector=selector)
            except MemberClientError as e:
                _log.info("cleanup after a failed dispatch could not list; the GC will collect leftovers",
                          job=ref.key, cluster=cluster, resource=resource.key, error=str(e))
                return deleted, False
            for item in listing.items:
                if ownership_of(item, job_uid=ref.uid, epoch=epoch, hub_id=self._hub_id) is not Ownership.CURRENT:
                    continue
                meta = Body(item)
                try:
                    await client.delete(resource, namespace=ref.namespace, name=meta.name,
                                        grace_period_seconds=0, precondition_uid=meta.uid,
                                        propagation_policy="Background" if resource.key in JOB_KIND_KEYS else None)
                    deleted += 1
                except MemberApiError as e:
                    if e.code not in (404, 409):
                        _log.info("cleanup delete failed; the GC will collect it", job=ref.key, cluster=cluster,
                                  error=str(e))
                except MemberClientError as e:
                    _log.info("cleanup after a failed dispatch stopped; the GC will collect leftovers",
                              job=ref.key, cluster=cluster, error=str(e))
                    return deleted, False
        return deleted, True

    async def _failed(
        self, job: Mapping[str, Any], *, cluster: str, epoch: int, error: str, retryable: bool,
    ) -> None:
        ref = job_ref(job)
        deleted, cleaned = await self._cleanup_epoch(job, cluster=cluster, epoch=epoch)
        self.reservations.forget(ref.uid)
        now = time.time()
        if not retryable:
            message = f"dispatch to {cluster} cannot succeed: {error}"
            _log.error("dispatch failed for good", job=ref.key, cluster=cluster, epoch=epoch, error=error)

            def fail(stored: dict[str, Any]) -> dict[str, Any] | None:
                if current_placement(stored) != (cluster, epoch):
                    return None
                status = stored["status"]
                append_history(status, history_entry("DispatchFailed", cluster=cluster, epoch=epoch,
                                                     message=message, now=now))
                set_condition(status, type="Dispatched", state="False", reason="RenderFailed", message=message,
                              now=now)
                set_phase(status, PHASE_FAILED, reason="RenderFailed", message=message, now=now, job=ref.key,
                          cluster=cluster)
                return stored

            if (stored := await self._write(ref, fail)) is not None:
                self.hub.events.record(stored, controller="dispatch", reason="DispatchFailed", action="Dispatch",
                                       warning=True, message=message)
            return
        delay = self.retries.failed(ref.uid, now=now)
        attempt = self.retries.attempts(ref.uid)
        message = (f"dispatch to {cluster} failed (attempt {attempt}): {error}; removed {deleted} partly created "
                   f"objects; placing again in {delay:.1f}s")
        _log.warning("dispatch failed; requeued with backoff", job=ref.key, cluster=cluster, epoch=epoch,
                     error=error, attempt=attempt, delay_s=round(delay, 3),
                     waiting_for=f"cluster {cluster} to accept the gang (or another cluster to fit it)")
        self.hub.metrics.job_requeues.labels(reason="DispatchFailed").inc()

        def back(stored: dict[str, Any]) -> dict[str, Any] | None:
            if current_placement(stored) != (cluster, epoch) or phase_of(stored) != PHASE_PLACED:
                return None
            status = stored["status"]
            # An older copy elsewhere still in the way: then nothing of this epoch was created (a dispatch
            # creates only once the previous copy is gone) and that copy stays the one to wait for.
            older = self._previous_copy(stored, cluster=cluster)
            set_condition(status, type="Dispatched", state="False", reason="DispatchFailed", message=message, now=now)
            requeue(status, reason="DispatchFailed", message=message, now=now, job=ref.key, count=False)
            if not cleaned and older is None:
                # Some hub may have created this epoch's objects in `cluster` (this attempt, or one that
                # crashed before recording it) and the member could not be read to delete them: wherever
                # the gang goes next, its dispatch waits until they are gone or fenced (design.md
                # invariant 2: never two copies), as after a drain.
                status["placement"]["previous"] = {"cluster": cluster, "epoch": epoch}
            return stored

        if (stored := await self._write(ref, back)) is not None:
            self.hub.events.record(stored, controller="dispatch", reason="Requeued", action="Requeue", warning=True,
                                   message=message)
        if self.on_requeued is not None:
            self.on_requeued(delay)

    async def _write(self, ref: Any, mutate: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        try:
            return await update_job_status(self.hub, namespace=ref.namespace, name=ref.name, mutate=mutate,
                                           uid=ref.uid)
        except (ApiError, StoreError) as e:
            # the job stays Placed; the next hub start re-dispatches it
            _log.error("could not requeue the job after a failed dispatch", job=ref.key, error=str(e))
            return None

    # ------------------------------------------------------------ crash recovery

    async def recover(self) -> int:
        """Re-dispatch every job in phase Placed (idempotent). Returns how many were dispatched."""
        rt = self.hub.kind(JOB_KIND)
        listing = await self.hub.storage.list(rt)
        placed = [job for job in listing.items if phase_of(job) == PHASE_PLACED
                  and current_placement(job)[0] is not None
                  and not Body(job).deleting]
        if not placed:
            return 0
        _log.info("re-dispatching placed jobs after a hub start", jobs=len(placed))
        semaphore = asyncio.Semaphore(32)
        ok = 0

        async def one(job: dict[str, Any]) -> None:
            nonlocal ok
            cluster, epoch = current_placement(job)
            assert cluster is not None
            async with semaphore:
                result = await self.dispatch(job, cluster=cluster, epoch=epoch,
                                             wait_for_client=self.client_wait_seconds)
            ok += result.ok

        await asyncio.gather(*(one(job) for job in placed))
        _log.info("re-dispatch after start done", jobs=len(placed), ok=ok)
        return ok


async def job_dispatch(hub: HubContext) -> AsyncIterator[None]:
    """cleanup_ctx-style factory: re-dispatches the term's Placed jobs on start (`hub.parts.dispatcher`)."""
    dispatcher = hub.parts.dispatcher

    async def recover() -> None:
        await dispatcher.recover()

    # a failed recovery is logged when it happens, not raised at the stop
    async with background_loop(recover(), name="dispatch:recover", what="re-dispatch of placed jobs", log=_log):
        yield
