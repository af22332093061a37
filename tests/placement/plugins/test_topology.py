"""Score "topology": fewer nodes for the gang scores higher."""

from __future__ import annotations

from placement_builders import cluster, gang, node, nodes, score_columns


def test_fewest_nodes_score_full() -> None:
    g = gang("g", pods=4, gpus=2)
    whole = cluster("whole", nodes("n", 1))  # all four pods on one node
    scattered = cluster("scattered", nodes("n", 4, used=6))  # one pod per node
    cols = score_columns("topology", g, [whole, scattered])
    assert cols["whole"] == (1.0, 100.0)
    assert cols["scattered"] == (4.0, 25.0)


def test_single_cluster_scores_full() -> None:
    cols = score_columns("topology", gang("g", pods=2), [cluster("a", [node("x"), node("y")])])
    assert cols["a"] == (2.0, 100.0)
