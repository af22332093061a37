"""The `federator` policy of a replay: the real placement engine over snapshots of the member model.

What the hub does, in virtual time:
- each member's nodes are kept as a `placement.ClusterSnapshot` (the
  member cluster's declared info from the clusters file; every node's
  allocatable, allocated = what the member's ledger counts as used, GPU
  model and product label), updated node by node after the member binds or
  releases a gang, with a new resourceVersion and, in `bound_pods`, the
  gangs it now shows: what cluster sync builds from watch events;
- a submitted job becomes a `GangRequest` (one role of `pods` workers,
  network, gpuModels and the matching nodeSelector, its dataset, its
  submission time) and waits in the hub queue;
- at every instant something changed, `placement.run_cycle` runs with the
  hub's default `Profile` (filters, scores and weights as shipped: data
  locality, preference, packing, topology, headroom, cost; head-of-line
  holds after 600 s, one per cluster) and the reservation book it returned
  last time (assume, then delegate); every decision is dispatched at once
  (the gang's PodGroup and pods written into the chosen member, whose
  scheduler binds it), the unplaced stay queued, and a gang still queued
  when it becomes old enough to hold gets a cycle at that instant.

A job's gang carries its priority (0 unless the replay drew priorities),
and a dispatched gang's pods are pinned to the GPU model placement chose
(a required node affinity on `nvidia.com/gpu.product`, as the hub's
delegation writes), so the member binds it on that model.

With queues (`queues=`: the `federator-queues` policy, `replay/queues.py`
builds them from the trace's clusters), each gang names its queue (its
trace cluster) and every cycle also gets the queues and the running
gangs: every gang dispatched and not finished, with the queue it is
charged to, its priority, its start, the GPU model it runs on, whether it
was admitted on borrowed quota (the decision's `borrowed`) and its
per-node amounts from the member's binding (none yet for a copy still
waiting in its member), and when its run last checkpointed
(`Engine.last_checkpoint`, refreshed before each cycle: placement ranks
victims of equal priority by the GPU-seconds their eviction loses, as the
hub does from status.checkpoint). The profile's `victims_by_lost_work`
turns that ranking off (the policy `federator-queues-by-start`: victims of
equal priority most recently started first, as before checkpoints; the
same jobs and checkpoints). A decision with a `preemption` is carried out
before its gang is dispatched: each victim's copy is evicted whole
(`Engine.evict`: its PodGroup and pods deleted, counted as writes, its
work lost) and its job requeued with its original submission time and
epoch + 1; then the preemptor is dispatched into the cluster where the
room was made, where its member binds it at once. A cycle that preempted
is followed by another at the same instant, so that the victims are
placed elsewhere at once if they fit (as the hub's next cycle would).
`preemptions` records each one (who, where, whom, why).

Which queued gangs go into a cycle: run_cycle's answer for a gang that
cannot be placed and cannot take a hold is "unplaced, no hold", whatever
else is in the cycle. So, to keep a 69,000-job replay fast, a cycle is
given the gangs that hold a hold, and per group (signature: shape,
network, GPU models, what the filters read; queue; priority) the oldest
gangs up to how many of that group could possibly be placed or take a
hold: the count of such pods the clusters that pass the profile's own
cheap filters hold by free GPUs node by node
(`ClusterIndex.max_pods_by_free_gpus`, on the snapshots without
reservations, so never less than the cycle's own views), plus the hold
slots of every cluster where it could hold (taken or not: a holder placed
in the cycle frees its slot for the next), and with queues, plus how many
running gangs its queue's policy could evict for it (its queue's gangs of
lower priority, the cohort's gangs admitted on borrowed quota: each
preemption evicts at least one) and one for the quota hold an aged gang
may take. Gangs of one group are ordered alike and fail alike, so the
cycle decides what one over the whole queue would (with queues an
eviction can free quota for a gang of the group behind one that found
none; the tests compare selection and the whole queue on contended
traces with preemption); `exhaustive_queue=True` turns the selection off,
and a queue of 16 gangs or fewer goes in whole.

Elastic gangs (`--elastic-share`): the GangRequest's role has
min_replicas (the job's minimum) and max_replicas (its pods), so
`run_cycle` judges it at its minimum and places it at the largest size
that fits in the cluster chosen (`Decision.replicas`); the gang is
dispatched with that many pods and minMember = its minimum, and its
member binds them. The grow pass is the hub's (`controllers/elastic.py`
elastic pass, with its defaults): `placement.plan_growth` over the running
elastic gangs below their max, the queue (the gangs a cycle would be
given: pending gangs first), the reservation book (reconciled with the
snapshots first, as a cycle does) and the times of each gang's placement
or last resize (cooldown GROW_COOLDOWN_SECONDS); each growth's new pods
are created in its member (`Engine.grow`), which binds them. The hub runs
the pass every ELASTIC_TICK_SECONDS; here it runs one tick after a gang
left a cluster where an elastic gang runs below its max (the only event
that frees room in a replay without queues), and when a cooldown that
held a gang back ends. Not with queues (`--queues` and `--elastic-share`
are refused together): running gangs would need their pods for quota
and shrinking.

Tiers (`tiers=`: the `federator-tiers` policy, the clusters file's
`tiers:`): every gang carries them as a Queue's spec.tiers reach
placement (`GangRequest.tiers`, `waiting_since` = its submission: a gang
leaves the hub queue only when placed), so the real "tier" filter and
score decide: the first tier at once, the next once the gang has waited
the spillAfterSeconds before it, a lower tier always preferred. A gang
gets a cycle at the instant each of its tiers opens; the selection's memo
of cheap-filter answers is keyed by how many tiers the group's oldest gang
has open (the oldest has the most, so its answer bounds the group's).
The cluster's labels (clusters file `labels`) are what tiers select, and
its `cost` (perGpuHour, perModel) is what the cost score reads.

Must never: place through anything but `run_cycle`, or see the other
policies' members.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from immutables import Map

from federator.placement import (
    EMPTY_BOOK,
    ClusterInfo,
    ClusterSnapshot,
    Fabric,
    GangRequest,
    Location,
    Network,
    NodeState,
    Profile,
    QueueQuota,
    RdmaKind,
    ReservationBook,
    ReservationKind,
    Resources,
    RoleRequest,
    RunningGang,
    RunningPod,
    Victim,
    WithinQueue,
    plan_growth,
    reconcile_reservations,
    run_cycle,
)
from federator.placement.decision import Decision
from federator.placement.gang import ClusterTier
from federator.placement.framework import GANG_FIT, EvalContext, FederationStats, FilterResult
from federator.placement.nodefit import candidate_gpu_models
from federator.placement.plugins import default_registry
from federator.placement.plugins.gang_fit import EXCEEDS_CAPACITY
from federator.replay.attributes import ReplayJob
from federator.replay.engine import Engine, PolicyBase
from federator.replay.member import GPU_PRODUCT_LABEL, GangCopy, Member
from federator.replay.queues import QUEUE_POLICY, QUEUE_POLICY_BY_START
from federator.sim.fit import CPU, GPU, MEMORY

__all__ = ["TIER_POLICY", "FederatorPolicy", "PreemptionRecord", "gang_request_of"]

# federator with the clusters file's tiers (`--tiers`): every gang carries them as its queue's spec.tiers.
TIER_POLICY = "federator-tiers"

# A queue this short goes into the cycle whole: choosing would cost more than it saves.
_SELECT_ABOVE = 16
# More evictions of one job at one instant than this is a cycle of preemptions, not a decision.
_MAX_EVICTIONS_AT_ONCE = 3


# The hub's elastic pass: its tick and the cooldown after a placement or resize (controllers/placement.py's
# defaults, HubSettings.elastic.tick_seconds and .grow_cooldown_seconds).
ELASTIC_TICK_SECONDS = 5.0
GROW_COOLDOWN_SECONDS = 60.0

# (signature, queue, priority): gangs of one group are ordered alike and fail alike.
_Group = tuple[Hashable, str, int]


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """One preemption carried out: at `at`, `preemptor` was placed in `cluster` after evicting `victims`."""

    at: float
    preemptor: str
    queue: str
    priority: int
    cluster: str
    victims: tuple[Victim, ...]


@dataclass(slots=True)
class _ElasticRun:
    """An elastic gang dispatched by the hub: its copy, its request, the model it runs on, its last resize."""

    copy: GangCopy
    gang: GangRequest
    model: str | None
    resized_at: float


def _requests_of(job: ReplayJob) -> Resources:
    return Resources(job.cpu_milli_per_pod, job.memory_per_pod, job.gpus_per_pod)


def gang_request_of(job: ReplayJob, *, queue: str = "", tiers: tuple[ClusterTier, ...] = ()) -> GangRequest:
    """The GangRequest the hub builds for a job of the replay (what `controllers.jobs.gang_request` reads);
    `tiers`: its queue's spill-over order, counted from the job's submission (it never leaves the queue)."""
    low, high = (job.low, job.pods) if job.elastic else (None, None)
    return GangRequest(
        key=f"{job.trace_cluster}/{job.uid}",
        uid=job.uid,
        roles=(RoleRequest("worker", job.pods, _requests_of(job), min_replicas=low, max_replicas=high),),
        network=Network(job.network),
        gpu_models=(job.gpu_model,) if job.gpu_model else (),
        datasets=(job.dataset,) if job.dataset else (),
        node_selector={GPU_PRODUCT_LABEL: job.gpu_model} if job.gpu_model else {},
        priority=job.priority,
        submitted_at=job.submitted,
        queue=queue,
        tiers=tiers,
        waiting_since=job.submitted if tiers else None,
    )


def _signature(gang: GangRequest) -> Hashable:
    return (gang.shape, gang.ranges, gang.network, gang.gpu_models, tuple(sorted(gang.node_selector.items())),
            gang.tiers)


def _info(member: Member) -> ClusterInfo:
    spec = member.spec
    rdma = spec.fabric == "rdma"
    return ClusterInfo(
        location=Location(spec.location),
        fabric=Fabric(spec.fabric),
        rdma_kind=RdmaKind.INFINIBAND if rdma else None,
        bandwidth_gbps=spec.bandwidth_gbps,
        labels={**spec.labels, "federator.dev/fabric": spec.fabric},
        cost_per_gpu_hour=spec.cost_per_gpu_hour,
        cost_per_model=dict(spec.cost_per_model),
        datasets=dict(spec.datasets),
    )


def _node_state(member: Member, name: str, previous: NodeState | None) -> NodeState:
    node = member.ledger.nodes[name]
    used = node.used
    allocated = Resources(max(0, used.get(CPU, 0)), max(0, used.get(MEMORY, 0)), max(0, used.get(GPU, 0)))
    if previous is not None:
        return previous.with_allocated(allocated)
    alloc = node.allocatable
    return NodeState(
        name=name,
        allocatable=Resources(alloc.get(CPU, 0), alloc.get(MEMORY, 0), alloc.get(GPU, 0)),
        allocated=allocated,
        gpu_model=node.labels[GPU_PRODUCT_LABEL],
        labels=dict(node.labels),
    )


class FederatorPolicy(PolicyBase):
    name = "federator"

    def __init__(
        self,
        *,
        profile: Profile | None = None,
        exhaustive_queue: bool = False,
        queues: Mapping[str, QueueQuota] | None = None,
        tiers: tuple[ClusterTier, ...] = (),
    ) -> None:
        super().__init__()
        self.profile = profile or Profile()
        self.exhaustive_queue = exhaustive_queue
        self.queues: dict[str, QueueQuota] | None = dict(queues) if queues is not None else None
        if self.queues is not None and tiers:
            raise ValueError("a replay with queues takes no tiers (federator-tiers is federator without queues)")
        self.tiers = tuple(tiers)
        if self.queues is not None:
            self.name = QUEUE_POLICY if self.profile.victims_by_lost_work else QUEUE_POLICY_BY_START
        elif self.tiers:
            self.name = TIER_POLICY
        self.book: ReservationBook = EMPTY_BOOK
        self.snapshots: dict[str, ClusterSnapshot] = {}
        self._rv: dict[str, int] = {}
        # group -> {uid: (job, gang)} in queue order (submission time, then key)
        self._queue: dict[_Group, dict[str, tuple[ReplayJob, GangRequest]]] = {}
        self._group_of: dict[str, _Group] = {}
        # With queues: every gang dispatched and not finished (uid -> its gang, copy, model, borrowed).
        self._placed: dict[str, tuple[GangRequest, str | None, bool]] = {}
        self._copies: dict[str, GangCopy] = {}
        self._running: dict[str, RunningGang] = {}
        # Per cluster: running gangs per (queue, priority), and those admitted on borrowed quota per queue;
        # GPUs running per (queue, model).
        self._running_by: dict[str, Counter[tuple[str, int]]] = {}
        self._borrowed_by: dict[str, Counter[str]] = {}
        self._used: Counter[tuple[str, str | None]] = Counter()
        self.preemptions: list[PreemptionRecord] = []
        # Preemptors their member did not bind at once (the room made was not enough): never, if all is right.
        self.preemptors_not_bound = 0
        # (instant, uid) -> evictions of that job at that instant: a job evicted again and again at one
        # instant is a cycle of preemptions (placement's rules must make one impossible), an error here.
        self._evicted_now: Counter[str] = Counter()
        self._evicted_at = float("nan")
        # cluster -> {uid: pods} bound there whose placed reservation the book may still hold
        self._shown: dict[str, dict[str, int]] = {}
        self._changed = True
        # Clusters whose member bound or released a gang, or whose shown gangs changed, since the last sync.
        self._stale: set[str] = set()
        self._federation: FederationStats | None = None
        self._cheap = default_registry().resolve(self.profile).cheap_checks
        # cluster -> (snapshot the memo is for, {signature: (filter, first rejection) or None})
        self._memo: dict[str, tuple[ClusterSnapshot, dict[Hashable, tuple[str, FilterResult] | None]]] = {}
        self.cycles = 0
        self.gangs_evaluated = 0
        # Cycles that ended with at least one head-of-line hold in the book.
        self.cycles_with_holds = 0
        self.decisions: list[tuple[float, str, str]] = []
        # Elastic gangs dispatched and not finished, and the time the next grow pass is due (None: none is).
        self._elastic: dict[str, _ElasticRun] = {}
        self._grow_at: float | None = None
        self.growths = 0

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        if self.queues is not None:
            unknown = sorted({job.trace_cluster for job in engine.jobs} - set(self.queues))
            if unknown:
                raise ValueError(f"jobs of trace cluster(s) {', '.join(unknown)} have no queue")
        for name, member in engine.members.items():
            nodes = [_node_state(member, n.name, None) for n in member.ledger.ordered_nodes()]
            self._rv[name] = 1
            self.snapshots[name] = ClusterSnapshot.build(name=name, info=_info(member), nodes=nodes,
                                                         resource_version="1")
            self._shown[name] = {}
            member.take_changed_nodes()

    # ------------------------------------------------------------ engine hooks

    def submit(self, job: ReplayJob) -> None:
        self._enqueue(job, gang_request_of(job, queue=job.trace_cluster if self.queues is not None else "",
                                           tiers=self.tiers))
        # Once old enough it may take a head-of-line hold: make sure a cycle runs then.
        self.e.timer(job.submitted + self.profile.hold_after_seconds, ("aged", job.uid))
        # And when each of its next tiers opens (the tier filter lets it there from that instant).
        opens = job.submitted
        for tier in self.tiers[:-1]:
            opens += tier.spill_after_seconds
            self.e.timer(opens, ("aged", job.uid))

    def _enqueue(self, job: ReplayJob, gang: GangRequest, *, requeued: bool = False) -> None:
        group: _Group = (_signature(gang), gang.queue, gang.priority)
        entries = self._queue.setdefault(group, {})
        entries[job.uid] = (job, gang)
        if requeued and len(entries) > 1:
            # A requeued gang keeps its submission time: its place is among the older ones.
            self._queue[group] = dict(sorted(entries.items(), key=lambda e: (e[1][1].submitted_at, e[1][1].key)))
        self._group_of[job.uid] = group
        self._changed = True

    def on_bound(self, copy: GangCopy) -> None:
        self._shown[copy.cluster][copy.job.uid] = copy.size
        self._stale.add(copy.cluster)
        if copy.job.uid in self._placed:
            self._track_running(self._running_gang(copy))

    def on_finished(self, copy: GangCopy) -> None:
        self._stale.add(copy.cluster)
        if self.queues is not None:
            self._forget(copy.job.uid)
        if self._elastic:
            self._elastic.pop(copy.job.uid, None)
            # Room freed where an elastic gang runs below its max: the hub's next tick may grow it.
            if any(r.copy.cluster == copy.cluster and r.copy.size < r.copy.job.pods for r in self._elastic.values()):
                self._grow_due(self.e.now + ELASTIC_TICK_SECONDS)

    def on_timer(self, payload: Any) -> None:
        if isinstance(payload, tuple) and payload[0] == "aged" and payload[1] in self._group_of:
            self._changed = True
        elif payload == ("preempted",):
            self._changed = True
        elif isinstance(payload, tuple) and payload[0] == "grow" and payload[1] == self._grow_at:
            self._grow_at = None
            self._grow()

    # ------------------------------------------------------------ growing elastic gangs

    def _grow_due(self, at: float) -> None:
        """A grow pass at `at` (or earlier, if one is due sooner)."""
        if self._grow_at is not None and self._grow_at <= at:
            return
        self._grow_at = at
        self.e.timer(at, ("grow", at))

    def _elastic_running(self, run: _ElasticRun) -> RunningGang:
        copy, job = run.copy, run.copy.job
        requests = _requests_of(job)
        pods = tuple(
            RunningPod(name=f"{job.uid}-{i}", role="worker", node=copy.nodes[key], requests=requests,
                       started_at=copy.bound_at, index=i)
            for i, key in enumerate(copy.pod_keys) if key in copy.nodes
        )
        return RunningGang(
            uid=job.uid, key=run.gang.key, cluster=copy.cluster, queue="", priority=run.gang.priority,
            started_at=copy.bound_at, demand=requests.times(len(pods)), gpu_model=run.model if job.gpus_per_pod else None,
            pods=pods, request=run.gang,
        )

    def _grow(self) -> None:
        """The hub's grow pass: `plan_growth`, then each growth's new pods created in its member."""
        self._sync()
        now = self.e.now
        below = [r for r in self._elastic.values() if r.copy.state == "bound" and r.copy.size < r.copy.job.pods]
        if not below:
            return
        book = self.book
        for name in sorted({r.copy.cluster for r in below}):
            book, _ = reconcile_reservations(book, self.snapshots[name], now=now)
        self.book = book
        result = plan_growth(
            [self._elastic_running(r) for r in below], self.snapshots, self._candidates(now=now), self.profile,
            now=now, last_resized={r.copy.job.uid: r.resized_at for r in below},
            cooldown_seconds=GROW_COOLDOWN_SECONDS, reservations=self.book,
        )
        self.book = result.reservations
        for growth in result.growths:
            run = self._elastic[growth.gang_uid]
            if self.e.grow(run.copy, growth.pods):
                self.growths += 1
            run.resized_at = now
            self._shown[run.copy.cluster][growth.gang_uid] = run.copy.size
            self._stale.add(run.copy.cluster)
            self._changed = True
        # Held back by a cooldown: try again when it ends (room freed later brings a pass of its own).
        cooling = [r.resized_at + GROW_COOLDOWN_SECONDS for r in below
                   if r.copy.size < r.copy.job.pods and now - r.resized_at < GROW_COOLDOWN_SECONDS
                   and r.copy.job.uid not in {g.gang_uid for g in result.growths}]
        if cooling:
            self._grow_due(min(cooling))

    # ------------------------------------------------------------ running gangs (with queues)

    def _running_gang(self, copy: GangCopy) -> RunningGang:
        """What the cycle knows of a dispatched gang: its queue and priority, its model, its pods per node."""
        job = copy.job
        gang, model, borrowed = self._placed[job.uid]
        per_node = Counter(copy.nodes.values())
        member = self.e.members[copy.cluster]
        if per_node and {member.model_of_node[node] for node in per_node} != {model}:
            raise RuntimeError(f"gang {gang.key} was placed on {model} GPUs but bound on other nodes")
        amounts = {
            node: Resources(job.cpu_milli_per_pod * n, job.memory_per_pod * n, job.gpus_per_pod * n)
            for node, n in per_node.items()
        }
        return RunningGang(
            uid=job.uid,
            key=gang.key,
            cluster=copy.cluster,
            queue=gang.queue,
            priority=gang.priority,
            started_at=copy.bound_at if copy.state == "bound" else self.e.now,
            demand=gang.total,
            gpu_model=model if gang.needs_gpu else None,
            amounts=amounts,
            borrowed=borrowed,
            checkpointed_at=self.e.last_checkpoint(copy),
        )

    def _refresh_checkpoints(self) -> None:
        """Each running gang with the time its run last checkpointed by now (what status.checkpoint says)."""
        running = self._running
        for uid, gang in running.items():
            copy = self._copies.get(uid)
            if copy is None or not copy.job.checkpoint_seconds:
                continue
            at = self.e.last_checkpoint(copy)
            if at != gang.checkpointed_at:
                running[uid] = replace(gang, checkpointed_at=at)

    def _track_running(self, running: RunningGang) -> None:
        self._untrack_running(running.uid)
        self._running[running.uid] = running
        self._count_running(running, +1)

    def _untrack_running(self, uid: str) -> None:
        running = self._running.pop(uid, None)
        if running is not None:
            self._count_running(running, -1)

    def _count_running(self, running: RunningGang, sign: int) -> None:
        self._running_by.setdefault(running.cluster, Counter())[(running.queue, running.priority)] += sign
        if running.borrowed:
            self._borrowed_by.setdefault(running.cluster, Counter())[running.queue] += sign
        self._used[(running.queue, running.gpu_model)] += sign * running.demand.gpu

    def _forget(self, uid: str) -> None:
        self._untrack_running(uid)
        self._placed.pop(uid, None)
        self._copies.pop(uid, None)

    def _may_reclaim(self, gang: GangRequest) -> bool:
        """Could the gang's queue reclaim for it: reclaimBorrowed, and room in its nominal quota of some model?"""
        assert self.queues is not None
        quota = self.queues[gang.queue]
        if not quota.reclaim_borrowed or not quota.cohort:
            return False
        models = gang.gpu_models or tuple(quota.nominal.gpus)
        return any(self._used[(gang.queue, m)] + gang.total.gpu <= quota.nominal.gpus.get(m, 0) for m in models)

    def _victims_in(self, cluster: str, queue: str, priority: int, *, reclaim: bool) -> int:
        """Running gangs of `cluster` the queue's policy could evict for a gang of (queue, priority)."""
        assert self.queues is not None
        quota = self.queues[queue]
        count = 0
        if quota.within_queue is WithinQueue.LOWER_PRIORITY:
            count += sum(n for (q, p), n in self._running_by.get(cluster, {}).items() if q == queue and p < priority)
        if reclaim:
            count += sum(
                n for q, n in self._borrowed_by.get(cluster, {}).items()
                if q != queue and self.queues[q].cohort == quota.cohort
            )
        return count

    # ------------------------------------------------------------ snapshots

    def _sync(self) -> None:
        if not self._stale:
            return
        stale, self._stale = self._stale, set()
        for name in sorted(stale):
            member = self.e.members[name]
            changed = member.take_changed_nodes()
            shown = self._shown[name]
            snapshot = self.snapshots[name]
            if not changed and dict(snapshot.bound_pods) == shown:
                continue
            self._rv[name] += 1
            rv = str(self._rv[name])
            nodes = snapshot.nodes
            updated = [_node_state(member, node, nodes.get(node)) for node in sorted(changed)]
            snapshot = snapshot.with_nodes(updated, resource_version=rv)
            self.snapshots[name] = snapshot.with_bound_pods(Map(shown))
            self._changed = True

    # ------------------------------------------------------------ which gangs a cycle needs

    def _rejection(
        self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext
    ) -> tuple[str, FilterResult] | None:
        """The first cheap filter (the profile's chain, deferred filters' prechecks) that rejects, or None."""
        for filter_name, check in self._cheap:
            result = check(gang, snapshot, ctx)
            if not result.ok:
                return filter_name, result
        return None

    def _candidates(self, *, now: float) -> list[GangRequest]:
        pending = [gang for group in self._queue.values() for _, gang in group.values()]
        if self.exhaustive_queue or len(pending) <= _SELECT_ABOVE:
            return pending
        holds = self.book.holds()
        holders = {r.gang_uid for r in holds}
        limit = self.profile.max_holds_per_cluster
        if self._federation is None:
            # What it holds (declared datasets, bandwidth, cost, largest node) never changes in a replay.
            self._federation = FederationStats.of(self.snapshots.values())
        federation = self._federation
        chosen: list[GangRequest] = []
        for (signature, queue, priority), group in self._queue.items():
            if not group:
                continue
            example = next(iter(group.values()))[1]
            placeable = 0
            hold_slots = 0
            victims = 0
            reclaim = self.queues is not None and self._may_reclaim(example)
            for name, snapshot in self.snapshots.items():
                memo = self._memo.get(name)
                if memo is None or memo[0] is not snapshot:
                    memo = (snapshot, {})
                    self._memo[name] = memo
                # The tier filter's answer moves with time (tiers open as the gang waits): so does the key.
                key = (signature, example.open_tiers(now)[0]) if example.tiers else signature
                if key in memo[1]:
                    rejection = memo[1][key]
                else:
                    ctx = EvalContext(now=now, profile=self.profile, federation=federation)
                    # As the cycle does: the filters judge an elastic gang at its minimum.
                    rejection = self._rejection(example.minimum if example.elastic else example, snapshot, ctx)
                    memo[1][key] = rejection
                if rejection is None:
                    index = snapshot.index
                    role = example.roles[0]
                    models = candidate_gpu_models(example, index) if example.needs_gpu else ()
                    pods = sum(index.max_pods_by_free_gpus(m, role.requests.gpu) for m in models)
                    # An elastic gang is placed if its minimum fits.
                    placeable += pods // max(1, role.low) if example.needs_gpu else len(group)
                # A hold may be taken where the gang passes every filter but gang-fit, and fits when empty;
                # a slot taken now may be freed within the cycle (its holder placed, or its hold dropped).
                may_hold = rejection is None or (rejection[0] == GANG_FIT and rejection[1].code != EXCEEDS_CAPACITY)
                if may_hold:
                    hold_slots += limit
                    # Each preemption (possible only where it could hold) evicts at least one running gang.
                    if self.queues is not None:
                        victims += self._victims_in(name, queue, priority, reclaim=reclaim)
            wanted = placeable + hold_slots
            if self.queues is not None:
                # + the quota hold one aged gang of its queue may take.
                wanted += victims + 1
            taken = 0
            for uid, (_, gang) in group.items():
                if taken >= wanted:
                    break
                if uid not in holders:
                    chosen.append(gang)
                    taken += 1
            for uid in holders:
                entry = group.get(uid)
                if entry is not None:
                    chosen.append(entry[1])
        return chosen

    # ------------------------------------------------------------ the cycle

    def step(self) -> None:
        self._sync()
        if not self._changed or not self._group_of:
            return
        self._changed = False
        now = self.e.now
        candidates = self._candidates(now=now)
        if not candidates and not self.book.holds():
            return
        if self.queues is not None:
            self._refresh_checkpoints()
        result = run_cycle(
            candidates,
            self.snapshots,
            self.profile,
            now=now,
            reservations=self.book,
            queues=self.queues,
            running=tuple(self._running.values()),
        )
        self.cycles += 1
        self.gangs_evaluated += len(candidates)
        self.book = result.reservations
        if self.book.holds():
            self.cycles_with_holds += 1
        for decision in result.decisions:
            group = self._group_of.pop(decision.gang_uid)
            job, gang = self._queue[group].pop(decision.gang_uid)
            if not self._queue[group]:
                del self._queue[group]
            self.decisions.append((now, job.uid, decision.cluster))
            if decision.preemption is not None:
                self._preempt(job, gang, decision)
            self._dispatch(job, gang, decision)
        # Forget what the member showed for gangs whose placed reservation the cycle released.
        for name, shown in self._shown.items():
            gone = [u for u in shown if (r := self.book.get(u)) is None or r.kind is not ReservationKind.PLACED]
            for uid in gone:
                del shown[uid]
            if gone:
                self._stale.add(name)

    def _dispatch(self, job: ReplayJob, gang: GangRequest, decision: Decision) -> None:
        if self.queues is not None:
            self._placed[job.uid] = (gang, decision.gpu_model, decision.borrowed)
        if gang.elastic:
            size = decision.replicas["worker"]
            copy = self.e.dispatch(job, decision.cluster, gpu_model=decision.gpu_model, pods=size)
            self._elastic[job.uid] = _ElasticRun(copy, gang, decision.gpu_model, self.e.now)
        else:
            copy = self.e.dispatch(job, decision.cluster, gpu_model=decision.gpu_model)
        if self.queues is None:
            return
        self._copies[job.uid] = copy
        if copy.state == "pending":
            # Charged to its queue while its member has not bound it yet (nothing on nodes to free).
            self._track_running(self._running_gang(copy))
            if decision.preemption is not None:
                self.preemptors_not_bound += 1

    def _preempt(self, job: ReplayJob, gang: GangRequest, decision: Decision) -> None:
        """Evict the decision's victims whole and requeue them (epoch + 1), before the preemptor goes out."""
        preemption = decision.preemption
        assert preemption is not None
        if preemption.cluster != decision.cluster:
            raise RuntimeError(f"{gang.key} is placed in {decision.cluster} but room was made in {preemption.cluster}")
        for victim in preemption.victims:
            copy = self._copies.get(victim.uid)
            placed = self._placed.get(victim.uid)
            if copy is None or placed is None or copy.cluster != preemption.cluster:
                raise RuntimeError(f"victim {victim.key} of {gang.key} does not run in {preemption.cluster}")
            victim_gang = placed[0]
            if self.e.now != self._evicted_at:
                self._evicted_at, self._evicted_now = self.e.now, Counter()
            self._evicted_now[victim.uid] += 1
            if self._evicted_now[victim.uid] > _MAX_EVICTIONS_AT_ONCE:
                raise RuntimeError(
                    f"preemption cycle: {victim.key} evicted {self._evicted_now[victim.uid]} times at t={self.e.now}, "
                    f"last by {gang.key}"
                )
            self._forget(victim.uid)
            if copy.state == "bound":
                self.e.evict(copy)
            else:
                self.e.delete(copy)
            self._shown[copy.cluster].pop(victim.uid, None)
            self._stale.add(copy.cluster)
            self._enqueue(copy.job, victim_gang, requeued=True)
        self.preemptions.append(
            PreemptionRecord(self.e.now, job.uid, gang.queue, gang.priority, decision.cluster, preemption.victims)
        )
        # The hub's next cycle places the victims elsewhere if they fit: one at this same instant.
        self.e.timer(self.e.now, ("preempted",))

