"""The member model: one simulated cluster's nodes and its own gang scheduler, in virtual time.

Every policy of a replay dispatches into the same members, which decide
exactly as `federator/sim`'s gang scheduler does, with its code:
- nodes and usage are a `sim.fit.ClusterLedger` (one `NodeInfo` per node:
  CPU, memory, `nvidia.com/gpu`, pods; label `nvidia.com/gpu.product`);
- a gang copy is bound all-or-nothing, node by node, by
  `sim.fit.CyclePlanner.place_gang` with `need` = every pod (the gang's
  minMember), never overcommitting a node: the simulator's fit, not a
  second one;
- the order is `sim.scheduler.schedule_cycle`'s: pending gangs by priority,
  then arrival (here by arrival alone: the member reads no priority, which
  changes nothing while every job has priority 0; with `--queues` jobs
  have priorities, and the hub that applies them sends a gang only where
  it fits now); a gang that does not fit does not block the ones behind
  it (backfill); like schedule_cycle's attempt memo, a shape that failed at
  the ledger's current generation (no capacity freed since) is not tried
  again.
An elastic gang copy (`--elastic-share`) is written with up to its
maximum pods and minMember = its minimum: the same `place_gang` with
`need` = the minimum binds as many of its pods as fit at that cycle, at
least the minimum or none (as Volcano admits at minMember and binds the
extra pods that fit); its pods that did not fit are not placed later.
`grow` binds more pods of a running elastic gang (the hub's grow pass
created them), again with `place_gang`.
What the simulator does around that (Kubernetes objects, conditions,
events, HTTP) is left out: here a copy is a Python object and binding it
is immediate. A bound copy leaves by finishing or by being evicted whole
(a preemption); neither ever frees part of a gang.

A member also answers the questions baselines ask of a cluster: summed
free resources (minus what waiting gangs will take, Karmada's
"allocating"), the feasible nodes of a pod shape (for Karmada's
node-level estimator), whether a gang fits now (Armada) and whether it
could ever fit here (a dispatch that never can is a failed dispatch),
the last two again through `CyclePlanner.place_gang`, on the live ledger
(rolled back) or on an empty copy of the nodes.

Must never bind part of a gang, overcommit a node, or read a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from federator.replay.attributes import ReplayJob
from federator.replay.backfill import BackfillQueue
from federator.replay.clusters import ClusterSpec
from federator.sim.fit import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    ClusterLedger,
    CyclePlanner,
    NodeInfo,
    Placement,
    PodRequirements,
    static_misfit,
)

__all__ = ["GPU_PRODUCT_LABEL", "GangCopy", "Member", "pod_requirements_of"]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
PODS_PER_NODE = 110
_RESOURCES = (CPU, MEMORY, GPU, PODS)

_REQUIREMENTS: dict[tuple[int, int, int, str | None], PodRequirements] = {}


def pod_requirements_of(job: ReplayJob, *, gpu_model: str | None = None) -> PodRequirements:
    """The pod spec of every pod of the job's gang, as the simulator's scheduler reads it (shared per shape).

    `gpu_model` pins the pods to that model (as the hub's delegation does with the model placement chose)
    when the job itself is not pinned.
    """
    model = job.gpu_model or gpu_model
    key = (job.cpu_milli_per_pod, job.memory_per_pod, job.gpus_per_pod, model)
    req = _REQUIREMENTS.get(key)
    if req is None:
        requests = {CPU: job.cpu_milli_per_pod, MEMORY: job.memory_per_pod, GPU: job.gpus_per_pod, PODS: 1}
        placement = Placement(node_selector=((GPU_PRODUCT_LABEL, model),)) if model else Placement()
        req = PodRequirements(requests=tuple(sorted(requests.items())), placement=placement)
        _REQUIREMENTS[key] = req
    return req


@dataclass(eq=False, slots=True)
class GangCopy:
    """One copy of a job's gang written into one member (a PodGroup and its pods)."""

    job: ReplayJob
    cluster: str
    seq: int
    requirements: PodRequirements
    pod_keys: tuple[str, ...]
    # Pods bound together for the gang to start (its PodGroup's minMember): every pod written but for an
    # elastic gang, whose minimum it is.
    need: int = 0
    state: str = "pending"  # pending | bound | deleted | finished | evicted
    bound_at: float = -1.0
    nodes: dict[str, str] = field(default_factory=dict)
    # Pods written when the copy was (what waits in the member) and pods running once bound.
    written: int = field(init=False)
    size: int = field(init=False)
    # The engine's bookkeeping of a bound run: when it finishes, and (for resizes) the run seconds left at
    # `size` as of `segment_at`.
    finish_at: float = float("nan")
    segment_at: float = 0.0
    remaining: float = 0.0
    resizes: int = 0
    # A bound run: when its training started (after any dataset copy), the traced seconds of work it had
    # left then (less than the job's duration when it resumed from a checkpoint), and the run seconds that
    # work takes (for the checkpoints of an eviction).
    trained_from: float = float("nan")
    work_left: float = 0.0
    run_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.written = len(self.pod_keys)
        self.size = self.written
        if not self.need:
            self.need = self.written

    @property
    def shape(self) -> Hashable:
        return (self.requirements, self.written, self.need)

    @property
    def gpus(self) -> int:
        """GPUs the copy holds once bound (its size's); what it asks for while it waits."""
        return self.size * self.job.gpus_per_pod


class _Planner(CyclePlanner):
    """The simulator's planner with its per-placement feasible node lists kept across cycles.

    Valid because a replay never changes a node (only usage), so which nodes a
    pod's selector and tolerations admit stays the same for the whole run;
    the cursors (what fills up within one cycle) start afresh every cycle.
    """

    def __init__(self, ledger: ClusterLedger, feasible: dict[Placement, list[NodeInfo]]) -> None:
        super().__init__(ledger)
        self._shared = feasible

    def feasible(self, placement: Placement) -> list[NodeInfo]:
        nodes = self._shared.get(placement)
        if nodes is None:
            nodes = [n for n in self.ledger.ordered_nodes() if static_misfit(placement, n) is None]
            self._shared[placement] = nodes
        return nodes


def _nodes_of(spec: ClusterSpec) -> list[NodeInfo]:
    nodes: list[NodeInfo] = []
    for pool in spec.pools:
        for i in range(pool.nodes):
            name = f"{spec.name}-{pool.gpu_model.lower()}-{i:05d}"
            nodes.append(
                NodeInfo(
                    name=name,
                    allocatable={CPU: pool.cpu_milli, MEMORY: pool.memory, GPU: pool.gpus_per_node, PODS: PODS_PER_NODE},
                    labels={GPU_PRODUCT_LABEL: pool.gpu_model, "kubernetes.io/hostname": name},
                )
            )
    return nodes


def _count(totals: dict[str, int], job: ReplayJob, pods: int, sign: int) -> None:
    totals[CPU] += sign * pods * job.cpu_milli_per_pod
    totals[MEMORY] += sign * pods * job.memory_per_pod
    totals[GPU] += sign * pods * job.gpus_per_pod
    totals[PODS] += sign * pods


class Member:
    """One member cluster: its ledger, its queue of waiting gang copies, and its totals."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.ledger = ClusterLedger()
        for node in _nodes_of(spec):
            self.ledger.upsert_node(node)
        self._feasible: dict[Placement, list[NodeInfo]] = {}
        self._feasible_models: dict[Placement, frozenset[str]] = {}
        # An empty twin of the nodes, for "could this gang ever fit here".
        self._empty = ClusterLedger()
        for node in _nodes_of(spec):
            self._empty.upsert_node(node)
        self._empty_feasible: dict[Placement, list[NodeInfo]] = {}
        self._ever: dict[Hashable, bool] = {}
        self.queue: BackfillQueue[GangCopy] = BackfillQueue()
        # shape -> ledger generation at which it last failed (schedule_cycle's attempt memo)
        self._failed_at: dict[Hashable, int] = {}
        self.capacity = {CPU: 0, MEMORY: 0, GPU: 0, PODS: 0}
        for node in self.ledger.ordered_nodes():
            for resource in self.capacity:
                self.capacity[resource] += node.allocatable.get(resource, 0)
        self.used = dict.fromkeys(self.capacity, 0)
        self.waiting = dict.fromkeys(self.capacity, 0)
        self.gpu_capacity_by_model: dict[str, int] = {}
        for pool in spec.pools:
            self.gpu_capacity_by_model[pool.gpu_model] = (
                self.gpu_capacity_by_model.get(pool.gpu_model, 0) + pool.nodes * pool.gpus_per_node
            )
        self.gpu_used_by_model = dict.fromkeys(self.gpu_capacity_by_model, 0)
        self.gpu_waiting_by_model = dict.fromkeys(self.gpu_capacity_by_model, 0)
        self.model_of_node = {n.name: n.labels[GPU_PRODUCT_LABEL] for n in self.ledger.ordered_nodes()}
        # model -> {(free cpu, memory, GPUs, pods) -> nodes in that state}: node-level estimates in
        # O(states), not O(nodes). Exact because a pool's nodes are alike but for their names.
        self._node_free: dict[str, tuple[int, ...]] = {}
        self._states: dict[str, dict[tuple[int, ...], int]] = {}
        for node in self.ledger.ordered_nodes():
            self._track(node.name, +1)
        # Nodes whose usage changed since the last `take_changed_nodes` (the hub's snapshot feed).
        self._changed: set[str] = set()
        self.cycles = 0
        # Bumped on every bind and release: answers about free capacity may be cached per version.
        self.ledger_version = 0

    # ------------------------------------------------------------ copies in and out

    def add(self, copy: GangCopy) -> None:
        """A gang copy written into this member: it waits for the next cycle."""
        self.queue.add(copy)
        self._wait(copy, +1)

    def delete(self, copy: GangCopy) -> None:
        """A waiting copy deleted by the federation layer (another copy won, or it was pulled back)."""
        if copy.state != "pending":
            raise ValueError(f"copy of {copy.job.uid} in {self.name} is {copy.state}, not pending")
        if self.queue.remove(copy):
            self._wait(copy, -1)
        copy.state = "deleted"

    def release(self, copy: GangCopy) -> None:
        """A bound gang finished: its pods stop using their nodes."""
        self._unbind(copy)
        copy.state = "finished"

    def evict(self, copy: GangCopy) -> None:
        """A bound gang evicted whole (preempted): every one of its pods stops using its node."""
        self._unbind(copy)
        copy.state = "evicted"

    def _unbind(self, copy: GangCopy) -> None:
        if copy.state != "bound":
            raise ValueError(f"copy of {copy.job.uid} in {self.name} is {copy.state}, not bound")
        for key in copy.pod_keys:
            node = self.ledger.node_of(key)
            if node is not None:
                self._changed.add(node)
            self.ledger.release(key)
        self._retrack(copy.nodes.values())
        self._use(copy, -1)
        self.ledger_version += 1

    def _track(self, name: str, sign: int) -> None:
        node = self.ledger.nodes[name]
        model = self.model_of_node[name]
        if sign > 0:
            state = tuple(node.free(r) for r in _RESOURCES)
            self._node_free[name] = state
        else:
            state = self._node_free.pop(name)
        table = self._states.setdefault(model, {})
        count = table.get(state, 0) + sign
        if count:
            table[state] = count
        else:
            del table[state]

    def _retrack(self, names: Iterable[str]) -> None:
        for name in set(names):
            self._track(name, -1)
            self._track(name, +1)

    def _wait(self, copy: GangCopy, sign: int) -> None:
        _count(self.waiting, copy.job, copy.written, sign)
        model = copy.job.gpu_model
        if model is not None and model in self.gpu_waiting_by_model:
            self.gpu_waiting_by_model[model] += sign * copy.written * copy.job.gpus_per_pod

    def _use(self, copy: GangCopy, sign: int, nodes: Iterable[str] | None = None) -> None:
        """Count the copy's pods on `nodes` (default: all it holds) as used (+1) or not (-1)."""
        placed = list(copy.nodes.values() if nodes is None else nodes)
        _count(self.used, copy.job, len(placed), sign)
        for node in placed:
            self.gpu_used_by_model[self.model_of_node[node]] += sign * copy.job.gpus_per_pod

    # ------------------------------------------------------------ the gang scheduler

    def cycle(self, on_bound: Callable[[GangCopy], None]) -> list[GangCopy]:
        """One scheduling cycle: bind every waiting gang that fits, oldest first, with backfill."""
        if not len(self.queue):
            return []
        self.cycles += 1
        generation = self.ledger.generation
        skip = [shape for shape in self.queue.shapes() if self._failed_at.get(shape) == generation]
        planner = _Planner(self.ledger, self._feasible)

        def attempt(copy: GangCopy) -> bool:
            outcome = planner.place_gang([(key, copy.requirements) for key in copy.pod_keys], need=copy.need)
            if not outcome.committed:
                # Binds do not move the generation: the memo stays exact until capacity is freed.
                self._failed_at[copy.shape] = generation
                return False
            copy.nodes = dict(outcome.placed)
            copy.size = len(copy.nodes)
            copy.state = "bound"
            self._changed.update(outcome.placed.values())
            self._retrack(outcome.placed.values())
            self._wait(copy, -1)
            self._use(copy, +1)
            self.ledger_version += 1
            return True

        bound = self.queue.run_pass(attempt, skip=skip)
        for copy in bound:
            on_bound(copy)
        return bound

    def grow(self, copy: GangCopy, pod_keys: Sequence[str]) -> int:
        """Bind new pods of a running elastic gang, as many of `pod_keys` as fit now; returns how many."""
        if copy.state != "bound":
            raise ValueError(f"copy of {copy.job.uid} in {self.name} is {copy.state}, not bound")
        if copy.size + len(pod_keys) > copy.job.pods:
            raise ValueError(f"{copy.job.uid} cannot grow past its {copy.job.pods} pods")
        planner = _Planner(self.ledger, self._feasible)
        outcome = planner.place_gang([(key, copy.requirements) for key in pod_keys], need=1)
        if not outcome.committed:
            return 0
        copy.nodes.update(outcome.placed)
        copy.pod_keys += tuple(outcome.placed)
        copy.size = len(copy.nodes)
        self._changed.update(outcome.placed.values())
        self._retrack(outcome.placed.values())
        self._use(copy, +1, outcome.placed.values())
        self.ledger_version += 1
        return len(outcome.placed)

    # ------------------------------------------------------------ questions baselines ask

    def could_ever_hold(self, copy: GangCopy) -> bool:
        """Would the gang fit on this member's nodes if they were all empty?"""
        known = self._ever.get(copy.shape)
        if known is None:
            planner = _Planner(self._empty, self._empty_feasible)
            outcome = planner.place_gang([(f"probe/{i}", copy.requirements) for i in range(copy.written)],
                                         need=copy.need)
            for key in outcome.placed:
                self._empty.release(key, freed=False)
            known = outcome.committed
            self._ever[copy.shape] = known
        return known

    def fits_now(self, requirements: PodRequirements, pods: int) -> bool:
        """Would a gang of `pods` such pods be bound now (ignoring anything waiting here)? Changes nothing."""
        planner = _Planner(self.ledger, self._feasible)
        outcome = planner.place_gang([(f"probe/{i}", requirements) for i in range(pods)], need=pods)
        for key in outcome.placed:
            self.ledger.release(key, freed=False)
        return outcome.committed

    def feasible_nodes(self, placement: Placement) -> Sequence[NodeInfo]:
        return _Planner(self.ledger, self._feasible).feasible(placement)

    def node_level_replicas(self, requirements: PodRequirements) -> int:
        """Pods of this shape the free resources hold, node by node, over the nodes its placement admits."""
        models = self._feasible_models.get(requirements.placement)
        if models is None:
            models = frozenset(self.model_of_node[n.name] for n in self.feasible_nodes(requirements.placement))
            self._feasible_models[requirements.placement] = models
        wanted = [(i, units) for i, resource in enumerate(_RESOURCES) for name, units in requirements.requests
                  if name == resource and units > 0]
        total = 0
        for model in models:
            for state, count in self._states.get(model, {}).items():
                fit = min(state[i] // units for i, units in wanted) if wanted else 0
                if fit > 0:
                    total += count * fit
        return total

    def has_model(self, model: str | None) -> bool:
        return model is None or model in self.gpu_capacity_by_model

    def free_gpus(self, model: str | None = None, *, minus_waiting: bool = True) -> int:
        """Summed free GPUs (of one model, or all), less what gangs waiting here will take."""
        if model is None:
            free = self.capacity[GPU] - self.used[GPU]
            return free - self.waiting[GPU] if minus_waiting else free
        if model not in self.gpu_capacity_by_model:
            return 0
        free = self.gpu_capacity_by_model[model] - self.gpu_used_by_model[model]
        return free - self.gpu_waiting_by_model[model] if minus_waiting else free

    def take_changed_nodes(self) -> set[str]:
        changed, self._changed = self._changed, set()
        return changed
