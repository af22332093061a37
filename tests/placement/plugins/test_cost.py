"""Score "cost": cheapest per GPU-hour scores 100, dearer ones proportionally less."""

from __future__ import annotations

from placement_builders import cluster, gang, nodes, score_columns


def test_cheapest_wins_proportionally() -> None:
    snaps = [cluster("cheap", nodes("n", 1), cost=2.0), cluster("dear", nodes("n", 1), cost=4.0)]
    cols = score_columns("cost", gang("g"), snaps)
    assert cols == {"cheap": (2.0, 100.0), "dear": (4.0, 50.0)}


def test_free_cluster_scores_full_and_makes_others_zero() -> None:
    snaps = [cluster("free", nodes("n", 1), cost=0.0), cluster("paid", nodes("n", 1), cost=3.0)]
    cols = score_columns("cost", gang("g"), snaps)
    assert cols == {"free": (0.0, 100.0), "paid": (3.0, 0.0)}
