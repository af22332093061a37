"""Table-driven placement cases: clusters and gangs in, decisions and reasons out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest
from placement_builders import GI, by_name, check_decisions, cluster, gang, node, nodes

from federator.placement import ClusterSnapshot, GangRequest, Profile, Taint, run_cycle


@dataclass
class Case:
    name: str
    clusters: Sequence[ClusterSnapshot]
    gangs: Sequence[GangRequest]
    # gang key -> chosen cluster, or None for "unplaced"
    placed: Mapping[str, str | None]
    # (gang key, cluster) -> reason code that cluster was rejected with
    reasons: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # (gang key, cluster) -> text the reason message must contain
    messages: Mapping[tuple[str, str], str] = field(default_factory=dict)
    now: float = 10.0


def eth_cloud(name: str, count: int = 8, **kwargs: object) -> ClusterSnapshot:
    return cluster(
        name, nodes("n", count, rdma=0, model="H100"), location="cloud", fabric="ethernet", cost=4.0, **kwargs  # type: ignore[arg-type]
    )


CASES = [
    Case(
        name="fragmentation: 64 free GPUs one per node do not hold 8x8; whole nodes do",
        clusters=[cluster("frag", nodes("n", 64, used=7)), cluster("whole", nodes("n", 8))],
        gangs=[gang("big", pods=8, gpus=8, rdma=1, network="rdma", models=["A100"])],
        placed={"big": "whole"},
        reasons={("big", "frag"): "InsufficientGpu"},
        messages={("big", "frag"): "needs 8 pods of 8 A100 GPUs with RDMA; at most 0 fit"},
    ),
    Case(
        name="rdma vs ethernet",
        clusters=[cluster("ib", nodes("n", 4)), eth_cloud("eth")],
        gangs=[
            gang("allreduce", pods=2, gpus=8, rdma=1, network="rdma"),
            gang("tcp", pods=2, gpus=8, network="ethernet", submitted_at=1.0),
        ],
        placed={"allreduce": "ib", "tcp": "eth"},
        reasons={("allreduce", "eth"): "FabricMismatch", ("tcp", "ib"): "FabricMismatch"},
    ),
    Case(
        name="gpu model mismatch",
        clusters=[cluster("a100", nodes("n", 8)), cluster("h100", nodes("n", 8, model="H100"), cost=3.0)],
        gangs=[gang("wants-h100", pods=2, gpus=8, models=["H100"])],
        placed={"wants-h100": "h100"},
        reasons={("wants-h100", "a100"): "GpuModelUnavailable"},
        messages={("wants-h100", "a100"): "gang accepts H100; cluster has A100"},
    ),
    Case(
        name="data locality decides between two fits",
        clusters=[
            cluster("dc-a", nodes("n", 8)),
            cluster("dc-b", nodes("n", 8), datasets={"imagenet-22k": 1500 * GI}),
        ],
        gangs=[gang("resnet", pods=2, gpus=8, datasets=["imagenet-22k"])],
        placed={"resnet": "dc-b"},
    ),
    Case(
        name="data locality outweighs on-prem preference",
        clusters=[cluster("dc", nodes("n", 8)), eth_cloud("cloud", datasets={"laion": 200 * 2**40})],
        gangs=[gang("clip", pods=2, gpus=8, datasets=["laion"])],
        placed={"clip": "cloud"},
    ),
    Case(
        name="on-prem before cloud when nothing else differs",
        clusters=[eth_cloud("cloud"), cluster("dc", nodes("n", 8, model="H100"), cost=4.0, bandwidth=50)],
        gangs=[gang("g", pods=2, gpus=8)],
        placed={"g": "dc"},
    ),
    Case(
        name="cordoned cluster",
        clusters=[cluster("best", nodes("n", 8), datasets={"d": GI}, cordoned=True), cluster("other", nodes("n", 8))],
        gangs=[gang("g", pods=2, gpus=8, datasets=["d"])],
        placed={"g": "other"},
        reasons={("g", "best"): "ClusterCordoned"},
    ),
    Case(
        name="unhealthy cluster",
        clusters=[cluster("lost", nodes("n", 8), healthy=False), cluster("ok", nodes("n", 2))],
        gangs=[gang("g", pods=2, gpus=8)],
        placed={"g": "ok"},
        reasons={("g", "lost"): "ClusterUnhealthy"},
    ),
    Case(
        name="too big for every cluster: a reason for each",
        clusters=[
            cluster("ib", nodes("n", 8, rdma=4)),
            cluster("few-hcas", nodes("n", 40, used_rdma=1) + nodes("m", 24)),
            cluster("busy", nodes("n", 40, used=4)),
            eth_cloud("eth"),
            cluster("down", nodes("n", 64), healthy=False),
        ],
        gangs=[gang("huge", pods=32, gpus=8, rdma=1, network="rdma")],
        placed={"huge": None},
        reasons={
            ("huge", "ib"): "ExceedsCapacity",
            ("huge", "few-hcas"): "InsufficientRdma",
            ("huge", "busy"): "InsufficientGpu",
            ("huge", "eth"): "FabricMismatch",
            ("huge", "down"): "ClusterUnhealthy",
        },
        messages={
            ("huge", "ib"): "needs 32 pods of 8 A100 GPUs with RDMA; even with every schedulable node empty at most 8 fit",
            ("huge", "busy"): "at most 0 fit",
        },
    ),
    Case(
        name="priority order: the higher priority gang gets the only slot even if submitted later",
        clusters=[cluster("one", nodes("n", 1))],
        gangs=[gang("early-low", submitted_at=1.0, priority=0), gang("late-high", submitted_at=5.0, priority=10)],
        placed={"late-high": "one", "early-low": None},
        reasons={("early-low", "one"): "InsufficientGpu"},
    ),
    Case(
        name="equal priority: first submitted first",
        clusters=[cluster("one", nodes("n", 1))],
        gangs=[gang("second", submitted_at=2.0), gang("first", submitted_at=1.0)],
        placed={"first": "one", "second": None},
    ),
    Case(
        name="backfill: a big gang that fits nowhere does not block a small one behind it",
        clusters=[cluster("a", nodes("n", 4, used=4))],
        gangs=[
            gang("big", pods=4, gpus=8, priority=5, submitted_at=0.0),
            gang("small", pods=2, gpus=4, submitted_at=1.0),
        ],
        placed={"big": None, "small": "a"},
        reasons={("big", "a"): "InsufficientGpu"},
    ),
    Case(
        name="node selector and taints are honoured cluster by cluster",
        clusters=[
            cluster("a-tainted", nodes("n", 4, taints=[Taint("dedicated", "infra")], labels={"pool": "train"})),
            cluster("b-other-pool", nodes("n", 4, labels={"pool": "batch"})),
            cluster("c-labelled", [node("x", labels={"pool": "train"}), node("y", labels={"pool": "train"})]),
        ],
        gangs=[gang("g", pods=2, gpus=8, node_selector={"pool": "train"})],
        placed={"g": "c-labelled"},
        reasons={("g", "a-tainted"): "GangDoesNotFit", ("g", "b-other-pool"): "NoMatchingNodes"},
        messages={("g", "b-other-pool"): "no schedulable node has label pool=train"},
    ),
]


@pytest.mark.parametrize("exhaustive", [False, True], ids=["pruned", "exhaustive"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case, exhaustive: bool) -> None:
    snapshots = by_name(*case.clusters)
    result = run_cycle(case.gangs, snapshots, Profile(exhaustive=exhaustive), now=case.now)
    placed = {d.gang_key: d.cluster for d in result.decisions}
    unplaced = {u.gang_key: u for u in result.unplaced}
    assert set(placed) | set(unplaced) == {g.key for g in case.gangs}
    for key, expected in case.placed.items():
        assert placed.get(key) == expected, f"{key}: placed {placed.get(key)}, expected {expected}"
    why_not = {d.gang_key: d.why_not for d in result.decisions} | {u.gang_key: u.why_not for u in result.unplaced}
    outranked = {d.gang_key: d.outranked for d in result.decisions}
    for (key, cluster_name), code in case.reasons.items():
        if not exhaustive and cluster_name in outranked.get(key, {}):
            continue  # not fitted: it could not have won anyway
        assert why_not[key][cluster_name].code == code, why_not[key][cluster_name]
    for (key, cluster_name), text in case.messages.items():
        assert text in why_not[key][cluster_name].message
    # Every cluster not chosen is rejected with a reason, ranked lower, or outranked by its bound.
    for decision in result.decisions:
        chosen = decision.scores[0]
        assert chosen.cluster == decision.cluster
        scored = {s.cluster for s in decision.scores}
        assert set(decision.why_not) | scored | set(decision.outranked) == set(snapshots)
        assert len(decision.why_not) + len(scored) + len(decision.outranked) == len(snapshots)
        for name, bound in decision.outranked.items():
            assert bound < chosen.total or (bound == chosen.total and name > chosen.cluster)
        assert not exhaustive or not decision.outranked
        assert decision.cluster not in decision.why_not
        assert decision.resource_version == snapshots[decision.cluster].resource_version
    for entry in result.unplaced:
        assert set(entry.why_not) == set(snapshots)
    check_decisions(result.decisions, {g.uid: g for g in case.gangs}, snapshots)


def test_gang_too_big_for_every_cluster_is_marked_never_fits() -> None:
    snaps = by_name(cluster("a", nodes("n", 2)), cluster("b", nodes("n", 3)))
    result = run_cycle([gang("huge", pods=4, gpus=8)], snaps, Profile(), now=10_000.0)
    (entry,) = result.unplaced
    assert entry.never_fits and entry.hold is None
    assert {r.code for r in entry.why_not.values()} == {"ExceedsCapacity"}


def test_decision_assignment_and_reservation() -> None:
    snaps = by_name(cluster("a", nodes("n", 4), rv="77"))
    g = gang("g", pods=3, gpus=8)
    result = run_cycle([g], snaps, Profile(reservation_ttl_seconds=60), now=100.0)
    (decision,) = result.decisions
    assert [(p.role, p.index) for p in decision.assignment] == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert len(decision.nodes) == 3
    reservation = result.reservations.get(g.uid)
    assert reservation is not None
    assert reservation.resource_version == "77" and reservation.expires_at == 160.0 and reservation.pods == 3
    assert set(reservation.amounts) == decision.nodes
    assert result.snapshots["a"].index.free_gpu_by_model["A100"] == 8
    assert snaps["a"].index.free_gpu_by_model["A100"] == 32  # inputs untouched


def test_reservations_carry_over_between_cycles_until_shown() -> None:
    fresh = by_name(cluster("a", nodes("n", 2), rv="5"))
    first = run_cycle([gang("g1", pods=2)], fresh, Profile(), now=0.0)
    assert first.decisions[0].cluster == "a"
    # The member has not shown g1 yet: a second gang must not get the same nodes.
    second = run_cycle([gang("g2", pods=1)], fresh, Profile(), now=1.0, reservations=first.reservations)
    assert second.decisions == () and second.unplaced[0].why_not["a"].code == "InsufficientGpu"
    # Now the member shows g1's pods bound (allocated on the nodes): the reservation is released.
    shown = by_name(
        cluster("a", nodes("n", 2, used=8, used_rdma=0), rv="9", bound_pods={"uid-g1": 2}),
    )
    third = run_cycle([gang("g2", pods=1)], shown, Profile(), now=2.0, reservations=second.reservations)
    assert third.reservations.get("uid-g1") is None
    assert [r.reason.value for r in third.released] == ["shown"]
    assert third.decisions == ()  # still full: the pods are really there now
    # A gang with a placed reservation is not decided again.
    again = run_cycle([gang("g1", pods=2)], fresh, Profile(), now=1.0, reservations=first.reservations)
    assert again.decisions == () and again.already_placed == ("uid-g1",)


def test_bad_input_is_rejected_and_changes_nothing() -> None:
    snaps = by_name(cluster("a", nodes("n", 2)))
    with pytest.raises(ValueError, match="appears twice"):
        run_cycle([gang("g"), gang("g")], snaps, Profile(), now=0.0)
    with pytest.raises(ValueError, match="stored under"):
        run_cycle([gang("g")], {"b": snaps["a"]}, Profile(), now=0.0)
    with pytest.raises(TypeError):
        run_cycle(["not a gang"], snaps, Profile(), now=0.0)  # type: ignore[list-item]
    assert snaps["a"].index.free_gpu_by_model["A100"] == 16


def test_a_gang_keeps_off_its_excluded_nodes_but_not_the_cluster() -> None:
    # a GPU fault on n-000 (a failure policy's Requeue excluding the node): the cluster still takes the gang,
    # on its other nodes; with every node that could hold it excluded, it goes to the other cluster
    snaps = by_name(cluster("a", nodes("n", 3)), cluster("b", nodes("m", 2), rv="2"))
    g = replace(gang("g", pods=2, gpus=8), excluded_nodes={"a": frozenset({"n-000"})})
    (decision,) = run_cycle([g], {"a": snaps["a"]}, Profile(), now=0.0).decisions
    assert decision.cluster == "a" and decision.nodes == {"n-001", "n-002"}
    away = replace(g, excluded_nodes={"a": frozenset({"n-000", "n-001"})})
    result = run_cycle([away], snaps, Profile(), now=0.0)
    (decision,) = result.decisions
    assert decision.cluster == "b" and decision.why_not["a"].code == "GangDoesNotFit"
    assert run_cycle([away], {"a": snaps["a"]}, Profile(), now=0.0).decisions == ()
