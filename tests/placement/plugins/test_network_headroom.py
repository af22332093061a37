"""Score "network-headroom": bandwidth, scaled by RDMA devices left for RDMA gangs."""

from __future__ import annotations

from placement_builders import cluster, gang, nodes, score_columns


def test_bandwidth_for_gangs_without_rdma() -> None:
    fast = cluster("fast", nodes("n", 2), bandwidth=400)
    slow = cluster("slow", nodes("n", 2), bandwidth=100)
    cols = score_columns("network-headroom", gang("g"), [fast, slow])
    assert cols["fast"] == (400.0, 100.0) and cols["slow"] == (100.0, 25.0)


def test_rdma_gang_prefers_devices_to_spare() -> None:
    g = gang("g", pods=2, gpus=8, rdma=1, network="rdma")
    roomy = cluster("roomy", nodes("n", 8), bandwidth=200)
    tight = cluster("tight", nodes("n", 2), bandwidth=200)
    cols = score_columns("network-headroom", g, [roomy, tight])
    assert cols["roomy"] == (150.0, 75.0)  # 6 of 8 devices left, at the federation's top bandwidth
    assert cols["tight"] == (0.0, 0.0)  # takes the last two
