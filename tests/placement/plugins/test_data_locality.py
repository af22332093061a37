"""Score "data-locality": bytes of required datasets already in the cluster decide between fits."""

from __future__ import annotations

from placement_builders import GI, cluster, gang, node, nodes, score_columns


def test_bytes_present_are_scored_relative_to_the_best() -> None:
    g = gang("g", datasets=["imagenet", "laion"])
    both = cluster("both", nodes("n", 2), datasets={"imagenet": 100 * GI, "laion": 300 * GI})
    one = cluster("one", nodes("n", 2), datasets={"laion": 300 * GI})
    none = cluster("none", nodes("n", 2))
    cols = score_columns("data-locality", g, [both, one, none])
    assert cols["both"] == (400.0 * GI, 100.0)
    assert cols["one"] == (300.0 * GI, 75.0)
    assert cols["none"] == (0.0, 0.0)


def test_node_caches_count_with_the_declared_size() -> None:
    g = gang("g", datasets=["imagenet"])
    declared = cluster("declared", nodes("n", 2), datasets={"imagenet": 100 * GI})
    cached = cluster("cached", [node("n1", datasets=["imagenet"]), node("n2")])
    cols = score_columns("data-locality", g, [declared, cached])
    assert cols["cached"] == (100.0 * GI, 100.0)


def test_gang_without_datasets_scores_zero_everywhere() -> None:
    cols = score_columns("data-locality", gang("g"), [cluster("a", nodes("n", 1), datasets={"d": 5})])
    assert cols["a"] == (0.0, 0.0)
