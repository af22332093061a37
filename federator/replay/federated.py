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

Which queued gangs go into a cycle: run_cycle's answer for a gang that
cannot be placed and cannot take a hold is "unplaced, no hold", whatever
else is in the cycle. So, to keep a 69,000-job replay fast, a cycle is
given the gangs that hold a hold, and per signature (shape, network,
GPU models: what the filters read) the oldest gangs up to how many of
that signature could possibly be placed or take a hold: the count of such
pods the clusters that pass the profile's own cheap filters hold by free
GPUs node by node (`ClusterIndex.max_pods_by_free_gpus`, on the snapshots
without reservations, so never less than the cycle's own views), plus the
hold slots of every cluster where it could hold (taken or not: a holder
placed in the cycle frees its slot for the next). Gangs of one signature
are placed in queue order and fail alike, so the cycle decides exactly
what one over the whole queue would; `exhaustive_queue=True` turns the
selection off (the tests compare both), and a queue of 16 gangs or fewer
goes in whole.

Must never: place through anything but `run_cycle`, or see the other
policies' members.
"""

from __future__ import annotations

from collections.abc import Hashable
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
    RdmaKind,
    ReservationBook,
    ReservationKind,
    Resources,
    RoleRequest,
    run_cycle,
)
from federator.placement.framework import GANG_FIT, EvalContext, FederationStats, FilterResult
from federator.placement.nodefit import candidate_gpu_models
from federator.placement.plugins import default_registry
from federator.placement.plugins.gang_fit import EXCEEDS_CAPACITY
from federator.replay.attributes import ReplayJob
from federator.replay.engine import Engine, PolicyBase
from federator.replay.member import GPU_PRODUCT_LABEL, GangCopy, Member
from federator.sim.fit import CPU, GPU, MEMORY

__all__ = ["FederatorPolicy", "gang_request_of"]

# A queue this short goes into the cycle whole: choosing would cost more than it saves.
_SELECT_ABOVE = 16


def gang_request_of(job: ReplayJob) -> GangRequest:
    """The GangRequest the hub builds for a job of the replay (what `controllers.jobs.gang_request` reads)."""
    return GangRequest(
        key=f"{job.trace_cluster}/{job.uid}",
        uid=job.uid,
        roles=(RoleRequest("worker", job.pods, Resources(job.cpu_milli_per_pod, job.memory_per_pod, job.gpus_per_pod)),),
        network=Network(job.network),
        gpu_models=(job.gpu_model,) if job.gpu_model else (),
        datasets=(job.dataset,) if job.dataset else (),
        node_selector={GPU_PRODUCT_LABEL: job.gpu_model} if job.gpu_model else {},
        submitted_at=job.submitted,
    )


def _signature(gang: GangRequest) -> Hashable:
    return (gang.shape, gang.network, gang.gpu_models, tuple(sorted(gang.node_selector.items())))


def _info(member: Member) -> ClusterInfo:
    spec = member.spec
    rdma = spec.fabric == "rdma"
    return ClusterInfo(
        location=Location(spec.location),
        fabric=Fabric(spec.fabric),
        rdma_kind=RdmaKind.INFINIBAND if rdma else None,
        bandwidth_gbps=spec.bandwidth_gbps,
        labels={"federator.dev/fabric": spec.fabric},
        cost_per_gpu_hour=spec.cost_per_gpu_hour,
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

    def __init__(self, *, profile: Profile | None = None, exhaustive_queue: bool = False) -> None:
        super().__init__()
        self.profile = profile or Profile()
        self.exhaustive_queue = exhaustive_queue
        self.book: ReservationBook = EMPTY_BOOK
        self.snapshots: dict[str, ClusterSnapshot] = {}
        self._rv: dict[str, int] = {}
        # signature -> {uid: (job, gang)} in queue order (submission order: arrivals come in that order)
        self._queue: dict[Hashable, dict[str, tuple[ReplayJob, GangRequest]]] = {}
        self._signature_of: dict[str, Hashable] = {}
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

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        for name, member in engine.members.items():
            nodes = [_node_state(member, n.name, None) for n in member.ledger.ordered_nodes()]
            self._rv[name] = 1
            self.snapshots[name] = ClusterSnapshot.build(name=name, info=_info(member), nodes=nodes,
                                                         resource_version="1")
            self._shown[name] = {}
            member.take_changed_nodes()

    # ------------------------------------------------------------ engine hooks

    def submit(self, job: ReplayJob) -> None:
        gang = gang_request_of(job)
        signature = _signature(gang)
        self._queue.setdefault(signature, {})[job.uid] = (job, gang)
        self._signature_of[job.uid] = signature
        self._changed = True
        # Once old enough it may take a head-of-line hold: make sure a cycle runs then.
        self.e.timer(job.submitted + self.profile.hold_after_seconds, ("aged", job.uid))

    def on_bound(self, copy: GangCopy) -> None:
        self._shown[copy.cluster][copy.job.uid] = copy.job.pods
        self._stale.add(copy.cluster)

    def on_finished(self, copy: GangCopy) -> None:
        self._stale.add(copy.cluster)

    def on_timer(self, payload: Any) -> None:
        if isinstance(payload, tuple) and payload[0] == "aged" and payload[1] in self._signature_of:
            self._changed = True

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
        for signature, group in self._queue.items():
            if not group:
                continue
            example = next(iter(group.values()))[1]
            placeable = 0
            hold_slots = 0
            for name, snapshot in self.snapshots.items():
                memo = self._memo.get(name)
                if memo is None or memo[0] is not snapshot:
                    memo = (snapshot, {})
                    self._memo[name] = memo
                if signature in memo[1]:
                    rejection = memo[1][signature]
                else:
                    ctx = EvalContext(now=now, profile=self.profile, federation=federation)
                    rejection = self._rejection(example, snapshot, ctx)
                    memo[1][signature] = rejection
                if rejection is None:
                    index = snapshot.index
                    role = example.roles[0]
                    models = candidate_gpu_models(example, index) if example.needs_gpu else ()
                    pods = sum(index.max_pods_by_free_gpus(m, role.requests.gpu) for m in models)
                    placeable += pods // max(1, role.replicas) if example.needs_gpu else len(group)
                # A hold may be taken where the gang passes every filter but gang-fit, and fits when empty;
                # a slot taken now may be freed within the cycle (its holder placed, or its hold dropped).
                may_hold = rejection is None or (rejection[0] == GANG_FIT and rejection[1].code != EXCEEDS_CAPACITY)
                if may_hold:
                    hold_slots += limit
            wanted = placeable + hold_slots
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
        if not self._changed or not self._signature_of:
            return
        self._changed = False
        now = self.e.now
        candidates = self._candidates(now=now)
        if not candidates and not self.book.holds():
            return
        result = run_cycle(candidates, self.snapshots, self.profile, now=now, reservations=self.book)
        self.cycles += 1
        self.gangs_evaluated += len(candidates)
        self.book = result.reservations
        if self.book.holds():
            self.cycles_with_holds += 1
        for decision in result.decisions:
            signature = self._signature_of.pop(decision.gang_uid)
            job, _ = self._queue[signature].pop(decision.gang_uid)
            if not self._queue[signature]:
                del self._queue[signature]
            self.decisions.append((now, job.uid, decision.cluster))
            self.e.dispatch(job, decision.cluster)
        # Forget what the member showed for gangs whose placed reservation the cycle released.
        for name, shown in self._shown.items():
            gone = [u for u in shown if (r := self.book.get(u)) is None or r.kind is not ReservationKind.PLACED]
            for uid in gone:
                del shown[uid]
            if gone:
                self._stale.add(name)

