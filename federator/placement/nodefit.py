"""Node-by-node gang packing: can every pod of a gang land on some node of one cluster, and where?

Heuristic (deterministic, documented because decisions depend on it):
- Roles are packed largest first (GPUs, then RDMA devices, CPU, memory).
- All GPU pods of a gang use one GPU model (a mixed-model all-reduce runs at
  the speed of the slowest GPU); pods without GPUs may use any node.
- Each role first tops up nodes this gang already uses (tightest first),
  then walks the free-GPU buckets of the snapshot index in ascending order
  of free GPUs (best fit), untainted buckets before tainted ones (which a
  gang without tolerations skips), nodes in name order within a bucket, and puts as
  many pods on each node as its free CPU, memory, GPUs and RDMA allow.
  Best fit keeps whole free nodes whole for the next big gang.
- A node is a candidate only if it is ready, schedulable, matches the gang's
  node selector and every NoSchedule/NoExecute taint is tolerated.

For a role of identical pods this greedy fill finds the true maximum number
of pods the free nodes hold, so "at most N fit" in a rejection is exact for
the role that failed (given the roles packed before it).

`fit_gang_on_capacity` answers the same question against nodes' allocatable
(as if they were empty), preferring the nodes with the most free now: it is
how a head-of-line hold chooses nodes to keep for a big gang.

Pure: no I/O; reads snapshots, returns new values, mutates only local scratch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from federator.placement.gang import GangRequest
from federator.placement.resources import Resources
from federator.placement.snapshot import BucketKey, ClusterIndex, ClusterSnapshot, NodeState

__all__ = [
    "GangFit",
    "RolePlacement",
    "candidate_gpu_models",
    "fit_gang",
    "fit_gang_on_capacity",
    "node_accepts_gang",
    "pods_on",
]


class RolePlacement(NamedTuple):
    """`pods` pods of role `role` on node `node`."""

    role: str
    node: str
    pods: int


@dataclass(frozen=True, slots=True)
class GangFit:
    """Result of packing one gang onto one cluster with one GPU model."""

    ok: bool
    gpu_model: str | None
    placements: tuple[RolePlacement, ...]
    pods_placed: int
    nodes_used: int = 0
    failed_role: str | None = None
    # Pods of the failed role that fit, after the roles packed before it.
    failed_role_fit: int = 0
    # Sums over the nodes the gang uses, for the packing score (GPU gangs use GPUs, others CPU).
    capacity_on_used_nodes: int = 0
    free_left_on_used_nodes: int = 0

    def node_amounts(self, gang: GangRequest) -> dict[str, Resources]:
        """What the gang takes on each node; the amounts a reservation holds."""
        requests = {role.name: role.requests for role in gang.roles}
        amounts: dict[str, Resources] = {}
        for placement in self.placements:
            amount = requests[placement.role].times(placement.pods)
            previous = amounts.get(placement.node)
            amounts[placement.node] = amount if previous is None else previous + amount
        return amounts


def node_accepts_gang(gang: GangRequest, node: NodeState, *, cluster: str) -> bool:
    """Ready, schedulable, not excluded for the gang in `cluster` (its excluded_nodes), node selector matched
    and blocking taints tolerated."""
    if not (node.ready and node.schedulable):
        return False
    if gang.excluded_nodes and node.name in gang.excluded_nodes.get(cluster, ()):
        return False
    labels = node.labels
    for key, value in gang.node_selector.items():
        if labels.get(key) != value:
            return False
    return gang.tolerates(node.taints) if node.taints else True


def candidate_gpu_models(gang: GangRequest, index: ClusterIndex) -> tuple[str, ...]:
    """GPU models of this cluster the gang may use, in the order to try them.

    The gang's own list is its preference order; with no list, any model
    goes, most free GPUs first, then by name.
    """
    if gang.gpu_models:
        present = index.capacity_by_model
        return tuple(model for model in gang.gpu_models if model in present)
    return index.models_by_free


def pods_on(left: Sequence[int], rc: int, rm: int, rg: int, rr: int, need: int) -> int:
    """Pods asking (cpu, memory, GPUs, rdma) = (rc, rm, rg, rr) that fit in `left`, at most `need`."""
    # Positional on purpose: called per node in the packing loop, where keyword passing costs.
    n = need
    if rg:
        n = min(n, left[2] // rg)
    if rc:
        n = min(n, left[0] // rc)
    if rm:
        n = min(n, left[1] // rm)
    if rr:
        n = min(n, left[3] // rr)
    return n


def fit_gang(gang: GangRequest, snapshot: ClusterSnapshot, *, gpu_model: str | None) -> GangFit:
    """Pack the gang onto the snapshot's free resources; see the module docstring for the heuristic."""
    nodes = snapshot.nodes
    index = snapshot.index
    buckets = index.buckets
    restricted = bool(gang.node_selector) or snapshot.name in gang.excluded_nodes
    # Nodes with a blocking taint are indexed apart; a gang without tolerations never visits them.
    tolerant = bool(gang.tolerations)
    # Free resources left on the nodes this gang uses: [cpu, memory, gpu, rdma].
    used: dict[str, list[int]] = {}
    rejected: set[str] = set()
    placements: list[RolePlacement] = []
    placed = 0
    for role in gang.fit_order:
        req = role.requests
        rc, rm, rg, rr = req.cpu_milli, req.memory, req.gpu, req.rdma
        need = role.replicas
        if used:
            for name in sorted(used, key=lambda n: (used[n][2], n)):
                if rg and nodes[name].model_key != gpu_model:
                    continue
                left = used[name]
                n = pods_on(left, rc, rm, rg, rr, need)
                if n > 0:
                    left[0] -= n * rc
                    left[1] -= n * rm
                    left[2] -= n * rg
                    left[3] -= n * rr
                    placements.append(RolePlacement(role.name, name, n))
                    need -= n
                    if not need:
                        break
        if need:
            if rg:
                if gpu_model is None:
                    raise ValueError("a gang with GPU pods needs a gpu_model to fit against")
                keys: list[BucketKey] = [
                    (gpu_model, k, False) for k in index.free_counts.get((gpu_model, False), ()) if k >= rg
                ]
                if tolerant:
                    keys.extend(
                        (gpu_model, k, True) for k in index.free_counts.get((gpu_model, True), ()) if k >= rg
                    )
                    keys.sort(key=lambda key: (key[1], key[2]))
            elif tolerant:
                keys = list(index.bucket_order)
            else:
                keys = [key for key in index.bucket_order if not key[2]]
            for key in keys:
                for name in buckets[key]:
                    if name in used or name in rejected:
                        continue
                    node = nodes[name]
                    if (restricted or node.taints) and not node_accepts_gang(gang, node, cluster=snapshot.name):
                        rejected.add(name)
                        continue
                    free = node.free
                    n = need
                    if rg:
                        n = min(n, free.gpu // rg)
                    if rc:
                        n = min(n, free.cpu_milli // rc)
                    if rm:
                        n = min(n, free.memory // rm)
                    if rr:
                        n = min(n, free.rdma // rr)
                    if n <= 0:
                        continue
                    used[name] = [
                        free.cpu_milli - n * rc,
                        free.memory - n * rm,
                        free.gpu - n * rg,
                        free.rdma - n * rr,
                    ]
                    placements.append(RolePlacement(role.name, name, n))
                    need -= n
                    if not need:
                        break
                if not need:
                    break
        if need:
            fit_count = role.replicas - need
            return GangFit(
                ok=False,
                gpu_model=gpu_model,
                placements=(),
                pods_placed=placed + fit_count,
                failed_role=role.name,
                failed_role_fit=fit_count,
            )
        placed += role.replicas
    return _finish(gang, snapshot, gpu_model=gpu_model, placements=placements, used=used)


def _finish(
    gang: GangRequest,
    snapshot: ClusterSnapshot,
    *,
    gpu_model: str | None,
    placements: list[RolePlacement],
    used: dict[str, list[int]],
) -> GangFit:
    nodes = snapshot.nodes
    capacity = 0
    left_over = 0
    by_gpu = gang.needs_gpu
    for name, left in used.items():
        node = nodes[name]
        if by_gpu:
            capacity += node.allocatable.gpu
            left_over += left[2]
        else:
            capacity += node.allocatable.cpu_milli
            left_over += left[0]
    return GangFit(
        ok=True,
        gpu_model=gpu_model,
        placements=tuple(placements),
        pods_placed=gang.pod_count,
        nodes_used=len(used),
        capacity_on_used_nodes=capacity,
        free_left_on_used_nodes=left_over,
    )


def fit_gang_on_capacity(gang: GangRequest, snapshot: ClusterSnapshot, *, gpu_model: str | None) -> GangFit:
    """Pack the gang onto nodes' allocatable (as if empty), preferring nodes with the most free now.

    O(n log n) in the cluster's nodes: used only for head-of-line holds, which
    are rare, never on the per-decision path.
    """
    candidates = sorted(
        (node for node in snapshot.nodes.values() if node_accepts_gang(gang, node, cluster=snapshot.name)),
        key=lambda node: (-node.free.gpu, -node.free.cpu_milli, -node.free.memory, node.name),
    )
    used: dict[str, list[int]] = {}
    placements: list[RolePlacement] = []
    placed = 0
    for role in gang.fit_order:
        req = role.requests
        rc, rm, rg, rr = req.cpu_milli, req.memory, req.gpu, req.rdma
        need = role.replicas
        for name in sorted(used, key=lambda n: (used[n][2], n)):
            if rg and snapshot.nodes[name].model_key != gpu_model:
                continue
            left = used[name]
            n = pods_on(left, rc, rm, rg, rr, need)
            if n > 0:
                left[0] -= n * rc
                left[1] -= n * rm
                left[2] -= n * rg
                left[3] -= n * rr
                placements.append(RolePlacement(role.name, name, n))
                need -= n
                if not need:
                    break
        if need:
            for node in candidates:
                if node.name in used or (rg and node.model_key != gpu_model):
                    continue
                cap = node.allocatable
                left = [cap.cpu_milli, cap.memory, cap.gpu, cap.rdma]
                n = pods_on(left, rc, rm, rg, rr, need)
                if n <= 0:
                    continue
                left[0] -= n * rc
                left[1] -= n * rm
                left[2] -= n * rg
                left[3] -= n * rr
                used[node.name] = left
                placements.append(RolePlacement(role.name, node.name, n))
                need -= n
                if not need:
                    break
        if need:
            fit_count = role.replicas - need
            return GangFit(
                ok=False,
                gpu_model=gpu_model,
                placements=(),
                pods_placed=placed + fit_count,
                failed_role=role.name,
                failed_role_fit=fit_count,
            )
        placed += role.replicas
    return _finish(gang, snapshot, gpu_model=gpu_model, placements=placements, used=used)
