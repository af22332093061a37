"""Elastic gangs (roles with min_replicas < max_replicas): sizing, placement, shrink-instead-of-evict, growth.

Placement: table-driven cases (clusters and an elastic gang in, cluster and size out) and properties: an
elastic gang is placed whole in one cluster, at the largest size in its range that fits there node by node
(checked against an independent count), never below its minimum; a gang whose roles set min = replicas =
max is placed exactly as one that sets neither; pruning never changes the choice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import GI, by_name, check_decisions, cluster, gang, node, nodes, per_gpu, running_gang
from test_properties import MODELS, clusters, gangs

from federator.placement import (
    ClusterSnapshot,
    GangRequest,
    GrowthResult,
    PodAssignment,
    Profile,
    QueueQuota,
    QuotaAmounts,
    Resources,
    RoleRequest,
    RunningGang,
    RunningPod,
    WithinQueue,
    plan_growth,
    run_cycle,
)
from federator.placement.explain import render_decision, render_unplaced
from federator.placement.gang import MAX_GANG_PODS

PROFILE = Profile(hold_after_seconds=10_000.0)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def free_nodes(name: str, free: int, *, busy: int = 0, **kwargs: object) -> ClusterSnapshot:
    """A cluster of `free` empty 8-GPU nodes and `busy` full ones."""
    return cluster(name, nodes(f"{name}-free", free) + nodes(f"{name}-busy", busy, used=8), **kwargs)  # type: ignore[arg-type]


def elastic(key: str = "ns/e", *, low: int = 2, start: int = 3, high: int = 4, gpus: int = 8, **kwargs: object) -> GangRequest:
    return gang(key, pods=start, min_pods=low, max_pods=high, gpus=gpus, **kwargs)


# ---------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("low", "start", "high", "message"),
    [
        (3, 2, 4, r"role 'worker': min_replicas \(3\) must be at most replicas \(2\)"),
        (1, 5, 4, r"role 'worker': max_replicas \(4\) must be at least replicas \(5\)"),
        (0, 2, 4, "role 'worker': min_replicas must be a positive integer, got 0"),
        (1, 2, -1, "role 'worker': max_replicas must be a positive integer, got -1"),
        (True, 2, 4, "min_replicas must be a positive integer, got True"),
        (1, 2, 2.5, "max_replicas must be a positive integer, got 2.5"),
    ],
)
def test_a_bad_range_is_a_clear_error_naming_the_field(low: object, start: int, high: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoleRequest("worker", start, per_gpu(8), low, high)  # type: ignore[arg-type]


def test_a_hostile_maximum_is_refused_like_a_hostile_size() -> None:
    with pytest.raises(ValueError, match=f"10001 pods at max_replicas exceeds the limit of {MAX_GANG_PODS}"):
        elastic(low=1, start=1, high=MAX_GANG_PODS + 1)


def test_sizes_step_every_elastic_role_from_minimum_to_maximum() -> None:
    g = GangRequest(
        key="ns/ps", uid="u", roles=(
            RoleRequest("ps", 1, Resources(1000, GI), max_replicas=2),
            RoleRequest("worker", 4, per_gpu(1), 2, 8),
            RoleRequest("chief", 1, Resources(1000, GI)),
        ),
    )
    assert g.elastic and g.steps == 6 and g.range_pods() == (4, 11)
    assert [g.counts(k) for k in (0, 3, 6)] == [
        {"ps": 1, "worker": 2, "chief": 1}, {"ps": 1, "worker": 5, "chief": 1}, {"ps": 2, "worker": 8, "chief": 1},
    ]
    assert g.minimum.pod_count == 4 and g.maximum.pod_count == 11 and g.pod_count == 6  # preferred: replicas
    assert not g.minimum.elastic and g.minimum.uid == g.uid and g.sized(3) is g.sized(3)
    assert g.resized({"ps": 2, "worker": 3, "chief": 1}).pod_count == 6
    with pytest.raises(ValueError, match=r"role 'worker' must have 2..8 replicas, got 9"):
        g.resized({"ps": 1, "worker": 9, "chief": 1})
    with pytest.raises(ValueError, match="must name every role exactly once"):
        g.resized({"worker": 3})
    with pytest.raises(ValueError, match=r"size step must be an int in 0..6, got 7"):
        g.sized(7)
    fixed = gang("ns/f", pods=3)
    assert not fixed.elastic and fixed.steps == 0 and fixed.minimum is fixed is fixed.maximum


# ---------------------------------------------------------------- placement, table-driven


@dataclass
class Case:
    name: str
    clusters: Sequence[ClusterSnapshot]
    gang: GangRequest
    # (cluster, pods per role) or None: unplaced.
    expect: tuple[str, Mapping[str, int]] | None
    queues: Mapping[str, QueueQuota] | None = None
    running: Sequence[object] = field(default_factory=list)


CASES = [
    Case("at its maximum when there is room", [free_nodes("a", 6)], elastic(), ("a", {"worker": 4})),
    Case("at its minimum under pressure", [free_nodes("a", 2, busy=4)], elastic(), ("a", {"worker": 2})),
    Case("in between", [free_nodes("a", 3, busy=3)], elastic(), ("a", {"worker": 3})),
    Case(
        "pods of one GPU: as many as the free GPUs hold",
        [cluster("a", [node("n0", used=5), node("n1", used=6)])],
        elastic(low=1, start=2, high=16, gpus=1),
        ("a", {"worker": 5}),
    ),
    Case(
        "the cluster that fits more wins, other scores equal",
        [free_nodes("a", 2, busy=2), free_nodes("b", 4)],
        elastic(),
        ("b", {"worker": 4}),
    ),
    Case(
        "location preference still outweighs size",
        [free_nodes("a", 2, busy=2), free_nodes("b", 4, location="cloud")],
        elastic(),
        ("a", {"worker": 2}),
    ),
    Case(
        "never spans two clusters: the most one cluster holds",
        [free_nodes("a", 3, busy=1), free_nodes("b", 2, busy=2)],
        elastic(low=2, start=4, high=5),
        ("a", {"worker": 3}),
    ),
    Case(
        "several roles: the fixed ones whole, the elastic one as large as fits",
        [cluster("a", [node("c", gpus=0, rdma=0, cpu=16)] + nodes("g", 3))],
        GangRequest(
            key="ns/ps",
            uid="u-ps",
            roles=(RoleRequest("ps", 2, Resources(8000, 8 * GI)), RoleRequest("worker", 2, per_gpu(4), 1, 8)),
        ),
        ("a", {"ps": 2, "worker": 6}),
    ),
    Case(
        "quota caps the size: an elastic gang does not borrow to grow",
        [free_nodes("a", 6)],
        elastic(queue="vision", models=["A100"]),
        ("a", {"worker": 3}),
        queues={"vision": QueueQuota("vision", QuotaAmounts({"A100": 24}), cohort="all"),
                "lender": QueueQuota("lender", QuotaAmounts({"A100": 64}), cohort="all")},
    ),
    Case("fits nowhere even at its minimum: waits", [free_nodes("a", 1, busy=5)], elastic(), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_elastic_placement_table(case: Case) -> None:
    snaps = by_name(*case.clusters)
    result = run_cycle([case.gang], snaps, PROFILE, now=100.0, queues=case.queues, running=case.running)  # type: ignore[arg-type]
    if case.expect is None:
        assert result.decisions == ()
        return
    (decision,) = result.decisions
    name, counts = case.expect
    assert decision.cluster == name and dict(decision.replicas) == counts
    check_decisions([decision], {case.gang.uid: case.gang}, snaps)
    assert {pod.node for pod in decision.assignment} <= set(snaps[name].nodes)
    # The reservation holds exactly the pods placed.
    reservation = result.reservations.get(case.gang.uid)
    assert reservation is not None and reservation.pods == sum(counts.values())
    if case.queues is not None:
        charged = result.usage[case.gang.queue].used.gpus.get("A100", 0)
        assert charged == case.gang.resized(counts).total.gpu


def test_a_gang_that_fits_nowhere_says_why_at_its_minimum() -> None:
    g = elastic(low=2, start=3, high=6)
    result = run_cycle([g], by_name(free_nodes("a", 1, busy=5)), PROFILE, now=100.0)
    (waiting,) = result.unplaced
    rejection = waiting.why_not["a"]
    assert rejection.code == "InsufficientGpu" and rejection.numbers["pods_needed"] == 2
    assert "needs 2 pods of 8 A100 GPUs" in rejection.message and "at most 1 fit" in rejection.message
    assert "needs 2 pods" in render_unplaced(waiting)


def test_the_score_breakdown_says_how_much_each_cluster_fits() -> None:
    snaps = by_name(free_nodes("a", 2, busy=2), free_nodes("b", 3, busy=1), free_nodes("c", 4))
    profile = dataclasses.replace(PROFILE, exhaustive=True)
    (decision,) = run_cycle([elastic(low=2, start=2, high=4)], snaps, profile, now=0.0).decisions
    sizes = {b.cluster: next(p for p in b.parts if p.plugin == "elastic-size") for b in decision.scores}
    assert {name: (part.raw, part.normalized) for name, part in sizes.items()} == {
        "a": (2.0, 0.0), "b": (3.0, 50.0), "c": (4.0, 100.0),
    }
    assert decision.cluster == "c" and dict(decision.ranges) == {"worker": (2, 4)}
    text = render_decision(decision)
    assert "Elastic size: worker 4 (of 2..4)" in text and "elastic-size" in text


def test_reservations_of_a_placed_elastic_gang_keep_the_next_one_to_what_is_left() -> None:
    snaps = by_name(free_nodes("a", 5))
    first = run_cycle([elastic("ns/one", low=1, start=1, high=3)], snaps, PROFILE, now=0.0)
    assert dict(first.decisions[0].replicas) == {"worker": 3}
    second = run_cycle([elastic("ns/two", low=1, start=1, high=3)], snaps, PROFILE, now=1.0,
                       reservations=first.reservations)
    assert dict(second.decisions[0].replicas) == {"worker": 2}
    check_decisions(first.decisions + second.decisions, {
        "uid-ns/one": elastic("ns/one", low=1, start=1, high=3), "uid-ns/two": elastic("ns/two", low=1, start=1, high=3),
    }, snaps)


# ---------------------------------------------------------------- placement, properties


def _with_ranges(pending: list[GangRequest], draw: st.DrawFn, *, always: bool = False) -> list[GangRequest]:
    """Some roles of some gangs (with `always`, every role) made elastic around their replicas."""
    out = []
    for g in pending:
        roles = []
        for role in g.roles:
            if always or draw(st.booleans()):
                low = draw(st.integers(1, role.replicas))
                high = draw(st.integers(role.replicas, role.replicas + 6))
                role = RoleRequest(role.name, role.replicas, role.requests, low, high)
            roles.append(role)
        out.append(dataclasses.replace(g, roles=tuple(roles)))
    return out


@st.composite
def elastic_gangs(
    draw: st.DrawFn, count: int | None = None, single_role: bool = False, always: bool = False
) -> list[GangRequest]:
    return _with_ranges(draw(gangs(count=count, single_role=single_role)), draw, always=always)


def _fingerprint(decisions: Sequence[object]) -> list[object]:
    return [dataclasses.astuple(d)[:9] for d in decisions]  # type: ignore[call-overload]


@SETTINGS
@given(snapshots=clusters(), pending=gangs())
def test_explicit_fixed_ranges_change_nothing(snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]) -> None:
    explicit = [
        dataclasses.replace(
            g, roles=tuple(RoleRequest(r.name, r.replicas, r.requests, r.replicas, r.replicas) for r in g.roles)
        )
        for g in pending
    ]
    assert not any(g.elastic for g in explicit)
    plain = run_cycle(pending, snapshots, PROFILE, now=2000.0)
    same = run_cycle(explicit, snapshots, PROFILE, now=2000.0)
    assert plain.decisions == same.decisions and plain.unplaced == same.unplaced
    assert plain.reservations == same.reservations
    for decision in plain.decisions:
        assert dict(decision.replicas) == {r.name: r.replicas for r in next(g for g in pending if g.uid == decision.gang_uid).roles}
        assert not decision.ranges
        for breakdown in decision.scores:
            assert next(p for p in breakdown.parts if p.plugin == "elastic-size").normalized == 0.0


@SETTINGS
@given(snapshots=clusters(), pending=elastic_gangs(), now=st.sampled_from([100.0, 2000.0]))
def test_elastic_decisions_fit_node_by_node_within_their_range(
    snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest], now: float
) -> None:
    result = run_cycle(pending, snapshots, PROFILE, now=now)
    by_uid = {g.uid: g for g in pending}
    check_decisions(result.decisions, by_uid, snapshots)
    for decision in result.decisions:
        assert len({decision.cluster}) == 1 and all(p.node in snapshots[decision.cluster].nodes for p in decision.assignment)
        reservation = result.reservations.get(decision.gang_uid)
        assert reservation is not None and reservation.pods == len(decision.assignment)
    # Same inputs, same answers; pruning never changes them.
    full = run_cycle(pending, snapshots, dataclasses.replace(PROFILE, exhaustive=True), now=now)
    assert [(d.gang_uid, d.cluster, d.assignment) for d in result.decisions] == [
        (d.gang_uid, d.cluster, d.assignment) for d in full.decisions
    ]
    assert run_cycle(list(reversed(pending)), snapshots, PROFILE, now=now).decisions == result.decisions


def _independent_max_pods(g: GangRequest, snapshot: ClusterSnapshot, model: str | None) -> int:
    """Most pods of a one-role gang's role that fit node by node on one model (no engine code)."""
    (role,) = g.roles
    req = role.requests
    total = 0
    for n in snapshot.nodes.values():
        if not (n.ready and n.schedulable) or any(n.labels.get(k) != v for k, v in g.node_selector.items()):
            continue
        if any(t.effect.value != "PreferNoSchedule" for t in n.taints) and not g.tolerations:
            continue
        if req.gpu and n.gpu_model != model:
            continue
        free = n.allocatable.minus_clamped(n.allocated)
        fits = 10**9
        for need, have in ((req.cpu_milli, free.cpu_milli), (req.memory, free.memory), (req.gpu, free.gpu),
                           (req.rdma, free.rdma)):
            if need:
                fits = min(fits, have // need)
        total += fits
    return total


@SETTINGS
@given(snapshots=clusters(), pending=elastic_gangs(count=1, single_role=True, always=True))
def test_a_one_role_elastic_gang_takes_the_largest_size_that_fits_where_it_lands(
    snapshots: dict[str, ClusterSnapshot], pending: list[GangRequest]
) -> None:
    (g,) = pending
    result = run_cycle([g], snapshots, PROFILE, now=0.0)
    if not result.decisions:
        # Waiting means not even the minimum fits: the same as a fixed gang of the minimum's size.
        assert not run_cycle([g.minimum], snapshots, PROFILE, now=0.0).decisions
        return
    (decision,) = result.decisions
    (role,) = g.roles
    fits = _independent_max_pods(g, snapshots[decision.cluster], decision.gpu_model)
    assert decision.replicas[role.name] == min(role.max_replicas or 0, fits)


# ---------------------------------------------------------------- what models mean for elastic gangs


def test_an_elastic_gang_with_several_models_sizes_on_the_first_that_holds_its_minimum() -> None:
    snaps = by_name(cluster("a", nodes("a", 2) + nodes("h", 4, model="H100")))
    (decision,) = run_cycle([elastic(models=["A100", "H100"], high=6)], snaps, PROFILE, now=0.0).decisions
    assert decision.gpu_model == "A100" and dict(decision.replicas) == {"worker": 2}
    assert MODELS == ["A100", "H100"]


# ---------------------------------------------------------------- shrink instead of evict (preemption)

LOWER = WithinQueue.LOWER_PRIORITY


def elastic_running(
    key: str,
    pods_on: Sequence[str],
    *,
    low: int,
    gpus: int = 4,
    cluster_name: str = "a",
    queue: str = "vision",
    priority: int = 0,
    started_at: float = 0.0,
    borrowed: bool = False,
    high: int | None = None,
) -> RunningGang:
    """A running elastic gang (uid "run-<key>") with one pod of `gpus` GPUs on each node listed, in start
    order (pod i started at started_at + i), min_replicas `low`, max_replicas `high` (two above its size)."""
    count = len(pods_on)
    request = GangRequest(
        key=key, uid=f"run-{key}", queue=queue, priority=priority,
        roles=(RoleRequest("worker", count, per_gpu(gpus), low, count + 2 if high is None else high),),
    )
    pods = tuple(
        RunningPod(f"{key}-worker-{i}", "worker", node_name, per_gpu(gpus), started_at + i, i)
        for i, node_name in enumerate(pods_on)
    )
    return RunningGang(
        uid=f"run-{key}", key=key, cluster=cluster_name, queue=queue, priority=priority, started_at=started_at,
        demand=per_gpu(gpus * count), gpu_model="A100", pods=pods, request=request, borrowed=borrowed,
    )


def occupied_by(name: str, node_gpus: Mapping[str, int], running: Sequence[RunningGang]) -> ClusterSnapshot:
    """Nodes (name -> GPUs) allocated exactly what the running gangs there hold."""
    load: dict[str, Resources] = {}
    for held in running:
        if held.cluster == name:
            for node_name, amount in held.amounts.items():
                load[node_name] = load.get(node_name, Resources()) + amount
    return cluster(name, [node(n, gpus=g).with_allocated(load.get(n, Resources())) for n, g in node_gpus.items()])


def vision_queues(**kwargs: object) -> dict[str, QueueQuota]:
    options: dict[str, object] = {"within_queue": LOWER, "cohort": "research"}
    options.update(kwargs)
    nominal = options.pop("nominal", {"A100": 1000})
    return {
        "vision": QueueQuota("vision", QuotaAmounts(nominal), **options),  # type: ignore[arg-type]
        "nlp": QueueQuota("nlp", QuotaAmounts({}), cohort="research"),
    }


THREE = {"n-0": 8, "n-1": 8, "n-2": 8}
HI = gang("vision/hi", gpus=8, queue="vision", priority=5)


@dataclass
class ShrinkCase:
    name: str
    running: Sequence[RunningGang]
    gang: GangRequest
    # Expected: evicted keys, {shrunk key: pods removed}; None: no preemption at all.
    expect: tuple[tuple[str, ...], Mapping[str, tuple[str, ...]]] | None
    nodes: Mapping[str, int] = field(default_factory=lambda: THREE)
    queues: Mapping[str, QueueQuota] = field(default_factory=vision_queues)


SHRINK_CASES = [
    ShrinkCase(
        "shrink rather than evict",
        [
            elastic_running("el", ["n-0", "n-0", "n-1", "n-1"], low=1),
            running_gang("fixed", on={"n-2": 8}),
        ],
        HI,
        ((), {"el": ("el-worker-3", "el-worker-2")}),
    ),
    ShrinkCase(
        "only the newest pods, even when older ones would free more",
        # Pods alternate nodes: freeing n-1 takes the newest three (3, 2 on n-0... 1), not just 3 and 1.
        [elastic_running("el", ["n-0", "n-1", "n-0", "n-1"], low=1), running_gang("fixed", on={"n-2": 8}, priority=4)],
        HI,
        ((), {"el": ("el-worker-3", "el-worker-2", "el-worker-1")}),
    ),
    ShrinkCase(
        "never below its minimum: when that is not enough, a whole gang goes",
        [elastic_running("el", ["n-0", "n-1", "n-0", "n-1"], low=2), running_gang("fixed", on={"n-2": 8}, priority=4)],
        HI,
        (("el",), {}),
    ),
    ShrinkCase(
        "a shrink beside an eviction: the least senior gang evicted, then the fewest pods removed",
        [
            elastic_running("wide", ["n-0", "n-0", "n-1", "n-1"], low=1, priority=3),
            elastic_running("narrow", ["n-2", "n-2"], low=1, priority=0, started_at=10.0),
        ],
        gang("vision/pair", pods=2, gpus=8, queue="vision", priority=5),
        (("narrow",), {"wide": ("wide-worker-3", "wide-worker-2")}),
    ),
    ShrinkCase(
        "the fewest pods removed, even from a more senior gang",
        [
            elastic_running("many", ["n-0"] * 4, low=1, gpus=2, priority=0),
            elastic_running("few", ["n-1", "n-1"], low=1, priority=1),
            running_gang("boss", on={"n-2": 8}, priority=9),
        ],
        gang("vision/four", gpus=4, queue="vision", priority=5),
        ((), {"few": ("few-worker-1",)}),
    ),
    ShrinkCase(
        "as few pods: from the least senior gang",
        [
            elastic_running("junior", ["n-0", "n-0"], low=1, priority=0),
            elastic_running("senior", ["n-1", "n-1"], low=1, priority=1),
            running_gang("boss", on={"n-2": 8}, priority=9),
        ],
        gang("vision/four", gpus=4, queue="vision", priority=5),
        ((), {"junior": ("junior-worker-1",)}),
    ),
    ShrinkCase(
        "never a gang of equal or higher priority",
        [
            elastic_running("peer", ["n-0", "n-0", "n-1", "n-1"], low=1, priority=5),
            running_gang("fixed", on={"n-2": 8}, priority=1),
        ],
        HI,
        (("fixed",), {}),
    ),
    ShrinkCase(
        "never a gang without a queue",
        [
            elastic_running("plain", ["n-0", "n-0", "n-1", "n-1"], low=1, queue=""),
            running_gang("fixed", on={"n-2": 8}, priority=1),
        ],
        HI,
        (("fixed",), {}),
    ),
    ShrinkCase(
        "quota: a shrink frees the quota it needs where nodes are free",
        [elastic_running("el", ["n-0", "n-0", "n-1", "n-1"], low=1)],
        HI,
        ((), {"el": ("el-worker-3", "el-worker-2")}),
        queues=vision_queues(nominal={"A100": 16}),
    ),
]


@pytest.mark.parametrize("case", SHRINK_CASES, ids=[c.name for c in SHRINK_CASES])
def test_shrink_table(case: ShrinkCase) -> None:
    snaps = by_name(occupied_by("a", case.nodes, case.running))
    result = run_cycle([case.gang], snaps, PROFILE, now=100.0, queues=case.queues, running=case.running)
    if case.expect is None:
        assert result.decisions == () and result.evictions == () and not result.shrinks
        return
    (decision,) = result.decisions
    evicted, shrunk = case.expect
    by_uid = {r.uid: r for r in case.running}
    assert decision.preemption is not None and decision.preemption.minimal
    assert tuple(by_uid[uid].key for uid in decision.preempts) == evicted == tuple(
        by_uid[uid].key for uid in result.evictions
    )
    assert {by_uid[uid].key: pods for uid, pods in decision.shrinks.items()} == dict(shrunk)
    assert dict(result.shrinks) == dict(decision.shrinks)
    # The preemptor fits once the victims and the removed pods are gone, node by node.
    left = []
    for r in case.running:
        if r.uid in decision.preempts:
            continue
        removed = set(decision.shrinks.get(r.uid, ()))
        if removed:
            kept = tuple(p for p in r.pods if p.name not in removed)
            r = dataclasses.replace(r, pods=kept, amounts={})
            assert r.request is not None and len(kept) >= r.request.roles[0].low  # never below its minimum
        left.append(r)
    check_decisions([decision], {case.gang.uid: case.gang}, by_name(occupied_by("a", case.nodes, left)))
    if decision.shrinks:
        assert "shrinking" in decision.preemption.describe()
        assert "PODS REMOVED" in render_decision(decision)
    # Explain mode tells the same plan and removes nothing.
    told = run_cycle([case.gang], snaps, PROFILE, now=100.0, queues=case.queues, running=case.running, preempt=False)
    assert told.decisions == () and told.evictions == () and not told.shrinks
    assert told.unplaced[0].preemption == decision.preemption


def test_an_elastic_preemptor_takes_what_its_victims_free_and_no_more_victims() -> None:
    wide = running_gang("wide", on={"n-0": 8, "n-1": 8}, priority=0)
    peer = running_gang("peer", on={"n-2": 8}, priority=9)
    snaps = by_name(occupied_by("a", THREE, [wide, peer]))
    urgent = elastic("vision/urgent", low=1, start=1, high=3, queue="vision", priority=5)
    result = run_cycle([urgent], snaps, PROFILE, now=100.0, queues=vision_queues(), running=[wide, peer])
    (decision,) = result.decisions
    assert decision.preempts == ("run-wide",) and dict(decision.replicas) == {"worker": 2}
    assert decision.preemption is not None and decision.preemption.nodes == ("n-0", "n-1")
    check_decisions([decision], {urgent.uid: urgent}, by_name(occupied_by("a", THREE, [peer])))
    assert result.usage["vision"].used.gpus["A100"] == 8 + 16  # peer, and the preemptor at the size placed


@dataclass
class ShrinkWorld:
    node_gpus: dict[str, dict[str, int]]  # cluster -> node -> GPUs
    running: list[RunningGang]
    queues: dict[str, QueueQuota]
    gang: GangRequest


@st.composite
def shrink_worlds(draw: st.DrawFn) -> ShrinkWorld:
    """One or two small busy clusters; running gangs fixed or elastic (pods of 2 or 4 GPUs), of queues vision,
    nlp (some borrowed) or none; a one-role preemptor of vision."""
    node_gpus: dict[str, dict[str, int]] = {}
    running: list[RunningGang] = []
    count = 0
    for c in range(draw(st.integers(1, 2))):
        name = f"c{c}"
        node_gpus[name] = {f"{name}-n{i}": 8 for i in range(draw(st.integers(1, 3)))}
        left = dict(node_gpus[name])
        for _ in range(draw(st.integers(1, 4))):
            queue = draw(st.sampled_from(["vision", "vision", "vision", "nlp", ""]))
            priority = draw(st.integers(0, 3))
            borrowed = queue == "nlp" and draw(st.booleans())
            started = float(draw(st.integers(0, 5)))
            if draw(st.integers(0, 2)):
                per_pod = draw(st.sampled_from([2, 4]))
                spots = [n for n in sorted(left) for _ in range(left[n] // per_pod)]
                if not spots:
                    continue
                chosen = draw(st.lists(st.sampled_from(spots), min_size=1, max_size=min(4, len(spots))))
                on = []
                for node_name in chosen:
                    if left[node_name] >= per_pod:
                        left[node_name] -= per_pod
                        on.append(node_name)
                if not on:
                    continue
                running.append(elastic_running(
                    f"g{count}", on, low=draw(st.integers(1, len(on))), gpus=per_pod, cluster_name=name, queue=queue,
                    priority=priority, started_at=started, borrowed=borrowed,
                ))
            else:
                node_name = draw(st.sampled_from(sorted(left)))
                if not left[node_name]:
                    continue
                take = left[node_name] if draw(st.booleans()) else draw(st.integers(1, left[node_name]))
                left[node_name] -= take
                running.append(running_gang(f"g{count}", on={node_name: take}, cluster=name, queue=queue,
                                            priority=priority, started_at=started, borrowed=borrowed))
            count += 1
        for node_name in sorted(left):
            if left[node_name] and draw(st.integers(0, 3)):  # most nodes end up full
                queue = draw(st.sampled_from(["vision", "nlp", ""]))
                running.append(running_gang(f"g{count}", on={node_name: left[node_name]}, cluster=name, queue=queue,
                                            priority=draw(st.integers(0, 3)), borrowed=queue == "nlp"))
                count += 1
    queues = vision_queues(
        within_queue=draw(st.sampled_from([LOWER, LOWER, WithinQueue.NEVER])), reclaim_borrowed=draw(st.booleans())
    )
    g = gang("vision/p", pods=draw(st.integers(1, 2)), gpus=draw(st.sampled_from([2, 4, 8])), queue="vision",
             priority=draw(st.integers(2, 4)))
    return ShrinkWorld(node_gpus, running, queues, g)


def _eligible_in(world: ShrinkWorld) -> list[RunningGang]:
    """Independent reading of who may be evicted or shrunk (quota is generous: the preemptor never borrows)."""
    vision = world.queues["vision"]
    return [
        r for r in world.running
        if (r.queue == "vision" and vision.within_queue is LOWER and r.priority < world.gang.priority)
        or (r.queue == "nlp" and r.borrowed and vision.reclaim_borrowed)
    ]


def _pods_fit(world: ShrinkWorld, cluster_name: str, freed: Mapping[str, int]) -> int:
    """Pods of the preemptor that fit on a cluster once `freed[node]` GPUs are released (no engine code)."""
    (role,) = world.gang.roles
    req = role.requests
    total = 0
    for node_name, gpus in world.node_gpus[cluster_name].items():
        used = sum(r.amounts[node_name].gpu for r in world.running if r.cluster == cluster_name and node_name in r.amounts)
        free_gpus = gpus - used + freed.get(node_name, 0)
        free_cpu = 96_000 - used * 8000 + freed.get(node_name, 0) * 8000
        total += min(free_gpus // req.gpu, free_cpu // req.cpu_milli)
    return total


def _rank(r: RunningGang) -> tuple[int, int, float, float, str]:
    """The eviction order at now=100: borrowed, priority, GPU-seconds lost since start (no checkpoints here)."""
    return (0 if r.borrowed else 1, r.priority, r.demand.gpu * max(0.0, 100.0 - r.started_at), -r.started_at, r.uid)


@SETTINGS
@given(world=shrink_worlds())
def test_shrinks_and_evictions_are_minimal_whole_and_above_the_minimum(world: ShrinkWorld) -> None:
    snaps = {name: occupied_by(name, node_gpus, world.running) for name, node_gpus in world.node_gpus.items()}
    result = run_cycle([world.gang], snaps, PROFILE, now=100.0, queues=world.queues, running=world.running)
    need = world.gang.pod_count
    eligible = _eligible_in(world)
    # Brute force over every option of every eligible gang (keep, shrink by its j newest pods above the
    # minimum, evict), cluster by cluster: the least plan by (evicted, their ranks, pods removed, pod ranks).
    best: tuple[object, ...] | None = None
    for name in sorted(world.node_gpus):
        if _pods_fit(world, name, {}) >= need:
            best = None
            break
        here = [r for r in eligible if r.cluster == name]
        choices = [[("keep", 0), ("evict", 0)] + [("shrink", j) for j in range(1, len(r.removable) + 1)] for r in here]
        for combo in itertools.product(*choices):
            freed: dict[str, int] = {}
            evicted, pods = [], []
            for r, (kind, j) in zip(here, combo, strict=True):
                if kind == "evict":
                    evicted.append(r)
                    for node_name, amount in r.amounts.items():
                        freed[node_name] = freed.get(node_name, 0) + amount.gpu
                elif kind == "shrink":
                    for pod in r.removable[:j]:
                        freed[pod.node] = freed.get(pod.node, 0) + pod.requests.gpu
                        pods.append(_rank(r))
            if _pods_fit(world, name, freed) >= need:
                key = (len(evicted), tuple(sorted((_rank(r) for r in evicted), reverse=True)), len(pods),
                       tuple(sorted(pods, reverse=True)), name)
                if best is None or key < best:
                    best = key
    fits_without = any(_pods_fit(world, name, {}) >= need for name in world.node_gpus)
    if fits_without or best is None:
        assert result.evictions == () and not result.shrinks
        assert bool(result.decisions) == fits_without
        return
    (decision,) = result.decisions
    by_uid = {r.uid: r for r in world.running}
    evicted = [by_uid[uid] for uid in decision.preempts]
    removed = []
    for uid, names in decision.shrinks.items():
        r = by_uid[uid]
        # Only pods above its minimum, the newest first; never a gang both shrunk and evicted.
        assert names == tuple(pod.name for pod in r.removable[: len(names)]) and uid not in decision.preempts
        removed.extend([_rank(r)] * len(names))
    assert all(r in eligible for r in evicted) and all(by_uid[uid] in eligible for uid in decision.shrinks)
    assert all(r.priority < world.gang.priority for r in evicted if r.queue == "vision")
    key = (len(evicted), tuple(sorted((_rank(r) for r in evicted), reverse=True)), len(removed),
           tuple(sorted(removed, reverse=True)), decision.cluster)
    assert decision.preemption is not None and decision.preemption.minimal
    assert key == best


# ---------------------------------------------------------------- growth


def grow(running: Sequence[RunningGang], snaps: Mapping[str, ClusterSnapshot], pending: Sequence[GangRequest] = (),
         **kwargs: object) -> GrowthResult:
    options: dict[str, object] = {"now": 1000.0, "cooldown_seconds": 60.0}
    options.update(kwargs)
    return plan_growth(running, snaps, pending, PROFILE, **options)  # type: ignore[arg-type]


def two_of_three() -> tuple[RunningGang, dict[str, ClusterSnapshot]]:
    """An elastic gang (1..4 pods of 8 GPUs) running 2 pods on n-0 and n-1 of three nodes."""
    el = elastic_running("el", ["n-0", "n-1"], low=1, gpus=8)
    return el, by_name(occupied_by("a", THREE, [el]))


def test_grows_into_free_room_when_nothing_is_pending() -> None:
    el, snaps = two_of_three()
    result = grow([el], snaps)
    (growth,) = result.growths
    assert (growth.gang_uid, growth.cluster, dict(growth.replicas)) == ("run-el", "a", {"worker": 3})
    assert growth.added == (PodAssignment("worker", 2, "n-2"),) and dict(growth.amounts) == {"n-2": per_gpu(8)}
    reservation = result.reservations.get("run-el")
    assert reservation is not None and reservation.pods == 3 and dict(reservation.amounts) == {"n-2": per_gpu(8)}
    # The growth's reservation keeps a later gang off the room it took.
    after = run_cycle([gang("ns/late", gpus=8)], snaps, PROFILE, now=1001.0, reservations=result.reservations)
    assert after.decisions == ()


def test_pending_gangs_first() -> None:
    el, snaps = two_of_three()
    result = grow([el], snaps, [gang("ns/waiting", gpus=8)])
    assert result.growths == () and "no room" in result.held_back["run-el"]
    assert len(result.reservations) == 0  # the pending gang's hypothetical placement is not kept
    # A pending gang that could not use the room even so does not stop it.
    result = grow([el], snaps, [gang("ns/huge", pods=2, gpus=8)])
    assert [dict(g.replicas) for g in result.growths] == [{"worker": 3}]


def test_a_cooldown_after_each_resize() -> None:
    el, snaps = two_of_three()
    cooling = grow([el], snaps, last_resized={"run-el": 990.0})
    assert cooling.growths == () and cooling.held_back["run-el"] == "resized at 990; cooling down until 1050"
    assert [g.gang_uid for g in grow([el], snaps, last_resized={"run-el": 940.0}).growths] == ["run-el"]


def test_growth_stays_within_its_queues_nominal_quota() -> None:
    el = elastic_running("el", ["n-0", "n-0"], low=1, gpus=4)  # 8 GPUs; may grow to 4 pods
    snaps = by_name(occupied_by("a", THREE, [el]))
    queues = vision_queues(nominal={"A100": 12})
    (growth,) = grow([el], snaps, queues=queues).growths
    assert dict(growth.replicas) == {"worker": 3}  # 12 GPUs: its nominal quota, though the cohort could lend
    # Nothing to grow into once the queue is at its nominal quota.
    result = grow([el], snaps, queues=vision_queues(nominal={"A100": 8}))
    assert result.held_back["run-el"] == "queue vision uses 8 of 8 A100 GPUs; 4 more would be beyond its nominal quota"
    assert result.growths == ()


def test_no_growth_while_a_pending_gang_of_its_queue_or_cohort_waits_for_quota() -> None:
    el = elastic_running("el", ["n-0", "n-0"], low=1, gpus=4)
    snaps = by_name(occupied_by("a", THREE, [el]))
    queues = {
        "vision": QueueQuota("vision", QuotaAmounts({"A100": 16}), cohort="research", within_queue=LOWER),
        "nlp": QueueQuota("nlp", QuotaAmounts({"A100": 8}), cohort="research"),
    }
    # 24 GPUs: more than vision's 8 left plus the 8 nlp lends: it waits for quota.
    same_queue = gang("vision/big", pods=3, gpus=8, queue="vision", priority=9)
    result = grow([el], snaps, [same_queue], queues=queues)
    assert result.growths == () and "vision/big waits for quota of queue vision" in result.held_back["run-el"]
    cohort = gang("nlp/big", pods=3, gpus=8, queue="nlp")  # 24 > nlp's 8 + the 8 vision does not use
    result = grow([el], snaps, [cohort], queues=queues)
    assert result.growths == () and "cohort research" in result.held_back["run-el"]


def test_no_growth_where_a_pending_gang_would_preempt() -> None:
    el = elastic_running("el", ["n-0", "n-0", "n-1", "n-1"], low=1, gpus=4, priority=0)
    low = running_gang("low", on={"n-2": 4})
    snaps = by_name(occupied_by("a", THREE, [el, low]))
    urgent = gang("vision/urgent", gpus=8, queue="vision", priority=5)
    result = grow([el, low], snaps, [urgent], queues=vision_queues())
    assert result.growths == () and "vision/urgent would preempt in a" in result.held_back["run-el"]


def test_higher_priority_grows_first_and_each_into_what_is_left() -> None:
    senior = elastic_running("senior", ["n-0"], low=1, gpus=8, priority=3, started_at=5.0)
    junior = elastic_running("junior", ["n-1"], low=1, gpus=8, priority=1)
    snaps = by_name(occupied_by("a", THREE, [senior, junior]))
    result = grow([junior, senior], snaps)
    assert [(g.gang_key, dict(g.replicas)) for g in result.growths] == [("senior", {"worker": 2})]
    assert "no room" in result.held_back["run-junior"]


def test_growth_respects_head_of_line_holds() -> None:
    el, _ = two_of_three()
    snaps = by_name(occupied_by("a", {**THREE, "n-3": 8}, [el, running_gang("busy", on={"n-3": 4}, queue="")]))
    aged = gang("ns/aged", pods=2, gpus=8, submitted_at=0.0)  # needs n-2 and n-3: holds them
    profile = dataclasses.replace(PROFILE, hold_after_seconds=100.0)
    result = plan_growth([el], snaps, [aged], profile, now=1000.0, cooldown_seconds=0.0)
    assert result.growths == ()


def test_never_below_what_runs_nor_above_the_maximum_nor_elsewhere() -> None:
    el = elastic_running("el", ["n-0"], low=1, gpus=8)  # max 3
    snaps = by_name(occupied_by("a", {f"n-{i}": 8 for i in range(6)}, [el]), free_nodes("b", 8))
    (growth,) = grow([el], snaps).growths
    assert dict(growth.replicas) == {"worker": 3} and {p.node for p in growth.added} <= set(snaps["a"].nodes)
    at_max = elastic_running("full", ["n-0", "n-1", "n-2"], low=1, gpus=8, high=3)
    fixed = running_gang("fixed", on={"n-3": 8})
    assert grow([at_max, fixed], snaps).growths == ()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cooldown_seconds": -1.0}, ValueError, "cooldown_seconds must be a finite number >= 0"),
        ({"cooldown_seconds": float("inf")}, ValueError, "cooldown_seconds must be a finite number >= 0"),
        ({"now": float("nan")}, ValueError, "now must be a finite number"),
        ({"last_resized": {"run-el": "yesterday"}}, ValueError, "last_resized must map gang uids to finite times"),
        ({"last_resized": [("run-el", 1.0)]}, TypeError, "last_resized must map gang uids to times"),
    ],
)
def test_bad_growth_input_is_a_clear_error(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    el, snaps = two_of_three()
    with pytest.raises(error, match=message):
        grow([el], snaps, **kwargs)


def test_bad_running_gangs_are_clear_errors() -> None:
    el, snaps = two_of_three()
    with pytest.raises(TypeError, match="is not a RunningGang"):
        grow([el, "el"], snaps)  # type: ignore[list-item]
    pod = el.pods[0]
    with pytest.raises(ValueError, match="pod 'el-worker-0' is listed twice"):
        dataclasses.replace(el, pods=(pod, pod), amounts={})
    with pytest.raises(ValueError, match="amounts must be the sum of its pods' requests per node"):
        dataclasses.replace(el, amounts={"n-0": per_gpu(1)})
    with pytest.raises(ValueError, match="has role 'ps', not one of its roles"):
        dataclasses.replace(el, pods=(dataclasses.replace(pod, role="ps"),), amounts={})
    with pytest.raises(ValueError, match="request is for gang 'other'"):
        dataclasses.replace(el, request=dataclasses.replace(el.request, uid="other"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="started_at must be a finite number"):
        RunningPod("p", "worker", "n-0", per_gpu(1), float("nan"))


@st.composite
def growth_worlds(draw: st.DrawFn) -> tuple[dict[str, ClusterSnapshot], list[RunningGang], list[GangRequest]]:
    running: list[RunningGang] = []
    snaps: dict[str, ClusterSnapshot] = {}
    for c in range(draw(st.integers(1, 2))):
        name = f"c{c}"
        node_gpus = {f"{name}-n{i}": 8 for i in range(draw(st.integers(1, 4)))}
        left = dict(node_gpus)
        here: list[RunningGang] = []
        for g in range(draw(st.integers(1, 3))):
            per_pod = draw(st.sampled_from([2, 4, 8]))
            spots = [n for n in sorted(left) for _ in range(left[n] // per_pod)]
            if not spots:
                break
            on = draw(st.lists(st.sampled_from(spots), min_size=1, max_size=3))
            placed = []
            for node_name in on:
                if left[node_name] >= per_pod:
                    left[node_name] -= per_pod
                    placed.append(node_name)
            here.append(elastic_running(f"{name}-g{g}", placed, low=1, gpus=per_pod, cluster_name=name,
                                        priority=draw(st.integers(0, 3)), started_at=float(g)))
        snaps[name] = occupied_by(name, node_gpus, here)
        running.extend(here)
    pending = [gang(f"ns/p{i}", pods=draw(st.integers(1, 2)), gpus=draw(st.sampled_from([2, 4, 8])))
               for i in range(draw(st.integers(0, 2)))]
    return snaps, running, pending


@SETTINGS
@given(world=growth_worlds())
def test_growth_never_double_books_and_stays_in_range_and_in_its_cluster(
    world: tuple[dict[str, ClusterSnapshot], list[RunningGang], list[GangRequest]]
) -> None:
    snaps, running, pending = world
    result = grow(running, snaps, pending)
    first = run_cycle(pending, snaps, PROFILE, now=1000.0, running=running, preempt=False)
    by_uid = {r.uid: r for r in running}
    load: dict[tuple[str, str], int] = {}
    pending_gpus = {g.uid: g.roles[0].requests.gpu for g in pending}
    for decision in first.decisions:  # pending first: their placements and the growths never overlap
        for pod in decision.assignment:
            load[(decision.cluster, pod.node)] = load.get((decision.cluster, pod.node), 0) + pending_gpus[decision.gang_uid]
    for growth in result.growths:
        r = by_uid[growth.gang_uid]
        assert r.request is not None and growth.cluster == r.cluster
        now_running = r.replicas()
        for role in r.request.roles:
            assert now_running[role.name] <= growth.replicas[role.name] <= role.high
        assert len(growth.added) == sum(growth.replicas.values()) - sum(now_running.values())
        for pod in growth.added:
            assert pod.node in snaps[growth.cluster].nodes
            load[(growth.cluster, pod.node)] = load.get((growth.cluster, pod.node), 0) + r.request.roles[0].requests.gpu
    for (name, node_name), gpus in load.items():
        assert gpus <= snaps[name].nodes[node_name].free.gpu
    if not pending:
        # Nothing pending: every gang below its maximum grows unless no step's new pods fit.
        for r in running:
            grown = next((g for g in result.growths if g.gang_uid == r.uid), None)
            if grown is None and r.uid in result.held_back:
                assert "no room" in result.held_back[r.uid]


# ---------------------------------------------------------------- a size fixed where it runs (operator mode)

FIXED = "its JobSet runs under the member's own JobSet operator, which cannot resize it in place"


def test_a_fixed_gang_is_evicted_whole_never_shrunk() -> None:
    el = elastic_running("el", ["n-0", "n-0", "n-1", "n-1"], low=1)
    fixed = dataclasses.replace(el, fixed=FIXED)
    assert el.removable and fixed.removable == () and fixed.pods == el.pods
    snaps = by_name(occupied_by("a", THREE, [el]))
    queues = vision_queues(nominal={"A100": 16})
    shrunk = run_cycle([HI], snaps, PROFILE, now=100.0, queues=queues, running=[el])
    assert dict(shrunk.shrinks) == {"run-el": ("el-worker-3", "el-worker-2")} and shrunk.evictions == ()
    evicted = run_cycle([HI], snaps, PROFILE, now=100.0, queues=queues, running=[fixed])
    assert evicted.evictions == ("run-el",) and not evicted.shrinks


def test_a_fixed_gang_is_held_back_from_growth_with_its_reason() -> None:
    el, snaps = two_of_three()
    result = grow([dataclasses.replace(el, fixed=FIXED)], snaps)
    assert result.growths == () and result.held_back["run-el"] == FIXED
    assert len(result.reservations) == 0
    with pytest.raises(TypeError, match="fixed must be a str"):
        dataclasses.replace(el, fixed=True)
