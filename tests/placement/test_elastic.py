"""Elastic gangs (roles with min_replicas < max_replicas): sizing, placement, shrink-instead-of-evict, growth.

Placement: table-driven cases (clusters and an elastic gang in, cluster and size out) and properties: an
elastic gang is placed whole in one cluster, at the largest size in its range that fits there node by node
(checked against an independent count), never below its minimum; a gang whose roles set min = replicas =
max is placed exactly as one that sets neither; pruning never changes the choice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import GI, by_name, check_decisions, cluster, gang, node, nodes, per_gpu
from test_properties import MODELS, clusters, gangs

from federator.placement import (
    ClusterSnapshot,
    GangRequest,
    Profile,
    QueueQuota,
    QuotaAmounts,
    Resources,
    RoleRequest,
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
