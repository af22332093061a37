"""Score "packing": filling partly used nodes beats opening whole ones."""

from __future__ import annotations

from placement_builders import cluster, gang, node, nodes, score_columns


def test_tight_fit_scores_higher_than_breaking_a_whole_node() -> None:
    g = gang("g", gpus=4)
    tight = cluster("tight", [node("half", used=4)])
    loose = cluster("loose", nodes("n", 2))
    cols = score_columns("packing", g, [tight, loose])
    assert cols["tight"] == (1.0, 100.0)
    assert cols["loose"] == (0.5, 50.0)


def test_cpu_only_gangs_pack_by_cpu() -> None:
    g = gang("g", gpus=0, cpu=24, mem_gi=8)
    cols = score_columns("packing", g, [cluster("a", [node("c", gpus=0, rdma=0, cpu=96)])])
    assert cols["a"] == (0.25, 25.0)
