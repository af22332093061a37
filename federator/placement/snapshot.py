"""ClusterSnapshot: an immutable picture of one member cluster, the input of every placement decision.

The cluster-sync side (reflectors over member watches) builds a snapshot with
`ClusterSnapshot.build` and keeps it current with `with_nodes` as watch
events arrive; placement reads snapshots and derives new ones when it
reserves resources. Nothing ever changes a snapshot in place: every update
returns a new one that shares all untouched structure with the old.

Cost model (what callers may rely on):
- `nodes` is a persistent hash map (`immutables.Map`), so replacing k nodes
  costs O(k log n), never a copy of the cluster.
- `index` holds the aggregates placement needs to reject a cluster in O(1)
  (free GPUs per model, histograms of free and allocatable GPUs per node,
  free RDMA devices) and the node buckets it packs from: eligible node names
  grouped by (GPU model, free GPU count, has a blocking taint), each bucket a
  name-sorted tuple.
  An update adjusts the counters for the changed nodes and re-slices the two
  buckets each changed node leaves and enters (a C-level tuple copy of one
  bucket, not a Python loop over the cluster).

Must never: perform I/O, read clocks, or hold a mutable container that a
caller could change after construction (mappings are copied into
`immutables.Map`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from immutables import Map

from federator.placement.resources import ZERO, Resources

__all__ = [
    "CPU_ONLY",
    "BucketKey",
    "UNKNOWN_GPU_MODEL",
    "ClusterIndex",
    "ClusterInfo",
    "ClusterSnapshot",
    "Fabric",
    "Location",
    "NodeState",
    "RdmaKind",
    "Taint",
    "TaintEffect",
]

# Index key of nodes without GPUs; such nodes host only pods that ask for no GPU.
CPU_ONLY = ""
# Index key of GPU nodes whose model is not known (no product label).
UNKNOWN_GPU_MODEL = "unknown"


class Location(StrEnum):
    ON_PREM = "on-prem"
    CLOUD = "cloud"


class Fabric(StrEnum):
    RDMA = "rdma"
    ETHERNET = "ethernet"


class RdmaKind(StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


def _frozen_str_map(value: Mapping[str, str], what: str) -> Map[str, str]:
    if isinstance(value, Map):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{what} must map strings to strings, got {key!r}: {item!r}")
    return Map(value)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("taint key must not be empty")
        object.__setattr__(self, "effect", TaintEffect(self.effect))

    @property
    def blocks_scheduling(self) -> bool:
        """PreferNoSchedule is a hint; only NoSchedule and NoExecute keep an untolerating pod off."""
        return self.effect is not TaintEffect.PREFER_NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What the platform team declared about a member cluster, plus its health as the hub sees it."""

    location: Location
    fabric: Fabric
    provider: str = ""
    region: str = ""
    rdma_kind: RdmaKind | None = None
    bandwidth_gbps: float = 0.0
    labels: Mapping[str, str] = field(default_factory=Map)
    cost_per_gpu_hour: float = 0.0
    # Datasets the cluster holds on its own storage: name -> size in bytes.
    datasets: Mapping[str, int] = field(default_factory=Map)
    cordoned: bool = False
    healthy: bool = True
    # GPU-hour prices by model (over cost_per_gpu_hour); spot capacity and its expected interruptions.
    cost_per_model: Mapping[str, float] = field(default_factory=Map)
    spot: bool = False
    interruption_rate_per_hour: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "location", Location(self.location))
        object.__setattr__(self, "fabric", Fabric(self.fabric))
        if self.rdma_kind is not None:
            object.__setattr__(self, "rdma_kind", RdmaKind(self.rdma_kind))
            if self.fabric is not Fabric.RDMA:
                raise ValueError("rdma_kind is only meaningful for a cluster whose fabric is rdma")
        for name in ("bandwidth_gbps", "cost_per_gpu_hour"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"ClusterInfo.{name} must be a number")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ClusterInfo.{name} must be a finite, non-negative number, got {value}")
        object.__setattr__(self, "labels", _frozen_str_map(self.labels, "cluster labels"))
        prices = self.cost_per_model
        if not isinstance(prices, Mapping) or any(
                not isinstance(k, str) or not k or isinstance(v, bool) or not isinstance(v, int | float)
                or not math.isfinite(v) or v < 0 for k, v in prices.items()):
            raise ValueError("ClusterInfo.cost_per_model must map GPU models to finite, non-negative prices")
        object.__setattr__(self, "cost_per_model", Map(prices))
        rate = self.interruption_rate_per_hour
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ValueError(f"ClusterInfo.interruption_rate_per_hour must be within 0..1, got {rate!r}")
        if type(self.spot) is not bool:
            raise TypeError("ClusterInfo.spot must be a bool")
        datasets = self.datasets
        if not isinstance(datasets, Map):
            if not isinstance(datasets, Mapping):
                raise TypeError("ClusterInfo.datasets must map dataset names to sizes in bytes")
            datasets = Map(datasets)
        for name, size in datasets.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
            if type(size) is not int or size < 0:
                raise ValueError(f"dataset {name!r} size must be a non-negative int of bytes, got {size!r}")
        object.__setattr__(self, "datasets", datasets)

    def price(self, gpu_model: str | None) -> float:
        """What one GPU-hour of `gpu_model` costs here (cost_per_model over cost_per_gpu_hour)."""
        return float(self.cost_per_model.get(gpu_model, self.cost_per_gpu_hour)) if gpu_model \
            else float(self.cost_per_gpu_hour)

    def cheapest_price(self) -> float:
        """The lowest GPU-hour price of any model here."""
        return float(min((self.cost_per_gpu_hour, *self.cost_per_model.values())))


@dataclass(frozen=True, slots=True)
class NodeState:
    """One member node: what it offers, what is already allocated on it, and where a pod may land.

    `allocated` is the sum of requests of the pods bound to the node (plus,
    in an assumed view, what placement has reserved there). It may exceed
    `allocatable` in an assumed view where a head-of-line hold covers a busy
    node; `free` is floored at zero.
    """

    name: str
    allocatable: Resources
    allocated: Resources = ZERO
    gpu_model: str = ""
    ready: bool = True
    schedulable: bool = True
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=Map)
    # Datasets cached on this node's local disks.
    datasets: frozenset[str] = frozenset()
    free: Resources = field(init=False, compare=False, repr=False)
    # Index bucket this node belongs to: its GPU model, CPU_ONLY or UNKNOWN_GPU_MODEL.
    model_key: str = field(init=False, compare=False, repr=False)
    # True if a NoSchedule/NoExecute taint keeps untolerating pods off: indexed apart.
    blocked: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("node name must be a non-empty string")
        if not isinstance(self.allocatable, Resources) or not isinstance(self.allocated, Resources):
            raise TypeError(f"node {self.name!r}: allocatable and allocated must be Resources")
        if not isinstance(self.taints, tuple):
            object.__setattr__(self, "taints", tuple(self.taints))
        if not isinstance(self.datasets, frozenset):
            object.__setattr__(self, "datasets", frozenset(self.datasets))
        object.__setattr__(self, "labels", _frozen_str_map(self.labels, f"node {self.name!r} labels"))
        object.__setattr__(self, "free", self.allocatable.minus_clamped(self.allocated))
        if self.allocatable.gpu == 0:
            key = CPU_ONLY
        else:
            key = self.gpu_model or UNKNOWN_GPU_MODEL
        object.__setattr__(self, "model_key", key)
        for taint in self.taints:
            if not isinstance(taint, Taint):
                raise TypeError(f"node {self.name!r}: taints must be Taint values")
        object.__setattr__(self, "blocked", any(taint.blocks_scheduling for taint in self.taints))

    @property
    def eligible(self) -> bool:
        """Ready and not cordoned: the only nodes placement ever packs onto."""
        return self.ready and self.schedulable

    def with_allocated(self, allocated: Resources) -> NodeState:
        """The same node with a different allocation; labels, taints and datasets are shared, not copied."""
        node = object.__new__(NodeState)
        for name in ("name", "allocatable", "gpu_model", "ready", "schedulable", "taints", "labels", "datasets"):
            object.__setattr__(node, name, getattr(self, name))
        object.__setattr__(node, "allocated", allocated)
        object.__setattr__(node, "free", self.allocatable.minus_clamped(allocated))
        object.__setattr__(node, "model_key", self.model_key)
        object.__setattr__(node, "blocked", self.blocked)
        return node


# (model key, free GPUs, blocked by a taint)
BucketKey = tuple[str, int, bool]
# (model key, blocked by a taint)
PoolKey = tuple[str, bool]
# Distinct gang shapes remembered per index; beyond this, answers are computed, not stored.
_MEMO_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class ClusterIndex:
    """Aggregates of the eligible (ready, schedulable) nodes of one snapshot.

    Placement rejects most clusters from these numbers alone and packs
    pods from `buckets`, visiting few nodes. Every field is derived from the
    nodes; `ClusterSnapshot` keeps it consistent.
    """

    # (model key, free GPUs, blocked) -> names of eligible nodes in that state, sorted. Nodes with a
    # blocking taint sit in buckets of their own, so gangs without tolerations never visit them.
    buckets: Map[BucketKey, tuple[str, ...]]
    # (model key, blocked) -> ascending free-GPU counts that have a non-empty bucket.
    free_counts: Map[PoolKey, tuple[int, ...]]
    # All non-empty bucket keys ordered by (free GPUs, blocked, model): the scan order for GPU-less pods.
    bucket_order: tuple[BucketKey, ...]
    # model key -> {allocatable GPUs per node -> eligible node count}: what could fit if all were free.
    capacity_by_model: Map[str, Map[int, int]]
    free_gpu_by_model: Map[str, int]
    free_cpu_milli: int
    free_memory: int
    free_rdma: int
    # Allocatable CPU and memory of the eligible nodes: what could fit if they were empty.
    capacity_cpu_milli: int
    capacity_memory: int
    rdma_nodes: int
    eligible_nodes: int
    not_ready_nodes: int
    unschedulable_nodes: int
    # dataset -> number of nodes (any state) caching it locally.
    node_datasets: Map[str, int]
    # (label key, value) -> number of eligible nodes carrying it: a node selector no node can
    # satisfy is rejected without visiting a node.
    node_labels: Map[tuple[str, str], int] = field(default_factory=Map)
    # Allocatable shapes of the eligible nodes -> node count, and their componentwise maximum.
    shapes: Map[Resources, int] = field(default_factory=Map)
    max_node_allocatable: Resources = ZERO
    # GPU models (not CPU_ONLY) ordered by free GPUs (desc), then name: the try order of "any model".
    models_by_free: tuple[str, ...] = ()
    # Memo of the histogram bounds below, keyed (from capacity?, model, GPUs per pod). The index is
    # immutable, so a bound once computed stays true; the memo only saves recomputing it per gang.
    _bounds: dict[tuple[bool, str, int], int] = field(default_factory=dict, compare=False, repr=False)
    # Memo for plugins whose answers are functions of this index alone (see `remember`).
    _memo: dict[Hashable, object] = field(default_factory=dict, compare=False, repr=False)

    def recall(self, key: Hashable) -> object | None:
        return self._memo.get(key)

    def remember(self, key: Hashable, value: object) -> None:
        """Memoise a value that depends only on this (immutable) index and `key`. Bounded in size."""
        if len(self._memo) < _MEMO_LIMIT:
            self._memo[key] = value

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """GPU models with at least one eligible node, sorted."""
        return tuple(sorted(m for m in self.capacity_by_model if m != CPU_ONLY))

    def free_counts_of(self, model: str, *, tolerant: bool) -> tuple[int, ...]:
        """Ascending free-GPU counts of a model's non-empty buckets; with `tolerant`, tainted ones too."""
        clean = self.free_counts.get((model, False), ())
        if not tolerant:
            return clean
        tainted = self.free_counts.get((model, True), ())
        return tuple(sorted(set(clean) | set(tainted))) if tainted else clean

    def free_gpu_histogram(self, model: str) -> tuple[tuple[int, int], ...]:
        """((free GPUs, eligible nodes with exactly that many), ...) for one model, ascending."""
        buckets = self.buckets
        return tuple(
            (k, len(buckets.get((model, k, False), ())) + len(buckets.get((model, k, True), ())))
            for k in self.free_counts_of(model, tolerant=True)
        )

    def max_pods_by_free_gpus(self, model: str, gpus_per_pod: int) -> int:
        """Upper bound on pods of `gpus_per_pod` GPUs that fit, counting free GPUs node by node only."""
        key = (False, model, gpus_per_pod)
        total = self._bounds.get(key)
        if total is None:
            total = 0
            for k, count in self.free_gpu_histogram(model):
                if k >= gpus_per_pod:
                    total += count * (k // gpus_per_pod)
            self._bounds[key] = total
        return total

    def max_pods_by_capacity(self, model: str, gpus_per_pod: int) -> int:
        """Upper bound on pods of `gpus_per_pod` GPUs the eligible nodes could hold if entirely free."""
        key = (True, model, gpus_per_pod)
        total = self._bounds.get(key)
        if total is None:
            total = 0
            for k, count in self.capacity_by_model.get(model, Map()).items():
                if k >= gpus_per_pod:
                    total += count * (k // gpus_per_pod)
            self._bounds[key] = total
        return total


_EMPTY_INDEX = ClusterIndex(
    buckets=Map(),
    free_counts=Map(),
    bucket_order=(),
    capacity_by_model=Map(),
    free_gpu_by_model=Map(),
    free_cpu_milli=0,
    free_memory=0,
    free_rdma=0,
    capacity_cpu_milli=0,
    capacity_memory=0,
    rdma_nodes=0,
    eligible_nodes=0,
    not_ready_nodes=0,
    unschedulable_nodes=0,
    node_datasets=Map(),
)


class _IndexDraft:
    """A private, short-lived mutable copy of an index, used to apply a batch of node changes."""

    __slots__ = (
        "_base",
        "_buckets",
        "_lists",
        "_touched",
        "_capacity",
        "_free_gpu",
        "_datasets",
        "_counters",
        "_shapes",
        "_labels",
    )

    def __init__(self, base: ClusterIndex) -> None:
        self._base = base
        self._buckets = base.buckets.mutate()
        # Buckets this draft changes, as sorted lists: an insertion moves pointers (no new tuple, no reference
        # counting per element), so a batch of k changes into one bucket of n nodes costs O(n + k log n) plus
        # memmoves, not k tuple copies (a 5,000-node cluster's first build was quadratic). Frozen to tuples once.
        self._lists: dict[BucketKey, list[str]] = {}
        self._touched: set[BucketKey] = set()
        self._capacity: dict[str, dict[int, int]] = {}
        self._free_gpu: dict[str, int] = {}
        self._datasets: dict[str, int] = {}
        self._shapes: dict[Resources, int] | None = None
        self._labels: dict[tuple[str, str], int] = {}
        self._counters = [
            base.free_cpu_milli,
            base.free_memory,
            base.free_rdma,
            base.rdma_nodes,
            base.eligible_nodes,
            base.not_ready_nodes,
            base.unschedulable_nodes,
            base.capacity_cpu_milli,
            base.capacity_memory,
        ]

    def _capacity_of(self, model: str) -> dict[int, int]:
        table = self._capacity.get(model)
        if table is None:
            table = dict(self._base.capacity_by_model.get(model, Map()))
            self._capacity[model] = table
        return table

    def _adjust_dataset(self, name: str, delta: int) -> None:
        count = self._datasets.get(name)
        if count is None:
            count = self._base.node_datasets.get(name, 0)
        self._datasets[name] = count + delta

    def change(self, old: NodeState | None, new: NodeState | None) -> None:
        if old is not None and new is not None and old.eligible and new.eligible:
            if (
                old.model_key == new.model_key
                and old.blocked == new.blocked
                and (old.allocatable is new.allocatable or old.allocatable == new.allocatable)
            ):
                # Same capacity (the usual case: an allocation changed): only the totals move, and the
                # node changes bucket if its free GPU count did.
                self._move_totals(old, -1)
                self._move_totals(new, +1)
                if old.datasets != new.datasets:
                    self._move_datasets(old, -1)
                    self._move_datasets(new, +1)
                if old.labels is not new.labels and old.labels != new.labels:
                    self._move_labels(old, -1)
                    self._move_labels(new, +1)
                if old.free.gpu != new.free.gpu:
                    self._move_bucket(old, -1)
                    self._move_bucket(new, +1)
                return
        if old is not None:
            self._apply(old, -1)
        if new is not None:
            self._apply(new, +1)

    def _move_totals(self, node: NodeState, sign: int) -> None:
        free = node.free
        c = self._counters
        c[0] += sign * free.cpu_milli
        c[1] += sign * free.memory
        c[2] += sign * free.rdma
        if free.rdma > 0:
            c[3] += sign
        model = node.model_key
        current = self._free_gpu.get(model)
        if current is None:
            current = self._base.free_gpu_by_model.get(model, 0)
        self._free_gpu[model] = current + sign * free.gpu

    def _move_labels(self, node: NodeState, sign: int) -> None:
        base = self._base.node_labels
        for pair in node.labels.items():
            count = self._labels.get(pair)
            if count is None:
                count = base.get(pair, 0)
            self._labels[pair] = count + sign

    def _move_datasets(self, node: NodeState, sign: int) -> None:
        for name in node.datasets:
            self._adjust_dataset(name, sign)

    def _apply(self, node: NodeState, sign: int) -> None:
        self._move_datasets(node, sign)
        c = self._counters
        if not node.ready:
            c[5] += sign
            return
        if not node.schedulable:
            c[6] += sign
            return
        c[4] += sign
        self._move_labels(node, sign)
        c[7] += sign * node.allocatable.cpu_milli
        c[8] += sign * node.allocatable.memory
        self._move_totals(node, sign)
        capacity = self._capacity_of(node.model_key)
        capacity[node.allocatable.gpu] = capacity.get(node.allocatable.gpu, 0) + sign
        if self._shapes is None:
            self._shapes = dict(self._base.shapes)
        self._shapes[node.allocatable] = self._shapes.get(node.allocatable, 0) + sign
        self._move_bucket(node, sign)

    def _move_bucket(self, node: NodeState, sign: int) -> None:
        key = (node.model_key, node.free.gpu, node.blocked)
        bucket = self._lists.get(key)
        if bucket is None:
            bucket = self._lists[key] = list(self._buckets.get(key, ()))
        pos = bisect_left(bucket, node.name)
        if sign > 0:
            if pos < len(bucket) and bucket[pos] == node.name:
                raise ValueError(f"node {node.name!r} is already indexed")
            bucket.insert(pos, node.name)
        else:
            if pos >= len(bucket) or bucket[pos] != node.name:
                raise ValueError(f"node {node.name!r} is not indexed where its state says")
            del bucket[pos]
        self._touched.add(key)

    def freeze(self) -> ClusterIndex:
        base = self._base
        for key, names in self._lists.items():
            if names:
                self._buckets[key] = tuple(names)
            elif key in self._buckets:
                del self._buckets[key]
        buckets = self._buckets.finish()
        counts = base.free_counts
        bucket_order = base.bucket_order
        pools = {(model, blocked) for model, _, blocked in self._touched}
        if pools:
            updates: dict[PoolKey, tuple[int, ...]] = {}
            for pool in pools:
                present = set(counts.get(pool, ()))
                for model, k, blocked in self._touched:
                    if (model, blocked) != pool:
                        continue
                    if (model, k, blocked) in buckets:
                        present.add(k)
                    else:
                        present.discard(k)
                updates[pool] = tuple(sorted(present))
            if any(updates[pool] != counts.get(pool, ()) for pool in updates):
                mutation = counts.mutate()
                for pool, ks in updates.items():
                    if ks:
                        mutation[pool] = ks
                    elif pool in mutation:
                        del mutation[pool]
                counts = mutation.finish()
                bucket_order = tuple(
                    sorted(
                        ((m, k, b) for (m, b), ks in counts.items() for k in ks),
                        key=lambda key: (key[1], key[2], key[0]),
                    )
                )
        capacity = base.capacity_by_model
        if self._capacity:
            cap_mutation = capacity.mutate()
            for model, table in self._capacity.items():
                cleaned = {k: v for k, v in table.items() if v}
                if cleaned:
                    cap_mutation[model] = Map(cleaned)
                elif model in cap_mutation:
                    del cap_mutation[model]
            capacity = cap_mutation.finish()
        free_gpu = base.free_gpu_by_model
        if self._free_gpu:
            gpu_mutation = free_gpu.mutate()
            for model, value in self._free_gpu.items():
                if value or model in capacity:
                    gpu_mutation[model] = value
                elif model in gpu_mutation:
                    del gpu_mutation[model]
            free_gpu = gpu_mutation.finish()
        datasets = base.node_datasets
        if self._datasets:
            ds_mutation = datasets.mutate()
            for name, count in self._datasets.items():
                if count:
                    ds_mutation[name] = count
                elif name in ds_mutation:
                    del ds_mutation[name]
            datasets = ds_mutation.finish()
        labels = base.node_labels
        if self._labels:
            label_mutation = labels.mutate()
            for pair, count in self._labels.items():
                if count:
                    label_mutation[pair] = count
                elif pair in label_mutation:
                    del label_mutation[pair]
            labels = label_mutation.finish()
        shapes = base.shapes
        max_node = base.max_node_allocatable
        if self._shapes is not None:
            live = {shape: count for shape, count in self._shapes.items() if count}
            shapes = Map(live)
            max_node = Resources(
                max((r.cpu_milli for r in live), default=0),
                max((r.memory for r in live), default=0),
                max((r.gpu for r in live), default=0),
                max((r.rdma for r in live), default=0),
            )
        c = self._counters
        return ClusterIndex(
            buckets=buckets,
            free_counts=counts,
            bucket_order=bucket_order,
            capacity_by_model=capacity,
            free_gpu_by_model=free_gpu,
            free_cpu_milli=c[0],
            free_memory=c[1],
            free_rdma=c[2],
            capacity_cpu_milli=c[7],
            capacity_memory=c[8],
            rdma_nodes=c[3],
            eligible_nodes=c[4],
            not_ready_nodes=c[5],
            unschedulable_nodes=c[6],
            node_datasets=datasets,
            node_labels=labels,
            shapes=shapes,
            max_node_allocatable=max_node,
            models_by_free=tuple(
                sorted((m for m in capacity if m != CPU_ONLY), key=lambda m: (-free_gpu.get(m, 0), m))
            ),
        )


def _index_nodes(nodes: Iterable[NodeState]) -> ClusterIndex:
    draft = _IndexDraft(_EMPTY_INDEX)
    for node in nodes:
        draft.change(None, node)
    return draft.freeze()


def _frozen_counts(value: Mapping[str, int], what: str) -> Map[str, int]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping")
    for key, count in value.items():
        if not isinstance(key, str) or type(count) is not int or count < 0:
            raise ValueError(f"{what} must map strings to non-negative ints, got {key!r}: {count!r}")
    return value if isinstance(value, Map) else Map(value)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One member cluster at one resourceVersion: declared info, nodes, and which gangs' pods it shows.

    `bound_pods` maps a gang uid to the number of that gang's pods that are
    bound to nodes of this cluster, and so already counted in the nodes'
    `allocated`. Reservations use it to know when the member shows a gang.
    """

    name: str
    info: ClusterInfo
    nodes: Map[str, NodeState]
    resource_version: str = ""
    bound_pods: Map[str, int] = field(default_factory=Map)
    index: ClusterIndex = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("cluster name must be a non-empty string")
        if not isinstance(self.info, ClusterInfo):
            raise TypeError(f"cluster {self.name!r}: info must be a ClusterInfo")
        if not isinstance(self.resource_version, str):
            raise TypeError(f"cluster {self.name!r}: resource_version must be a string")
        nodes: Any = self.nodes
        if not isinstance(nodes, Map):
            if not isinstance(nodes, Mapping):
                raise TypeError(f"cluster {self.name!r}: nodes must be a mapping of name to NodeState")
            nodes = Map(nodes)
            object.__setattr__(self, "nodes", nodes)
        for key, node in nodes.items():
            if not isinstance(node, NodeState):
                raise TypeError(f"cluster {self.name!r}: node {key!r} is not a NodeState")
            if key != node.name:
                raise ValueError(f"cluster {self.name!r}: node stored under {key!r} is named {node.name!r}")
        object.__setattr__(self, "bound_pods", _frozen_counts(self.bound_pods, "bound_pods"))
        object.__setattr__(self, "index", _index_nodes(nodes.values()))

    @classmethod
    def build(
        cls,
        *,
        name: str,
        info: ClusterInfo,
        nodes: Iterable[NodeState],
        resource_version: str = "",
        bound_pods: Mapping[str, int] | None = None,
    ) -> ClusterSnapshot:
        """Build from a full node list (a re-list). Duplicate node names are an error."""
        table: dict[str, NodeState] = {}
        for node in nodes:
            if node.name in table:
                raise ValueError(f"cluster {name!r}: duplicate node {node.name!r}")
            table[node.name] = node
        return cls(
            name=name,
            info=info,
            nodes=Map(table),
            resource_version=resource_version,
            bound_pods=Map(bound_pods or {}),
        )

    def _derive(
        self,
        *,
        info: ClusterInfo | None = None,
        nodes: Map[str, NodeState] | None = None,
        index: ClusterIndex | None = None,
        resource_version: str | None = None,
        bound_pods: Map[str, int] | None = None,
    ) -> ClusterSnapshot:
        # Bypasses __post_init__: the caller supplies an index consistent with `nodes`.
        snapshot = object.__new__(ClusterSnapshot)
        object.__setattr__(snapshot, "name", self.name)
        object.__setattr__(snapshot, "info", self.info if info is None else info)
        object.__setattr__(snapshot, "nodes", self.nodes if nodes is None else nodes)
        object.__setattr__(snapshot, "index", self.index if index is None else index)
        object.__setattr__(
            snapshot, "resource_version", self.resource_version if resource_version is None else resource_version
        )
        object.__setattr__(snapshot, "bound_pods", self.bound_pods if bound_pods is None else bound_pods)
        return snapshot

    def with_nodes(
        self,
        updated: Iterable[NodeState] = (),
        *,
        removed: Iterable[str] = (),
        resource_version: str | None = None,
    ) -> ClusterSnapshot:
        """A new snapshot with some nodes added, replaced or removed; cost O(changed nodes)."""
        draft = _IndexDraft(self.index)
        mutation = self.nodes.mutate()
        for node in updated:
            if not isinstance(node, NodeState):
                raise TypeError(f"cluster {self.name!r}: {node!r} is not a NodeState")
            old = mutation.get(node.name)
            draft.change(old, node)
            mutation[node.name] = node
        for name in removed:
            old = mutation.get(name)
            if old is None:
                continue
            draft.change(old, None)
            del mutation[name]
        nodes = mutation.finish()
        return self._derive(nodes=nodes, index=draft.freeze(), resource_version=resource_version)

    def with_allocation_changes(self, changes: Mapping[str, Resources], *, release: bool = False) -> ClusterSnapshot:
        """Add (or with `release`, subtract) amounts to nodes' `allocated`; nodes no longer present are skipped.

        This is how reservations become an "assumed" view and how an assumed
        amount is taken back. Subtracting more than is allocated raises: that
        would mean a reservation was released twice.
        """
        if not changes:
            return self
        draft = _IndexDraft(self.index)
        nodes = self.nodes
        mutation = nodes.mutate()
        for name, amount in changes.items():
            old = mutation.get(name)
            if old is None:
                continue
            allocated = old.allocated - amount if release else old.allocated + amount
            new = old.with_allocated(allocated)
            draft.change(old, new)
            mutation[name] = new
        nodes = mutation.finish()
        return self._derive(nodes=nodes, index=draft.freeze())

    def with_info(self, info: ClusterInfo, *, resource_version: str | None = None) -> ClusterSnapshot:
        if not isinstance(info, ClusterInfo):
            raise TypeError("info must be a ClusterInfo")
        return self._derive(info=info, resource_version=resource_version)

    def with_bound_pods(self, bound_pods: Mapping[str, int], *, resource_version: str | None = None) -> ClusterSnapshot:
        return self._derive(bound_pods=_frozen_counts(bound_pods, "bound_pods"), resource_version=resource_version)

    @property
    def datasets_present(self) -> frozenset[str]:
        """Datasets the cluster declares on its storage or that some node caches."""
        return frozenset(self.info.datasets) | frozenset(self.index.node_datasets)
