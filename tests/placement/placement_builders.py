"""Builders for placement tests (clusters, nodes, gangs) and an independent checker of decisions.

The checker re-implements the rules a placement must satisfy (capacity per
node, readiness, cordon, node selector, taints, GPU model, fabric, one
cluster per gang) in the plainest possible way, without the engine's
indexes or packing code, so that property tests compare two independent
implementations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from federator.placement import (
    ClusterInfo,
    ClusterSnapshot,
    Decision,
    GangRequest,
    NodeState,
    Resources,
    RoleRequest,
    RunningGang,
    Taint,
    Toleration,
)

GI = 2**30


def node(
    name: str,
    *,
    gpus: int = 8,
    used: int = 0,
    model: str = "A100",
    cpu: int = 96,
    mem_gi: int = 1024,
    rdma: int = 1,
    used_cpu: int | None = None,
    used_mem_gi: int | None = None,
    used_rdma: int = 0,
    ready: bool = True,
    schedulable: bool = True,
    taints: Sequence[Taint] = (),
    labels: Mapping[str, str] | None = None,
    datasets: Iterable[str] = (),
) -> NodeState:
    """A node with `gpus` GPUs of which `used` are allocated (with 8 cores and 64Gi per used GPU)."""
    return NodeState(
        name=name,
        allocatable=Resources(cpu * 1000, mem_gi * GI, gpus, rdma),
        allocated=Resources(
            (used * 8 if used_cpu is None else used_cpu) * 1000,
            (used * 64 if used_mem_gi is None else used_mem_gi) * GI,
            used,
            used_rdma,
        ),
        gpu_model=model if gpus else "",
        ready=ready,
        schedulable=schedulable,
        taints=tuple(taints),
        labels=dict(labels or {}),
        datasets=frozenset(datasets),
    )


def nodes(prefix: str, count: int, **kwargs: object) -> list[NodeState]:
    return [node(f"{prefix}-{i:03d}", **kwargs) for i in range(count)]  # type: ignore[arg-type]


def cluster(
    name: str,
    cluster_nodes: Iterable[NodeState],
    *,
    location: str = "on-prem",
    fabric: str = "rdma",
    rdma_kind: str | None = None,
    bandwidth: float = 200.0,
    cost: float = 2.0,
    labels: Mapping[str, str] | None = None,
    datasets: Mapping[str, int] | None = None,
    cordoned: bool = False,
    healthy: bool = True,
    rv: str = "1",
    bound_pods: Mapping[str, int] | None = None,
    **info_fields: object,
) -> ClusterSnapshot:
    if rdma_kind is None and fabric == "rdma":
        rdma_kind = "infiniband"
    info = ClusterInfo(
        location=location,  # type: ignore[arg-type]
        fabric=fabric,  # type: ignore[arg-type]
        rdma_kind=rdma_kind,  # type: ignore[arg-type]
        bandwidth_gbps=bandwidth,
        cost_per_gpu_hour=cost,
        labels=dict(labels or {}),
        datasets=dict(datasets or {}),
        cordoned=cordoned,
        healthy=healthy,
        **info_fields,  # type: ignore[arg-type]
    )
    return ClusterSnapshot.build(name=name, info=info, nodes=cluster_nodes, resource_version=rv, bound_pods=bound_pods)


def gang(
    key: str,
    *,
    pods: int = 1,
    gpus: int = 8,
    cpu: int | None = None,
    mem_gi: int | None = None,
    rdma: int = 0,
    roles: Sequence[RoleRequest] | None = None,
    network: str = "any",
    models: Sequence[str] = (),
    datasets: Sequence[str] = (),
    priority: int = 0,
    submitted_at: float = 0.0,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
    uid: str | None = None,
    min_pods: int | None = None,
    max_pods: int | None = None,
    **kwargs: object,
) -> GangRequest:
    """A one-role gang of `pods` pods x `gpus` GPUs (8 cores and 64Gi per GPU unless given); elastic between
    `min_pods` and `max_pods` when given."""
    if roles is None:
        per_cpu = cpu if cpu is not None else max(1, gpus * 8)
        per_mem = mem_gi if mem_gi is not None else max(1, gpus * 64)
        roles = (
            RoleRequest("worker", pods, Resources(per_cpu * 1000, per_mem * GI, gpus, rdma), min_pods, max_pods),
        )
    return GangRequest(
        key=key,
        uid=uid or f"uid-{key}",
        roles=tuple(roles),
        network=network,  # type: ignore[arg-type]
        gpu_models=tuple(models),
        datasets=tuple(datasets),
        priority=priority,
        submitted_at=submitted_at,
        node_selector=dict(node_selector or {}),
        tolerations=tuple(tolerations),
        **kwargs,  # type: ignore[arg-type]
    )


def per_gpu(gpus: int) -> Resources:
    """What `gpus` GPUs of a pod ask in these tests: 8 cores and 64Gi per GPU."""
    return Resources(gpus * 8000, gpus * 64 * GI, gpus, 0)


def running_gang(
    key: str,
    *,
    queue: str = "vision",
    on: Mapping[str, int] | None = None,
    gpus: int | None = None,
    cluster: str = "a",
    priority: int = 0,
    started_at: float = 0.0,
    borrowed: bool = False,
    model: str = "A100",
    checkpointed_at: float | None = None,
) -> RunningGang:
    """A running gang (uid "run-<key>") holding `on[node]` GPUs per node, charged `gpus` (default: their sum)."""
    held = dict(on or {})
    return RunningGang(
        uid=f"run-{key}",
        key=key,
        cluster=cluster,
        queue=queue,
        priority=priority,
        started_at=started_at,
        demand=per_gpu(sum(held.values()) if gpus is None else gpus),
        gpu_model=model,
        amounts={name: per_gpu(count) for name, count in held.items()},
        borrowed=borrowed,
        checkpointed_at=checkpointed_at,
    )


def by_name(*snapshots: ClusterSnapshot) -> dict[str, ClusterSnapshot]:
    return {s.name: s for s in snapshots}


def _tolerated(gang: GangRequest, taint: Taint) -> bool:
    if taint.effect.value == "PreferNoSchedule":
        return True
    for toleration in gang.tolerations:
        if toleration.effect is not None and toleration.effect.value != taint.effect.value:
            continue
        if toleration.key == "" and toleration.operator.value == "Exists":
            return True
        if toleration.key != taint.key:
            continue
        if toleration.operator.value == "Exists" or toleration.value == taint.value:
            return True
    return False


def check_decisions(
    decisions: Sequence[Decision],
    gangs: Mapping[str, GangRequest],
    fresh: Mapping[str, ClusterSnapshot],
    *,
    extra_allocated: Mapping[tuple[str, str], Resources] | None = None,
) -> None:
    """Assert every decision fits node by node on the fresh snapshots, counting all decisions together.

    Raises AssertionError describing the first violation. `extra_allocated`
    adds amounts already promised (cluster, node) -> Resources.
    """
    load: dict[tuple[str, str], list[int]] = {}
    for (cluster_name, node_name), amount in (extra_allocated or {}).items():
        load[(cluster_name, node_name)] = [amount.cpu_milli, amount.memory, amount.gpu, amount.rdma]
    for decision in decisions:
        g = gangs[decision.gang_uid]
        snapshot = fresh[decision.cluster]
        info = snapshot.info
        assert g.network.value != "rdma" or info.fabric.value == "rdma", f"{g.key}: rdma gang on {info.fabric}"
        assert g.network.value != "ethernet" or info.fabric.value == "ethernet", f"{g.key}: ethernet gang on rdma"
        assert info.healthy and not info.cordoned, f"{g.key}: placed on unhealthy/cordoned {decision.cluster}"
        if g.cluster_selector is not None:
            assert g.cluster_selector.matches(info.labels), f"{g.key}: cluster selector violated"
        # An elastic gang is placed at the size the decision names, within each role's range.
        counts = {role.name: decision.replicas.get(role.name, role.replicas) for role in g.roles}
        for role in g.roles:
            low, high = role.min_replicas or role.replicas, role.max_replicas or role.replicas
            assert low <= counts[role.name] <= high, f"{g.key}: {role.name} at {counts[role.name]}, not in {low}..{high}"
        expected = {(role.name, i) for role in g.roles for i in range(counts[role.name])}
        got = [(pod.role, pod.index) for pod in decision.assignment]
        assert sorted(got) == sorted(expected), f"{g.key}: pods assigned {sorted(got)} != {sorted(expected)}"
        requests = {role.name: role.requests for role in g.roles}
        gpu_models = set()
        for pod in decision.assignment:
            n = snapshot.nodes.get(pod.node)
            assert n is not None, f"{g.key}: node {pod.node} not in {decision.cluster}"
            assert n.ready and n.schedulable, f"{g.key}: {pod.node} not ready/schedulable"
            for key, value in g.node_selector.items():
                assert n.labels.get(key) == value, f"{g.key}: node selector {key}={value} violated on {pod.node}"
            for taint in n.taints:
                assert _tolerated(g, taint), f"{g.key}: untolerated taint {taint.key} on {pod.node}"
            req = requests[pod.role]
            if req.gpu:
                gpu_models.add(n.gpu_model)
                if g.gpu_models:
                    assert n.gpu_model in g.gpu_models, f"{g.key}: model {n.gpu_model} not accepted"
            slot = load.setdefault((decision.cluster, pod.node), [0, 0, 0, 0])
            slot[0] += req.cpu_milli
            slot[1] += req.memory
            slot[2] += req.gpu
            slot[3] += req.rdma
        assert len(gpu_models) <= 1, f"{g.key}: GPU pods span models {gpu_models}"
    for (cluster_name, node_name), (cpu, mem, gpu, rdma) in load.items():
        n = fresh[cluster_name].nodes[node_name]
        free = n.allocatable.minus_clamped(n.allocated)
        assert cpu <= free.cpu_milli, f"{cluster_name}/{node_name}: cpu {cpu} > free {free.cpu_milli}"
        assert mem <= free.memory, f"{cluster_name}/{node_name}: memory {mem} > free {free.memory}"
        assert gpu <= free.gpu, f"{cluster_name}/{node_name}: gpu {gpu} > free {free.gpu}"
        assert rdma <= free.rdma, f"{cluster_name}/{node_name}: rdma {rdma} > free {free.rdma}"


def run_filter(
    plugin: object, g: GangRequest, snapshot: ClusterSnapshot, *, now: float = 0.0, profile: object = None
) -> tuple[object, object]:
    """Run one filter plugin alone; returns (FilterResult, EvalContext)."""
    from federator.placement.framework import EvalContext, FederationStats, Profile

    ctx = EvalContext(now=now, profile=profile or Profile(), federation=FederationStats.of([snapshot]))  # type: ignore[arg-type]
    return plugin.filter(g, snapshot, ctx), ctx  # type: ignore[attr-defined]


def score_columns(
    plugin_name: str, g: GangRequest, snapshots: Sequence[ClusterSnapshot], *, profile: object = None
) -> dict[str, tuple[float, float]]:
    """Evaluate the gang exhaustively with the default plugins; {cluster: (raw, normalised)} of one score."""
    import dataclasses

    from federator.placement.cycle import evaluate_gang
    from federator.placement.framework import FederationStats, Profile
    from federator.placement.plugins import default_registry

    chosen = dataclasses.replace(profile or Profile(), exhaustive=True)  # type: ignore[type-var]
    resolved = default_registry().resolve(chosen)
    evaluation = evaluate_gang(
        g, sorted(snapshots, key=lambda s: s.name), resolved=resolved, now=0.0, federation=FederationStats.of(snapshots)
    )
    out: dict[str, tuple[float, float]] = {}
    for breakdown in evaluation.ranked:
        for part in breakdown.parts:
            if part.plugin == plugin_name:
                out[breakdown.cluster] = (part.raw, part.normalized)
    return out


def context_for(snapshot: ClusterSnapshot, *, now: float = 0.0) -> object:
    """A fresh evaluation context for calling one plugin method directly."""
    from federator.placement.framework import EvalContext, FederationStats, Profile

    return EvalContext(now=now, profile=Profile(), federation=FederationStats.of([snapshot]))
