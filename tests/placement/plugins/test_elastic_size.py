"""Score "elastic-size": the share of an elastic gang's range a cluster fits; 0 for a fixed-size gang."""

from __future__ import annotations

from placement_builders import cluster, context_for, gang, nodes, score_columns

from federator.placement.framework import EvalContext, FederationStats, Profile
from federator.placement.plugins.elastic_size import ElasticSizeScore


def test_the_share_of_the_range_each_cluster_fits() -> None:
    g = gang("g", pods=2, min_pods=1, max_pods=5, gpus=8)
    snaps = [
        cluster("one", nodes("n", 1)),
        cluster("three", nodes("n", 3)),
        cluster("five", nodes("n", 5)),
        cluster("more", nodes("n", 9)),
    ]
    cols = score_columns("elastic-size", g, snaps)
    assert cols == {"one": (1.0, 0.0), "three": (3.0, 50.0), "five": (5.0, 100.0), "more": (5.0, 100.0)}


def test_a_fixed_size_gang_scores_zero_everywhere() -> None:
    cols = score_columns("elastic-size", gang("g", pods=2), [cluster("a", nodes("n", 2)), cluster("b", nodes("n", 8))])
    assert cols == {"a": (2.0, 0.0), "b": (2.0, 0.0)}
    plugin = ElasticSizeScore()
    snapshot = cluster("a", nodes("n", 2))
    assert plugin.bound(gang("g", pods=2), snapshot, context_for(snapshot)) == 0.0  # type: ignore[arg-type]


def test_the_bound_before_the_fit_is_never_below_the_score() -> None:
    plugin = ElasticSizeScore()
    g = gang("g", pods=2, min_pods=1, max_pods=9, gpus=4)
    # Free GPUs: 4+4 on the half-used nodes, 8 on the empty ones; cpu is what limits one node.
    snapshots = [
        cluster("a", nodes("half", 2, used=4) + nodes("empty", 1)),
        cluster("b", nodes("cpu-bound", 3, cpu=40)),
    ]
    cols = score_columns("elastic-size", g, snapshots)
    for snapshot in snapshots:
        ctx = EvalContext(now=0.0, profile=Profile(), federation=FederationStats.of(snapshots), elastic=g)
        assert plugin.bound(g.maximum, snapshot, ctx) >= cols[snapshot.name][1]
    assert cols["a"] == (4.0, 37.5)
    assert cols["b"] == (3.0, 25.0)  # 40 cores hold one pod of 32 per node
