"""SnapshotBuilder: folds one member cluster's Node, Pod and PodGroup events into placement's ClusterSnapshot.

The reflectors hand every batch of watch events (and the difference a
re-list finds) to `apply`; the builder keeps
- per node: what the member says (allocatable cpu, memory, nvidia.com/gpu,
  rdma/hca; GPU model from `nvidia.com/gpu.product`; Ready; schedulable;
  taints; labels; datasets from `federator.dev/dataset.<name>` labels) as a
  `NodeState` with nothing allocated;
- per bound, non-terminal pod: its node and effective requests, and the
  hub job it belongs to (labels `federator.dev/job-uid`, `federator.dev/epoch`);
  a node's `allocated` is the sum over its pods, kept incrementally;
- per PodGroup: phase and hub job labels;
and derives a new frozen `ClusterSnapshot` per batch with `with_nodes`
(structural sharing: cost O(changed nodes), never a copy of the cluster).
Pods that are unbound or finished allocate nothing and are not kept, so the
builder's memory is O(nodes + running pods).

For checkpoints it groups its state into shards (a node, and the pods
bound to it, hash to one shard; a PodGroup by its key), marks shards dirty
as they change, and encodes/decodes them (`checkpoint.py` writes them).

GPU models: the product label ("NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-32GB",
"H100-80GB-HBM3") is reduced to the model name jobs ask for ("A100", "V100",
"H100"); MIG and time-sliced products keep their suffix ("A100-MIG-1g.5gb",
"A100-SHARED") because they are not whole GPUs.

Pure bookkeeping: no I/O, no clocks, no asyncio. It must never raise on a
malformed member object: a node it cannot read is kept as not ready with
nothing allocatable (and counted in `malformed`), a pod it cannot read
allocates nothing.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from immutables import Map

from federator.apis.podtemplate import aggregate_requests
from federator.apis.quantity import QuantityError
from federator.apis.views import Body
from federator.placement.resources import ZERO, Resources
from federator.placement.snapshot import ClusterInfo, ClusterSnapshot, Fabric, NodeState, Taint, TaintEffect

__all__ = [
    "DATASET_LABEL_PREFIX",
    "EPOCH_LABEL",
    "GPU_PRODUCT_LABEL",
    "JOB_UID_LABEL",
    "NODES_KEY",
    "PODS_KEY",
    "SnapshotBuilder",
    "capacity_summary",
    "gpu_model_name",
    "node_state",
    "pod_requests",
]

NODES_KEY = "nodes"
PODS_KEY = "pods"
PODGROUPS_PREFIX = "podgroups."

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DATASET_LABEL_PREFIX = "federator.dev/dataset."
#: Labels the hub puts on every member object it delegates (pods, PodGroups).
JOB_UID_LABEL = "federator.dev/job-uid"
EPOCH_LABEL = "federator.dev/epoch"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro"})
_PAIRED_WORDS = frozenset({"rtx", "gtx", "titan"})
_MODEL_TOKEN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_EFFECTS = {e.value: e for e in TaintEffect}
#: A cluster's state is split into about this many nodes per checkpoint shard.
NODES_PER_SHARD = 64
MAX_SHARDS = 100


# ---------------------------------------------------------------- parsing member objects


def gpu_model_name(product: str) -> str:
    """The GPU model placement matches on, from a GPU feature discovery product label ("" if none)."""
    if not product or not isinstance(product, str):
        return ""
    text = product.strip()
    suffix = ""
    mig = re.search(r"-MIG-(.+)$", text)
    if mig:
        suffix, text = f"-MIG-{mig.group(1)}", text[: mig.start()]
    elif text.upper().endswith("-SHARED"):
        suffix, text = "-SHARED", text[: -len("-SHARED")]
    words = [w for w in re.split(r"[-_ ]+", text) if w]
    while words and words[0].lower() in _VENDOR_WORDS:
        words.pop(0)
    if not words:
        return ""
    model = words[0]
    if model.lower() in _PAIRED_WORDS and len(words) > 1:
        model = f"{model}-{words[1]}"
    name = f"{model}{suffix}"[:63]
    return name if _MODEL_TOKEN.match(name) else ""


def _labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in Body(obj).labels.items() if isinstance(k, str) and isinstance(v, str)}


def object_key(obj: Mapping[str, Any]) -> str:
    """"namespace/name" (or "name" for cluster-scoped objects); "" when the object has no name."""
    meta = Body(obj)
    name = meta.name
    if not name:
        return ""
    namespace = meta.namespace
    return f"{namespace}/{name}" if namespace else name


def _rv_of(obj: Mapping[str, Any]) -> str:
    return Body(obj).resource_version


# Nodes of one cluster cache few distinct sets of datasets: one frozenset object per distinct set, not one per
# node. Bounded; cleared when full.
_DATASETS_CACHE: dict[frozenset[str], frozenset[str]] = {}
_DATASETS_CACHE_MAX = 4096


def _datasets(labels: Mapping[str, str]) -> frozenset[str]:
    found = frozenset(sys.intern(k[len(DATASET_LABEL_PREFIX):]) for k in labels
                      if k.startswith(DATASET_LABEL_PREFIX) and len(k) > len(DATASET_LABEL_PREFIX))
    shared = _DATASETS_CACHE.get(found)
    if shared is None:
        if len(_DATASETS_CACHE) >= _DATASETS_CACHE_MAX:
            _DATASETS_CACHE.clear()
        shared = _DATASETS_CACHE[found] = found
    return shared


def _node_labels(labels: Mapping[str, str], template: Map[str, str] | None) -> Map[str, str]:
    """A node's labels as a Map that shares its structure with `template` (the labels of another node of the
    cluster, or of this node before) wherever the two agree, with interned values.

    Nodes of one pool differ in a label or two (the hostname): built from the previous node's Map, each
    node's Map costs the few HAMT nodes on the path to those labels, not a map of its own, and a value
    such as "true" or "A100-SXM4-40GB" is one string object for the whole cluster. Equal in content to
    `Map(labels)`."""
    if template is None:
        return Map({k: sys.intern(v) for k, v in labels.items()})
    mutation = template.mutate()
    for key, value in labels.items():
        if mutation.get(key) != value:
            mutation[sys.intern(key)] = sys.intern(value)
    if len(mutation) != len(labels):
        for key in [k for k in template if k not in labels]:
            del mutation[key]
    return mutation.finish()


def _taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    raw = spec.get("taints")
    out: list[Taint] = []
    for t in raw if isinstance(raw, list) else []:
        if not isinstance(t, dict):
            continue
        key, effect = t.get("key"), _EFFECTS.get(t.get("effect"))  # type: ignore[arg-type]
        if not isinstance(key, str) or not key or effect is None:
            continue
        value = t.get("value")
        out.append(Taint(key, value if isinstance(value, str) else "", effect))
    return tuple(out)


def node_state(obj: Mapping[str, Any], *, previous: NodeState | None = None,
               template: Map[str, str] | None = None) -> tuple[NodeState, bool]:
    """The NodeState (nothing allocated) of a member Node object, and whether it was well-formed.

    Shares the previous state's label map when the labels did not change; otherwise builds the labels from
    the previous state's, or else `template` (another node's labels), sharing what they have in common
    (see `_node_labels`). Nodes with the same allocatable share one `Resources` value."""
    name = object_key(obj)
    labels = _labels_of(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    well_formed = True
    allocatable_raw = status.get("allocatable")
    try:
        allocatable = _cached_resources(allocatable_raw if isinstance(allocatable_raw, dict) else {})
    except (QuantityError, TypeError, ValueError):
        allocatable, well_formed = ZERO, False
    ready = False
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    base = previous.labels if previous is not None and isinstance(previous.labels, Map) else template
    shared_labels: Mapping[str, str] = _node_labels(labels, base)
    if previous is not None and previous.labels == shared_labels:
        shared_labels = previous.labels
    state = NodeState(
        name=name,
        allocatable=allocatable,
        gpu_model=gpu_model_name(labels.get(GPU_PRODUCT_LABEL, "")) if allocatable.gpu else "",
        ready=ready and well_formed,
        schedulable=spec.get("unschedulable") is not True,
        taints=_taints(spec),
        labels=shared_labels,
        datasets=_datasets(labels),
    )
    return state, well_formed


# Pods of one cluster ask for a handful of distinct resource maps, and its nodes offer a handful: parsing each
# once saves most of the per-event cost (quantity parsing is exact, with Fractions), and equal maps share one
# Resources value. Bounded; cleared when full.
_REQUESTS_CACHE: dict[tuple[tuple[str, Any], ...], Resources] = {}
_REQUESTS_CACHE_MAX = 4096


def _cached_resources(resources: Mapping[str, Any]) -> Resources:
    """`Resources.from_kube(resources, strict=False)`, parsed once per distinct map (pod requests, node
    allocatable): the same value object for equal maps."""
    try:
        key = tuple(sorted(resources.items()))
        cached = _REQUESTS_CACHE.get(key)
    except TypeError:  # unhashable junk: parse (and fail) without caching
        return Resources.from_kube(resources, strict=False)
    if cached is None:
        cached = Resources.from_kube(resources, strict=False)
        if len(_REQUESTS_CACHE) >= _REQUESTS_CACHE_MAX:
            _REQUESTS_CACHE.clear()
        _REQUESTS_CACHE[key] = cached
    return cached


def _container_requests(container: Any) -> Resources:
    if not isinstance(container, dict):
        return ZERO
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return ZERO
    requests = resources.get("requests")
    limits = resources.get("limits")
    merged: dict[str, Any] = dict(limits) if isinstance(limits, dict) else {}
    # kube defaults a missing request to its limit, per resource
    if isinstance(requests, dict):
        merged.update(requests)
    return _cached_resources(merged)


def _max(a: Resources, b: Resources) -> Resources:
    return Resources(max(a.cpu_milli, b.cpu_milli), max(a.memory, b.memory), max(a.gpu, b.gpu), max(a.rdma, b.rdma))


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """A pod's effective request as kube-scheduler computes it (`apis.podtemplate.aggregate_requests`: the
    containers plus sidecars or the largest init container step, whichever is larger per resource), plus the
    pod overhead; each container's map parsed once (`_cached_resources`)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return ZERO
    total = aggregate_requests(spec, of=_container_requests, add=Resources.__add__, peak=_max, zero=ZERO)
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        total = total + Resources.from_kube(overhead, strict=False)
    return total


# ---------------------------------------------------------------- builder state


@dataclass(slots=True)
class _Pod:
    rv: str
    node: str
    requests: Resources
    job: str
    epoch: str


@dataclass(slots=True)
class _PodGroup:
    rv: str
    phase: str
    job: str
    epoch: str
    min_member: int


@dataclass(slots=True)
class _NodeEntry:
    rv: str
    base: NodeState  # allocated = ZERO
    #: the checkpoint row of `base` after name and rv, less the labels (built once: node facts change rarely,
    #: pods often; the labels are copied out of `base` at each encoding rather than kept twice)
    row_tail: list[Any] | None = None


@dataclass(slots=True)
class ApplyResult:
    """What one `apply` changed (for observers such as benchmarks and tests)."""

    snapshot: ClusterSnapshot
    changed_nodes: int = 0
    events: int = 0
    ignored: int = 0


def _shard_of(name: str, count: int) -> int:
    return zlib.crc32(name.encode()) % count


def shard_count_for(nodes: int) -> int:
    return max(1, min(MAX_SHARDS, -(-nodes // NODES_PER_SHARD)))


@dataclass
class SnapshotBuilder:
    """One member cluster's snapshot, kept current from its reflectors' events (see module docstring)."""

    cluster: str
    info: ClusterInfo
    #: resource keys this cluster syncs ("nodes", "pods", maybe "podgroups.<group>")
    resources: tuple[str, ...]
    shard_count: int = 0
    resource_versions: dict[str, str] = field(default_factory=dict)
    #: node or pod objects that could not be read (their effect is neutral)
    malformed: int = 0
    _nodes: dict[str, _NodeEntry] = field(default_factory=dict)
    _pods: dict[str, _Pod] = field(default_factory=dict)
    _pods_by_node: dict[str, dict[str, _Pod]] = field(default_factory=dict)
    _allocated: dict[str, Resources] = field(default_factory=dict)
    _podgroups: dict[str, _PodGroup] = field(default_factory=dict)
    _bound_by_job: dict[str, int] = field(default_factory=dict)
    #: job uid -> its bound pods (key -> pod): what `job_amounts` sums
    _pods_by_job: dict[str, dict[str, _Pod]] = field(default_factory=dict)
    _dirty: set[int] = field(default_factory=set)
    #: shard -> node names (with a node entry or bound pods) and PodGroup keys that hash to it
    _members: dict[int, set[str]] = field(default_factory=dict)
    _pg_members: dict[int, set[str]] = field(default_factory=dict)
    _jobs_changed: bool = False
    _snapshot: ClusterSnapshot | None = None
    #: the labels of the node built last: the next node's labels share its structure (see `_node_labels`)
    _label_template: Map[str, str] | None = None

    def __post_init__(self) -> None:
        if self._snapshot is None:
            self._snapshot = ClusterSnapshot.build(name=self.cluster, info=self.info, nodes=())

    # ------------------------------------------------------------ views

    @property
    def snapshot(self) -> ClusterSnapshot:
        assert self._snapshot is not None
        return self._snapshot

    def known(self, resource: str) -> Mapping[str, str]:
        """Objects this builder holds for `resource`, key -> resourceVersion (a re-list diffs against it)."""
        if resource == NODES_KEY:
            return {name: entry.rv for name, entry in self._nodes.items()}
        if resource == PODS_KEY:
            return {key: pod.rv for key, pod in self._pods.items()}
        if resource.startswith(PODGROUPS_PREFIX):
            return {key: pg.rv for key, pg in self._podgroups.items()}
        raise KeyError(f"unknown resource {resource!r}")

    def jobs_seen(self) -> dict[str, frozenset[str]]:
        """Hub job uid -> epochs seen on this member (bound running pods and PodGroups)."""
        seen: dict[str, set[str]] = {}
        for pod in self._pods.values():
            if pod.job:
                seen.setdefault(pod.job, set()).add(pod.epoch)
        for pg in self._podgroups.values():
            if pg.job:
                seen.setdefault(pg.job, set()).add(pg.epoch)
        return {job: frozenset(epochs) for job, epochs in seen.items()}

    def job_amounts(self, job_uid: str, *, epoch: int | None = None, up_to: bool = False) -> dict[str, Resources]:
        """Node -> what the job's bound, non-terminal pods hold there: the room their deletion frees.

        `epoch` keeps only the pods of that epoch (`up_to`: of that epoch or an older one); a pod whose
        epoch label is missing or malformed is kept only when no epoch is asked for. O(pods of the job)."""
        amounts: dict[str, Resources] = {}
        for pod in (self._pods_by_job.get(job_uid) or {}).values():
            if epoch is not None:
                label = pod.epoch
                if not label.isdigit():
                    continue
                value = int(label)
                if value > epoch or (value < epoch and not up_to):
                    continue
            previous = amounts.get(pod.node)
            amounts[pod.node] = pod.requests if previous is None else previous + pod.requests
        return amounts

    def podgroup_phases(self) -> dict[str, str]:
        return {key: pg.phase for key, pg in self._podgroups.items()}

    @property
    def composite_resource_version(self) -> str:
        """The snapshot's resourceVersion: each resource's, in a fixed order ("12/40/33")."""
        return "/".join(self.resource_versions.get(r, "") for r in self.resources)

    # ------------------------------------------------------------ updates

    def set_info(self, info: ClusterInfo) -> ClusterSnapshot:
        self.info = info
        self._snapshot = self.snapshot.with_info(info)
        return self._snapshot

    def apply(
        self, resource: str, events: Sequence[tuple[str, Mapping[str, Any]]], *, resource_version: str
    ) -> ApplyResult:
        """Fold a batch of (type, object) events of one resource; returns the new snapshot.

        ADDED and MODIFIED replace the object, DELETED removes it (by key);
        an empty batch only records the resourceVersion (a bookmark)."""
        if resource not in self.resources:
            raise KeyError(f"cluster {self.cluster}: resource {resource!r} is not synced here")
        changed: set[str] = set()
        removed: set[str] = set()
        ignored = 0
        if resource == NODES_KEY:
            for kind, obj in events:
                if not self._apply_node(kind, obj, changed, removed):
                    ignored += 1
        elif resource == PODS_KEY:
            for kind, obj in events:
                if not self._apply_pod(kind, obj, changed):
                    ignored += 1
        else:
            for kind, obj in events:
                if not self._apply_podgroup(kind, obj):
                    ignored += 1
        if resource_version:
            self.resource_versions[resource] = resource_version
        rv = self.composite_resource_version
        snapshot = self.snapshot
        updated = [self._node_view(name) for name in changed if name in self._nodes and name not in removed]
        if updated or removed:
            snapshot = snapshot.with_nodes(updated, removed=removed, resource_version=rv)
        if self._jobs_changed:
            self._jobs_changed = False
            snapshot = snapshot.with_bound_pods(self._bound_by_job, resource_version=rv)
        elif snapshot.resource_version != rv:
            snapshot = snapshot.with_info(snapshot.info, resource_version=rv)
        self._snapshot = snapshot
        return ApplyResult(snapshot=snapshot, changed_nodes=len(updated) + len(removed), events=len(events),
                           ignored=ignored)

    def _node_view(self, name: str) -> NodeState:
        base = self._nodes[name].base
        allocated = self._allocated.get(name, ZERO)
        return base if allocated.is_zero() else base.with_allocated(allocated)

    def _mark(self, name: str) -> None:
        if self.shard_count:
            shard = _shard_of(name, self.shard_count)
            self._dirty.add(shard)
            self._members.setdefault(shard, set()).add(name)

    def _mark_podgroup(self, key: str) -> None:
        if self.shard_count:
            shard = _shard_of(key, self.shard_count)
            self._dirty.add(shard)
            self._pg_members.setdefault(shard, set()).add(key)

    def _index_shards(self) -> None:
        self._members, self._pg_members = {}, {}
        count = self.shard_count
        for name in (*self._nodes, *self._pods_by_node):
            self._members.setdefault(_shard_of(name, count), set()).add(name)
        for key in self._podgroups:
            self._pg_members.setdefault(_shard_of(key, count), set()).add(key)

    def _apply_node(self, kind: str, obj: Mapping[str, Any], changed: set[str], removed: set[str]) -> bool:
        name = object_key(obj)
        if not name:
            self.malformed += 1
            return False
        if kind == "DELETED":
            if self._nodes.pop(name, None) is not None:
                removed.add(name)
                changed.discard(name)
                self._mark(name)
            return True
        entry = self._nodes.get(name)
        rv = _rv_of(obj)
        state, well_formed = node_state(obj, previous=entry.base if entry else None, template=self._label_template)
        if isinstance(state.labels, Map):
            self._label_template = state.labels
        if not well_formed:
            self.malformed += 1
        if entry is not None and entry.base == state:
            entry.rv = rv  # e.g. a heartbeat: nothing placement sees changed
            return True
        self._nodes[name] = _NodeEntry(rv=rv, base=state)
        changed.add(name)
        removed.discard(name)
        self._mark(name)
        return True

    def _apply_pod(self, kind: str, obj: Mapping[str, Any], changed: set[str]) -> bool:
        """False when the object is malformed (ignored)."""
        key = object_key(obj)
        if not key:
            self.malformed += 1
            return False
        old = self._pods.get(key)
        if kind == "DELETED":
            if old is not None:
                self._forget_pod(key, old, changed)
            return True
        spec = obj.get("spec")
        status = obj.get("status")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        phase = status.get("phase") if isinstance(status, dict) else None
        if not isinstance(node, str) or not node or phase in TERMINAL_PHASES:
            if old is not None:
                self._forget_pod(key, old, changed)
            return True
        try:
            requests = pod_requests(obj)
        except (QuantityError, TypeError, ValueError):
            self.malformed += 1
            requests = ZERO
        labels = _labels_of(obj)
        new = _Pod(rv=_rv_of(obj), node=node, requests=requests, job=labels.get(JOB_UID_LABEL, ""),
                   epoch=labels.get(EPOCH_LABEL, ""))
        if old is not None and old.node == new.node and old.requests == new.requests and old.job == new.job \
                and old.epoch == new.epoch:
            old.rv = new.rv
            return True
        if old is not None:
            self._forget_pod(key, old, changed)
        self._pods[key] = new
        self._pods_by_node.setdefault(node, {})[key] = new
        self._allocated[node] = self._allocated.get(node, ZERO) + requests
        if new.job:
            self._bound_by_job[new.job] = self._bound_by_job.get(new.job, 0) + 1
            self._pods_by_job.setdefault(new.job, {})[key] = new
            self._jobs_changed = True
        changed.add(node)
        self._mark(node)
        return True

    def _forget_pod(self, key: str, pod: _Pod, changed: set[str]) -> None:
        del self._pods[key]
        on_node = self._pods_by_node.get(pod.node)
        if on_node is not None:
            on_node.pop(key, None)
            if not on_node:
                del self._pods_by_node[pod.node]
        remaining = self._allocated.get(pod.node, ZERO) - pod.requests
        if remaining.is_zero():
            self._allocated.pop(pod.node, None)
        else:
            self._allocated[pod.node] = remaining
        if pod.job:
            self._jobs_changed = True
            of_job = self._pods_by_job.get(pod.job)
            if of_job is not None:
                of_job.pop(key, None)
                if not of_job:
                    del self._pods_by_job[pod.job]
            count = self._bound_by_job.get(pod.job, 0) - 1
            if count > 0:
                self._bound_by_job[pod.job] = count
            else:
                self._bound_by_job.pop(pod.job, None)
        changed.add(pod.node)
        self._mark(pod.node)

    def _apply_podgroup(self, kind: str, obj: Mapping[str, Any]) -> bool:
        key = object_key(obj)
        if not key:
            self.malformed += 1
            return False
        if kind == "DELETED":
            if self._podgroups.pop(key, None) is not None:
                self._mark_podgroup(key)
            return True
        labels = _labels_of(obj)
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(status, dict) and isinstance(spec, dict)
        phase = status.get("phase")
        min_member = spec.get("minMember")
        self._podgroups[key] = _PodGroup(
            rv=_rv_of(obj), phase=phase if isinstance(phase, str) else "",
            job=labels.get(JOB_UID_LABEL, ""), epoch=labels.get(EPOCH_LABEL, ""),
            min_member=min_member if isinstance(min_member, int) and not isinstance(min_member, bool) else 0,
        )
        self._mark_podgroup(key)
        return True

    # ------------------------------------------------------------ checkpoint shards

    def ensure_shards(self) -> None:
        """Fix the shard count from the node count (once); every shard starts dirty."""
        if not self.shard_count:
            self.shard_count = shard_count_for(len(self._nodes))
            self._index_shards()
            self._dirty = set(range(self.shard_count))

    def take_dirty(self) -> set[int]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_dirty(self, shards: Iterable[int]) -> None:
        self._dirty.update(shards)

    @property
    def has_dirty(self) -> bool:
        return bool(self._dirty)

    def encode_shard(self, shard: int) -> dict[str, Any]:
        """The state of one shard as plain JSON-able data (cost: the shard's members, not the cluster)."""
        nodes = []
        pods = []
        members = self._members.get(shard, set())
        for name in sorted(members):
            entry = self._nodes.get(name)
            on_node = self._pods_by_node.get(name)
            if entry is None and not on_node:
                members.discard(name)
                continue
            if entry is not None:
                tail = entry.row_tail
                if tail is None:
                    b = entry.base
                    a = b.allocatable
                    tail = entry.row_tail = [a.cpu_milli, a.memory, a.gpu, a.rdma, b.gpu_model, b.ready, b.schedulable,
                                             [[t.key, t.value, t.effect.value] for t in b.taints]]
                nodes.append([name, entry.rv, *tail, dict(entry.base.labels)])
            for key, p in (on_node or {}).items():
                r = p.requests
                pods.append([key, p.rv, name, r.cpu_milli, r.memory, r.gpu, r.rdma, p.job, p.epoch])
        groups = []
        pg_members = self._pg_members.get(shard, set())
        for key in sorted(pg_members):
            g = self._podgroups.get(key)
            if g is None:
                pg_members.discard(key)
                continue
            groups.append([key, g.rv, g.phase, g.job, g.epoch, g.min_member])
        return {"nodes": nodes, "pods": pods, "podgroups": groups}

    @classmethod
    def restore(
        cls,
        *,
        cluster: str,
        info: ClusterInfo,
        resources: Sequence[str],
        resource_versions: Mapping[str, str],
        shard_count: int,
        shards: Iterable[Mapping[str, Any]],
    ) -> SnapshotBuilder:
        """Rebuild from checkpoint shards (as `encode_shard` made them). Raises ValueError on bad data."""
        builder = cls(cluster=cluster, info=info, resources=tuple(resources), shard_count=shard_count,
                      resource_versions=dict(resource_versions))
        allocatables: dict[tuple[Any, ...], Resources] = {}
        try:
            for shard in shards:
                for row in shard.get("nodes", ()):
                    name, rv, cpu, mem, gpu, rdma, model, ready, schedulable, taints, labels = row
                    allocatable = allocatables.get((cpu, mem, gpu, rdma))
                    if allocatable is None:
                        allocatable = allocatables[(cpu, mem, gpu, rdma)] = Resources(cpu, mem, gpu, rdma)
                    if not isinstance(labels, dict):
                        raise TypeError(f"node {name!r}: labels are not a mapping")
                    state = NodeState(
                        name=name, allocatable=allocatable, gpu_model=model, ready=bool(ready),
                        schedulable=bool(schedulable), taints=tuple(Taint(k, v, _EFFECTS[e]) for k, v, e in taints),
                        labels=_node_labels(labels, builder._label_template), datasets=_datasets(labels),
                    )
                    builder._label_template = state.labels  # type: ignore[assignment]
                    builder._nodes[name] = _NodeEntry(rv=rv, base=state)
                for row in shard.get("pods", ()):
                    key, rv, node, cpu, mem, gpu, rdma, job, epoch = row
                    pod = _Pod(rv=rv, node=node, requests=Resources(cpu, mem, gpu, rdma), job=job, epoch=epoch)
                    builder._pods[key] = pod
                    builder._pods_by_node.setdefault(node, {})[key] = pod
                    builder._allocated[node] = builder._allocated.get(node, ZERO) + pod.requests
                    if job:
                        builder._bound_by_job[job] = builder._bound_by_job.get(job, 0) + 1
                        builder._pods_by_job.setdefault(job, {})[key] = pod
                for row in shard.get("podgroups", ()):
                    key, rv, phase, job, epoch, min_member = row
                    builder._podgroups[key] = _PodGroup(rv=rv, phase=phase, job=job, epoch=epoch,
                                                        min_member=min_member)
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"cluster {cluster}: checkpoint shard is malformed: {type(e).__name__}: {e}") from None
        if shard_count:
            builder._index_shards()
        builder._snapshot = ClusterSnapshot.build(
            name=cluster, info=info, nodes=(builder._node_view(n) for n in builder._nodes),
            resource_version=builder.composite_resource_version, bound_pods=builder._bound_by_job,
        )
        return builder

    def rebuilt(self) -> ClusterSnapshot:
        """The snapshot indexed from scratch from the builder's tables (a consistency check)."""
        return ClusterSnapshot.build(name=self.cluster, info=self.info,
                                     nodes=(self._node_view(n) for n in self._nodes),
                                     resource_version=self.composite_resource_version,
                                     bound_pods=self._bound_by_job)

    def iter_pods(self) -> Iterator[tuple[str, str, Resources]]:
        """(pod key, node, requests) of every pod counted in an allocation."""
        for key, pod in self._pods.items():
            yield key, pod.node, pod.requests


# ---------------------------------------------------------------- status summary


def capacity_summary(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """MemberCluster.status.capacity: nodes, ready nodes, GPUs total/free (per model), nodes per fabric.

    Total counts every node's allocatable GPUs; free counts only eligible
    (Ready, schedulable) nodes. A node is on the RDMA fabric when the cluster
    is and the node offers rdma/hca; otherwise on ethernet."""
    by_model: dict[str, dict[str, int]] = {}
    fabric_rdma = snapshot.info.fabric is Fabric.RDMA
    per_fabric = {"rdma": 0, "ethernet": 0}
    ready = total = free = 0
    for node in snapshot.nodes.values():
        if node.ready:
            ready += 1
        per_fabric["rdma" if fabric_rdma and node.allocatable.rdma > 0 else "ethernet"] += 1
        gpus = node.allocatable.gpu
        if not gpus:
            continue
        model = node.gpu_model or "unknown"
        entry = by_model.setdefault(model, {"total": 0, "free": 0})
        entry["total"] += gpus
        total += gpus
        if node.eligible:
            entry["free"] += node.free.gpu
            free += node.free.gpu
    return {
        "nodes": len(snapshot.nodes),
        "readyNodes": ready,
        "totalGPUs": total,
        "freeGPUs": free,
        "gpusByModel": dict(sorted(by_model.items())),
        "nodesByFabric": {k: v for k, v in per_fabric.items() if v},
    }


def datasets_seen(snapshot: ClusterSnapshot) -> list[str]:
    return sorted(snapshot.index.node_datasets)
