"""Queue accounting for the placement loop: what a cycle charges to the hub's Queues, and who runs.

The loop keeps the hub's Queues in a list+watch cache (`controllers/queues.py`)
and, through `QueueAccounting`, passes them to `run_cycle` as `QueueQuota`s
(`cycle_queues`), with every gang that holds quota (`running`: a
`RunningGang` per placed, admitted or running job, not being deleted or
evicted: queue, priority, when it was placed, demand, the GPU model it is
charged to (`charge`: the one this loop placed it on), whether it borrowed
(condition QuotaReserved, reason Borrowed, written with the decision), when
its current copy last reported a checkpoint (status.checkpoint of that
cluster and epoch, `apis.checkpoint.checkpointed_at`: preemption ranks
victims of equal priority by the work their eviction loses), and
per node what its member pods hold, from the cluster's snapshot builder, or
its reservation while they are not bound). With no Queue at all and no job
naming one, `cycle_queues` is None: placement exactly as before queues.

- A job whose queue no longer selects its namespace waits
  (`queue_refuses`: Schedulable=False, NamespaceNotInQueue); one whose queue
  does not exist waits with QueueNotFound; one its queue has no room for
  waits with QuotaExceeded and placement's message ("queue vision uses 96
  of 96 A100 GPUs ...; waits for 8").
- Pods of queued (evicted, requeued) jobs still in a member are set aside
  in the views placement sees (`without_leftovers`): they are being
  deleted, and counting them would evict more gangs than needed.
- A running elastic gang (issue 19) lists its bound pods (`RunningGang.pods`,
  from status sync's index of this hub's member objects; every pod aged by
  its index, so newest first is highest index first) and its request, so
  preemption may plan to shrink it instead of evicting.
- Queue status (used, borrowed, pendingJobs, admittedJobs, condition
  Admitting) is computed after each cycle (`want_queue_status`) and written
  on change, coalesced, by the queues' status writer.
- Budgets (a Queue's spec.budget): before each cycle `update_spend` accrues
  each budgeted queue's spend from its jobs' running history since its
  stored status.spend (`queue_spend.accrue_spend`; jobs deleted since are
  kept in `departed` until accrued), and marks its gangs over budget
  (`GangRequest.over_budget`, which the pure "budget" filter reads: only
  already-paid clusters). status.spend is written at most every
  `queue_spend_interval_seconds`, sooner at a new month, after a deletion or
  when the OverBudget condition flips. Running jobs are never stopped.

A job found Placed when this hub started (decided by an earlier one) may
have member pods not bound yet, which the snapshot does not count: its
reservation is rebuilt (`rebuild_reservations`) once its cluster has synced.

Gangs a decision is preempting (`Preempting`, filled by `preemption.py`) do
not count as running while they are evicted, nor do the pods a shrink takes.

Must never: write anything but through the queue status writer it is handed,
or decide placement (that is `placement.run_cycle`'s, pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from federator.apis.checkpoint import checkpointed_at
from federator.apis.timestamps import parse_epoch
from federator.apis.jobkinds import SOURCE_KIND_ANNOTATION, JobKind, job_kind_by_source
from federator.apis.trainingjob import placed_replicas
from federator.apis.views import Body
from federator.controllers.decisions import CONDITION_QUOTA_RESERVED, REASON_BORROWED
from federator.controllers.jobs import (PHASE_PLACED, current_placement, gang_request, job_ref, phase_of, placed_at,
                                        placed_gang, queued_at)
from federator.controllers.placement_ports import MemberViews
from federator.controllers.queue_spend import (Budget, JobRuns, SpendUpdate, accrue_spend, queue_budget,
                                               running_intervals)
from federator.controllers.queues import CONDITION_OVER_BUDGET, BudgetState, queue_status
from federator.controllers.reservations import ReservationLedger
from federator.delegation.adapter import LABEL_INDEX, LABEL_ROLE
from federator.hub.kinds import selects_namespace
from federator.obs import get_logger
from federator.placement import GangRequest, Profile, QueueQuota, ReservationKind, Resources, RunningGang, RunningPod
from federator.placement.admission import QUOTA_EXCEEDED, QuotaLedger
from federator.placement.cycle import CycleResult
from federator.placement.gang import BudgetExceeded, ClusterTier
from federator.placement.snapshot import ClusterInfo, ClusterSnapshot

__all__ = ["MemberPod", "Preempting", "QueueAccounting", "QueueObjects", "QueueStatusSink", "ShrinkPlan",
           "fixed_size", "member_pod", "resource_version_of"]

_log = get_logger("controllers.placement")


def resource_version_of(job: Mapping[str, Any]) -> int:
    try:
        return int(Body(job).resource_version or 0)
    except ValueError:
        return 0


class QueueObjects(Protocol):
    """The hub's Queues (`queues.QueueCache`)."""

    @property
    def objects(self) -> Mapping[str, dict[str, Any]]:
        ...

    def quotas(self) -> dict[str, QueueQuota] | None:
        ...

    def labels_of(self, namespace: str) -> dict[str, str]:
        ...


class QueueStatusSink(Protocol):
    """Where the Queues' statuses go (`queues.QueueStatusWriter`: written on change, coalesced)."""

    def stored_status(self, name: str) -> Mapping[str, Any] | None:
        ...

    def want(self, name: str, status: dict[str, Any]) -> None:
        ...


@dataclass(frozen=True, slots=True)
class ShrinkPlan:
    """Where a decision shrinks a gang, and its pods that go (name -> (role, index)); no pods: the plan
    named pods this loop no longer knows, and the shrink is refused (decided again)."""

    cluster: str
    epoch: int
    pods: Mapping[str, tuple[str, int]]


@dataclass(slots=True)
class Preempting:
    """A job found Placed when this hub started (decided by an earlier one) may
have member pods not bound yet, which the snapshot does not count: its
reservation is rebuilt (`rebuild_reservations`) once its cluster has synced.

Gangs a decision is preempting, from the decision until its eviction or shrink is written."""

    #: uid -> (cluster, epoch) of a decision's victims: no longer counted as running, never chosen again
    evicting: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: uid -> a decision's shrink: its pods no longer count as the gang's
    shrinking: dict[str, ShrinkPlan] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberPod:
    """What the loop reads of one member pod of a gang."""

    name: str
    role: str
    #: -1 when its index label cannot be read
    index: int
    node: str
    #: bound, not terminal, not being deleted
    live: bool


def member_pod(pod: Mapping[str, Any], *, index_label: str = "") -> MemberPod | None:
    """One member pod as a `MemberPod`; None without a name. A pod without the hub's index label (one the
    member's operator made, operator mode) has its index under `index_label` (`InPlaceResize.index_label`)."""
    body = Body(pod)
    labels, spec, name = body.labels, body.spec, body.name
    if not name:
        return None
    raw = labels.get(LABEL_INDEX)
    if raw is None and index_label:
        raw = labels.get(index_label)
    number = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) < 10 else -1
    node = spec.get("nodeName")
    node = node if isinstance(node, str) else ""
    live = bool(node) and not body.deleting and body.phase not in ("Succeeded", "Failed")
    return MemberPod(name=name, role=str(labels.get(LABEL_ROLE) or ""), index=number, node=node, live=live)


def fixed_size(kind: JobKind, gang: GangRequest) -> str:
    """Why an elastic gang that `kind`'s own operator runs in its member keeps the size it was placed at ("" when
    the operator resizes every elastic role of it in place: `JobKind.in_place_resize`)."""
    resize = kind.in_place_resize
    elastic = [role.name for role in gang.roles if role.elastic]
    if resize is not None and all(name == resize.role for name in elastic):
        return ""
    return (f"its {kind.kind} runs under the member's own {kind.kind} operator, which cannot resize it in place: "
            f"it keeps the size it was placed at (evicted whole, if at all)")


class QueueAccounting:
    """See the module docstring. `jobs`, `active` and `queued` are the loop's job index (read only here)."""

    def __init__(self, *, queues: QueueObjects, queue_status: QueueStatusSink, profile: Profile,
                 ledger: ReservationLedger, members: MemberViews, preempting: Preempting,
                 jobs: Mapping[str, dict[str, Any]], active: Set[str], queued: Set[str],
                 clock: Callable[[], float] = time.time, currency: str = "USD",
                 spend_interval_seconds: float = 30.0) -> None:
        self.queues = queues
        self.queue_status = queue_status
        self.profile = profile
        self.ledger = ledger
        self.members = members
        self.preempting = preempting
        self.jobs = jobs
        self.active = active
        self.queued = queued
        self.clock = clock
        #: uid -> (cluster, epoch, GPU model) of the placements this process decided
        self.charged: dict[str, tuple[str, int, str | None]] = {}
        #: uid -> (what it was built from, the RunningGang)
        self.running_cache: dict[str, tuple[tuple[Any, ...], RunningGang]] = {}
        #: uid -> ((spec generation, queue tiers, queued at), its GangRequest) of the active jobs
        self.gang_cache: dict[str, tuple[Any, GangRequest]] = {}
        self._quota_filter_warned = False
        self._budget_filter_warned = False
        #: the hub's one currency (MemberCluster prices, status.spend) and how often status.spend is written
        self.currency = currency
        self.spend_interval_seconds = spend_interval_seconds
        #: queue -> this cycle's accrued spend (`update_spend`), and the queues over their budget now
        self.spend: dict[str, SpendUpdate] = {}
        self.over_budget: dict[str, BudgetExceeded] = {}
        #: uid -> (job as last seen, queue, when it went) of deleted jobs whose GPU time is not accrued yet
        self.departed: dict[str, tuple[dict[str, Any], str, float]] = {}
        #: uid -> (resourceVersion, running stretches, GPUs, GPU model) of the jobs of budgeted queues
        self._runs_cache: dict[str, tuple[int, tuple[Any, ...], int, str | None]] = {}
        #: cluster -> its last seen ClusterInfo (the price of a cluster no longer in the snapshots)
        self._cluster_infos: dict[str, ClusterInfo] = {}
        self._budget_of: dict[str, Budget] = {}
        self._unreadable_budgets: set[tuple[str, str]] = set()

    def charge(self, uid: str, *, cluster: str, epoch: int, gpu_model: str | None) -> None:
        """This loop placed the job at (cluster, epoch) on `gpu_model`: it is charged to that model."""
        self.charged[uid] = (cluster, epoch, gpu_model)

    def running_gang(self, uid: str) -> RunningGang | None:
        """The job's RunningGang as the last `running` built it."""
        cached = self.running_cache.get(uid)
        return cached[1] if cached is not None else None

    def queue_refuses(self, gang: GangRequest, job: Mapping[str, Any]) -> str | None:
        """Why the job's queue may not take it now: it exists but no longer selects the job's namespace
        (a missing queue is placement's QueueNotFound). None when it may."""
        if not gang.queue:
            return None
        queue = self.queues.objects.get(gang.queue)
        namespace = job_ref(job).namespace
        if queue is None or selects_namespace(queue, namespace, self.queues.labels_of(namespace)):
            return None
        return (f"queue {gang.queue} does not select namespace {namespace} (its spec.namespaces changed after the "
                f"job was created); the job waits until it does, or until spec.queue names a queue that does")

    def cycle_queues(self, gangs: list[GangRequest]) -> dict[str, QueueQuota] | None:
        """The cycle's queues: None (placement as before queues existed) when the hub holds no Queue and no
        gang names one; else every readable Queue (a gang naming a missing one waits: QueueNotFound)."""
        quotas = self.queues.quotas()
        if quotas is None and not any(gang.queue for gang in gangs):
            return None
        if "quota" not in self.profile.filters:
            if not self._quota_filter_warned:
                self._quota_filter_warned = True
                _log.warning("the placement profile has no 'quota' filter: Queues are not enforced",
                             profile=self.profile.name)
            return None
        return dict(quotas or {})

    def without_leftovers(self, snapshots: Mapping[str, ClusterSnapshot]) -> dict[str, ClusterSnapshot]:
        """The snapshots with the pods of queued jobs released: what an evicted (or otherwise requeued) gang
        left in a member is being deleted (its next dispatch waits for that, and the GC takes what is
        missed), so it is room for the gang that made it, not a reason to evict more gangs."""
        views = dict(snapshots)
        for name, snapshot in snapshots.items():
            leftovers = [uid for uid in snapshot.bound_pods if uid in self.queued]
            builder = self.members.amounts(name, snapshot) if leftovers else None
            if builder is None:
                continue
            released: dict[str, Resources] = {}
            for uid in leftovers:
                job = self.jobs.get(uid)
                epoch = current_placement(job)[1] if job is not None else 0
                for node, amount in builder.job_amounts(uid, epoch=epoch, up_to=True).items():
                    previous = released.get(node)
                    released[node] = amount if previous is None else previous + amount
            try:
                views[name] = snapshot.with_allocation_changes(released, release=True)
            except ValueError as e:  # would mean the builder and its snapshot disagree: keep the snapshot
                _log.warning("could not set a requeued gang's leftover pods aside", cluster=name, error=str(e))
        return views

    def _tiers(self, job: Mapping[str, Any]) -> tuple[tuple[ClusterTier, ...], float | None]:
        """The spill-over tiers of the job's queue and when the job last entered the placement queue (what
        they count from); ((), None) for a queue without tiers."""
        queue = Body(job).spec.get("queue")
        quota = (self.queues.quotas() or {}).get(queue) if isinstance(queue, str) else None
        if quota is None or not quota.tiers:
            return (), None
        return quota.tiers, queued_at(job)

    def tiered(self, gang: GangRequest, job: Mapping[str, Any]) -> GangRequest:
        """`gang` (`gang_request(job)`) with its queue's spill-over tiers: what every placement of a queued
        job is asked about."""
        tiers, since = self._tiers(job)
        over = self.over_budget.get(gang.queue) if gang.queue else None
        if over is not None:
            gang = replace(gang, over_budget=over)
        return replace(gang, tiers=tiers, waiting_since=since) if tiers else gang

    def gang_of(self, uid: str, job: Mapping[str, Any]) -> GangRequest | None:
        """The job's GangRequest (`tiered`), rebuilt when the spec, the queue's tiers or when the job entered
        the queue changed."""
        queue = Body(job).spec.get("queue")
        key = (Body(job).generation, *self._tiers(job),
               self.over_budget.get(queue) if isinstance(queue, str) else None)
        cached = self.gang_cache.get(uid)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            gang = self.tiered(gang_request(job, now=self.clock()), job)
        except (ValueError, TypeError):
            return None
        self.gang_cache[uid] = (key, gang)
        return gang

    def rebuild_reservations(self, unreserved: set[str], snapshots: Mapping[str, ClusterSnapshot], *,
                             now: float) -> None:
        """Reserve again what the `unreserved` jobs (found Placed at start: decided by an earlier hub) hold,
        until their pods show as bound (`ReservationLedger.rebuild`); each leaves `unreserved` once done, or
        once it needs none, but not while its cluster has not synced (tried again next cycle)."""
        for uid in list(unreserved):
            job = self.jobs.get(uid)
            cluster, _ = current_placement(job) if job is not None else (None, 0)
            if job is None or phase_of(job) != PHASE_PLACED or cluster is None or self.ledger.get(uid) is not None:
                unreserved.discard(uid)
                continue
            snapshot = snapshots.get(cluster)
            if snapshot is None or not snapshot.nodes:
                continue  # not synced yet (a restarted hub publishes empty snapshots before its first LIST)
            unreserved.discard(uid)
            try:
                gang = gang_request(job, now=now)
            except (ValueError, TypeError):
                continue
            self.ledger.rebuild(gang, snapshot, self.profile, now=now)

    def running(self, snapshots: Mapping[str, ClusterSnapshot]) -> list[RunningGang]:
        """Every gang that holds quota and room (placed, admitted or running; not finished, not being deleted
        or evicted), with what its pods hold per node, or its reservation while they are not bound."""
        out: list[RunningGang] = []
        for uid in sorted(self.active):
            if uid in self.preempting.evicting:
                continue
            job = self.jobs.get(uid)
            cluster, epoch = current_placement(job) if job is not None else (None, 0)
            if job is None or cluster is None:
                continue
            snapshot = snapshots.get(cluster)
            reservation = self.ledger.get(uid)
            if reservation is not None and (reservation.kind is not ReservationKind.PLACED
                                            or reservation.cluster != cluster):
                reservation = None
            bound = snapshot.bound_pods.get(uid, 0) if snapshot is not None else -1
            gang = self.gang_of(uid, job)
            if gang is None:
                continue
            started = placed_at(job, epoch=epoch) or gang.submitted_at
            operated = self.operated_kind(job, cluster=cluster, epoch=epoch) if gang.elastic else None
            fixed = fixed_size(operated, gang) if operated is not None else ""
            # an elastic gang lists its bound pods (what a preemption may shrink), unless its reservation
            # still stands for pods not bound yet, or its size is fixed where it runs
            resize = operated.in_place_resize if operated is not None else None
            pods = self._member_pods(uid, gang, job, cluster=cluster, epoch=epoch, started=started,
                                     index_label=resize.index_label if resize is not None else "") \
                if gang.elastic and reservation is None and not fixed else ()
            basis = (resource_version_of(job), bound, id(reservation), self.charged.get(uid), pods, fixed)
            cached = self.running_cache.get(uid)
            if cached is not None and cached[0] == basis:
                out.append(cached[1])
                continue
            if reservation is not None:
                amounts: Mapping[str, Resources] = reservation.amounts
            elif pods:
                amounts = {}  # the sum of its pods'
            else:
                builder = self.members.amounts(cluster, snapshot)
                amounts = builder.job_amounts(uid, epoch=epoch) if builder is not None else {}
            try:
                gang_running = RunningGang(
                    uid=uid, key=gang.key, cluster=cluster, queue=gang.queue, priority=gang.priority,
                    started_at=started,
                    demand=placed_gang(job, gang).total,
                    gpu_model=self._model_of(uid, gang, cluster=cluster, epoch=epoch,
                                             amounts=amounts or _pod_amounts(pods), snapshot=snapshot),
                    amounts=amounts, borrowed=_borrowed(job), pods=pods, request=gang if pods or fixed else None,
                    fixed=fixed, checkpointed_at=checkpointed_at(job, cluster=cluster, epoch=epoch),
                )
            except (ValueError, TypeError) as e:
                _log.warning("a placed job cannot be counted against its queue", job=gang.key, error=str(e))
                continue
            self.running_cache[uid] = (basis, gang_running)
            out.append(gang_running)
        return out

    def operated_kind(self, job: Mapping[str, Any], *, cluster: str, epoch: int) -> JobKind | None:
        """The job's source kind when the member's own operator runs its gang at (cluster, epoch) (operator
        mode: its member copy is in status sync's index of the cluster), else None."""
        source_key = Body(job).annotations.get(SOURCE_KIND_ANNOTATION)
        kind = job_kind_by_source(source_key) if isinstance(source_key, str) else None
        index = self.members.pods(cluster) if kind is not None else None
        if kind is None or index is None or index.member_copy(job_ref(job).uid, kind.source_key, epoch) is None:
            return None
        return kind

    def _member_pods(self, uid: str, gang: GangRequest, job: Mapping[str, Any], *, cluster: str, epoch: int,
                     started: float, index_label: str = "") -> tuple[RunningPod, ...]:
        """The bound, live pods of an elastic gang at (cluster, epoch), from status sync's index of this hub's
        member objects; () when the index is not ready or a pod cannot be read (nothing is planned on it).

        Every pod gets the gang's placement time: a pod's age is its index (a gang's pods are created in
        index order, and each growth appends indices after the highest), so placement's newest-first
        removes the highest indices first. Pods beyond their role's placed count (the highest indices) are
        left out: a shrink written before its pods went (`elastic.ElasticResizer.trim_and_fill` deletes them)."""
        index = self.members.pods(cluster)
        if index is None:
            return ()
        requests = {role.name: role.requests for role in gang.roles}
        shrink = self.preempting.shrinking.get(uid)
        going = shrink.pods if shrink is not None else {}
        sizes = placed_replicas(job)
        out: list[RunningPod] = []
        for pod in index.gang(uid, epoch)[1]:
            view = member_pod(pod, index_label=index_label)
            if view is None:
                return ()
            name, role, number, node, live = view.name, view.role, view.index, view.node, view.live
            if not live or name in going:
                continue
            if role not in requests or number < 0 or not node:
                return ()
            try:
                out.append(RunningPod(name=name, role=role, node=node, requests=requests[role], started_at=started,
                                      index=number))
            except (ValueError, TypeError):
                return ()
        out.sort(key=lambda p: (p.role, p.index))
        kept: list[RunningPod] = []
        for role, count in sizes.items():
            kept.extend([p for p in out if p.role == role][:count])
        return tuple(kept)

    def _model_of(self, uid: str, gang: GangRequest, *, cluster: str, epoch: int, amounts: Mapping[str, Resources],
                  snapshot: ClusterSnapshot | None) -> str | None:
        """The GPU model a placed gang is charged to: the one this process placed it on, else the model of
        the nodes its pods (or reservation) hold GPUs on, else its first accepted model, else the cluster's."""
        if not gang.needs_gpu:
            return None
        charged = self.charged.get(uid)
        if charged is not None and charged[:2] == (cluster, epoch) and charged[2]:
            return charged[2]
        if snapshot is not None:
            for node_name, amount in sorted(amounts.items()):
                node = snapshot.nodes.get(node_name)
                if amount.gpu and node is not None and node.gpu_model:
                    return node.model_key
        if gang.gpu_models:
            return gang.gpu_models[0]
        models = snapshot.index.gpu_models if snapshot is not None else ()
        return models[0] if models else "unknown"


    # ------------------------------------------------------------ budgets

    def job_gone(self, job: Mapping[str, Any], *, now: float) -> None:
        """A job was deleted: its GPU time not accrued yet is kept (`departed`) until its queue's spend is."""
        queue = Body(job).spec.get("queue")
        uid = job_ref(job).uid
        if not isinstance(queue, str) or not queue or not uid:
            return
        obj = self.queues.objects.get(queue)
        if obj is None or Body(obj).spec.get("budget") is None or not running_intervals(job):
            self._runs_cache.pop(uid, None)
            return
        self.departed[uid] = (dict(job), queue, now)

    def _price(self, cluster: str, model: str | None) -> float:
        info = self._cluster_infos.get(cluster)
        return info.price(model) if info is not None else 0.0

    def _runs_of(self, uid: str, job: Mapping[str, Any], *, gone_at: float | None = None) -> JobRuns | None:
        """What the job ran (its stretches, GPUs as placed, the price of each cluster for its GPU model)."""
        rv = resource_version_of(job)
        cached = self._runs_cache.get(uid)
        if cached is not None and cached[0] == rv and gone_at is None:
            _, intervals, gpus, model = cached
        else:
            intervals = tuple(running_intervals(job, gone_at=gone_at))
            try:
                gang = gang_request(job, now=self.clock()) if intervals else None
            except (ValueError, TypeError):
                gang = None
            if gang is None:  # never ran (or unreadable): remembered, so that it is not read again every cycle
                self._runs_cache[uid] = (rv, (), 0, cached[3] if cached is not None else None)
                return None
            gpus = placed_gang(job, gang).total.gpu
            model = cached[3] if cached is not None else None
            charged = self.charged.get(uid)
            running = self.running_gang(uid)
            if charged is not None and charged[2]:
                model = charged[2]
            elif running is not None and running.gpu_model:
                model = running.gpu_model
            elif model is None and len(gang.gpu_models) == 1:
                model = gang.gpu_models[0]
            self._runs_cache[uid] = (rv, intervals, gpus, model)
        if not intervals:
            return None
        return JobRuns(intervals=intervals, gpus=gpus,
                       price={i.cluster: self._price(i.cluster, model) for i in intervals})

    def _budgets(self) -> dict[str, Budget]:
        budgets: dict[str, Budget] = {}
        for name, obj in self.queues.objects.items():
            try:
                budget = queue_budget(Body(obj).spec)
            except (ValueError, TypeError) as e:
                key = (name, Body(obj).resource_version)
                if key not in self._unreadable_budgets:
                    self._unreadable_budgets.add(key)
                    _log.warning("a Queue's budget cannot be read; it is not enforced", queue=name, error=str(e))
                continue
            if budget is not None:
                budgets[name] = budget
        return budgets

    def _stored_spend(self, name: str) -> Mapping[str, Any] | None:
        spend = (self.queue_status.stored_status(name) or {}).get("spend")
        return spend if isinstance(spend, Mapping) else None

    def update_spend(self, snapshots: Mapping[str, ClusterSnapshot], *, now: float) -> None:
        """Accrue every budgeted queue's spend up to `now` (module docstring) and mark the queues over budget,
        whose gangs `tiered` then sends only to already-paid clusters. Before the cycle collects its gangs."""
        for name, snapshot in snapshots.items():
            self._cluster_infos[name] = snapshot.info
        budgets = self._budgets()
        runs: dict[str, list[JobRuns]] = {name: [] for name in budgets}
        burn: dict[str, tuple[int, float]] = {}
        if budgets:
            for uid, job in self.jobs.items():
                queue = Body(job).spec.get("queue")
                if not isinstance(queue, str) or queue not in budgets:
                    continue
                job_runs = self._runs_of(uid, job)
                if job_runs is None:
                    continue
                runs[queue].append(job_runs)
                last = job_runs.intervals[-1]
                if last.end is None:
                    gpus, money = burn.get(queue, (0, 0.0))
                    burn[queue] = (gpus + job_runs.gpus, money + job_runs.gpus * job_runs.price[last.cluster])
        for uid, (job, queue, gone_at) in list(self.departed.items()):
            accrued = parse_epoch((self._stored_spend(queue) or {}).get("lastAccruedAt"))
            if queue not in budgets or (accrued is not None and accrued >= gone_at):
                self.departed.pop(uid, None)
                self._runs_cache.pop(uid, None)
                continue
            job_runs = self._runs_of(uid, job, gone_at=gone_at)
            if job_runs is not None:
                runs[queue].append(job_runs)
        self.spend, self.over_budget, self._budget_of = {}, {}, budgets
        if budgets and "budget" not in self.profile.filters and not self._budget_filter_warned:
            self._budget_filter_warned = True
            _log.warning("the placement profile has no 'budget' filter: Queue budgets are tracked, not enforced",
                         profile=self.profile.name)
        for name, budget in budgets.items():
            stored = self._stored_spend(name)
            gpus, money = burn.get(name, (0, 0.0))
            update = accrue_spend(stored, runs=runs[name], burn_gpus=gpus, burn_per_hour=money, budget=budget,
                                  currency=self.currency, now=now)
            self.spend[name] = update
            if update.over is not None:
                # the numbers the queue's status shows (written at most every spend interval), so that the
                # why-not of its waiting jobs does not change every cycle
                shown = _spent(stored, update.spend["period"], budget)
                self.over_budget[name] = update.over if shown is None or shown < budget.limit \
                    else replace(update.over, spent=shown)

    def _budget_state(self, name: str, *, now: float) -> BudgetState | None:
        """What queue `name`'s status shows of its budget this cycle: the spend just accrued when a write is due
        (a new month, a deleted job's time, the over/under state flipped, or the spend interval passed), else
        the stored spend; and the OverBudget condition."""
        update = self.spend.get(name)
        budget = self._budget_of.get(name)
        if update is None or budget is None:
            return None
        stored = self._stored_spend(name)
        status = self.queue_status.stored_status(name) or {}
        shown_over = any(isinstance(c, Mapping) and c.get("type") == CONDITION_OVER_BUDGET
                         and c.get("status") == "True" for c in status.get("conditions") or ())
        accrued = parse_epoch((stored or {}).get("lastAccruedAt"))
        period = update.spend["period"]
        due = (stored is None or update.new_period or accrued is None or _spent(stored, period, budget) is None
               or shown_over != (update.over is not None) or now - accrued >= self.spend_interval_seconds
               or any(queue == name for _, queue, _ in self.departed.values()))
        spend = dict(update.spend if due or stored is None else stored)
        digits = 1 if budget.amount is None else 2
        used = _spent(spend, period, budget) or 0.0
        text = f"{used:,.{digits}f} of {budget.limit:,.{digits}f} {budget.unit} this month"
        if budget.amount is not None and budget.currency != self.currency:
            return BudgetState(spend=spend, state="Unknown", reason="CurrencyMismatch", message=(
                f"the budget is in {budget.currency} but the hub prices GPU-hours in {self.currency} (its "
                f"--currency): it is not enforced; this month's spend is {spend.get('spent')} {self.currency}"))
        if update.over is not None:
            return BudgetState(spend=spend, state="True", reason="OverBudget", message=(
                f"over its budget ({text}): its new jobs go only to already-paid clusters (GPU-hour price 0) or "
                f"wait until next month; running jobs keep running"))
        return BudgetState(spend=spend, state="False", reason="WithinBudget", message=f"within its budget ({text})")

    def want_queue_status(self, queues: Mapping[str, QueueQuota], running: list[RunningGang], *,
                           result: CycleResult | None, now: float) -> None:
        """Each Queue's status after this cycle (written by `queue_status` only when it changed)."""
        usage = result.usage if result is not None and result.usage else QuotaLedger(queues, running).usage()
        pending: dict[str, int] = {}
        for uid in self.queued:
            queue = Body(self.jobs[uid]).spec.get("queue")
            if isinstance(queue, str) and queue:
                pending[queue] = pending.get(queue, 0) + 1
        blocked: dict[str, list[str]] = {}
        for unplaced in result.unplaced if result is not None else ():
            block = unplaced.quota
            if block is not None and block.code == QUOTA_EXCEEDED:
                blocked.setdefault(block.queue, []).append(f"{unplaced.gang_key}: {block.message}")
        for name in queues:
            obj = self.queues.objects.get(name)
            if obj is None:
                continue
            generation = Body(obj).generation
            waiting = blocked.get(name, [])
            self.queue_status.want(name, queue_status(
                self.queue_status.stored_status(name), usage=usage.get(name), pending=pending.get(name, 0),
                waiting_for_quota=len(waiting), head_block=waiting[0] if waiting else "",
                generation=generation or None, now=now, budget=self._budget_state(name, now=now)))


def _spent(stored: Mapping[str, Any] | None, period: str, budget: Budget) -> float | None:
    """What a stored status.spend of `period` counts against `budget` (money or GPU-hours); None without one."""
    if stored is None or stored.get("period") != period:
        return None
    try:
        return float(stored.get("gpuHours") or 0.0) if budget.amount is None else float(str(stored.get("spent")))
    except (TypeError, ValueError):
        return None


def _pod_amounts(pods: tuple[RunningPod, ...]) -> dict[str, Resources]:
    amounts: dict[str, Resources] = {}
    for pod in pods:
        previous = amounts.get(pod.node)
        amounts[pod.node] = pod.requests if previous is None else previous + pod.requests
    return amounts



def _borrowed(job: Mapping[str, Any]) -> bool:
    """Whether the job's placement runs on quota its queue borrowed (its QuotaReserved condition says so)."""
    for condition in Body(job).status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_QUOTA_RESERVED:
            return condition.get("status") == "True" and condition.get("reason") == REASON_BORROWED
    return False

