"""Filter "network": RDMA vs Ethernet fabric, and free rdma/hca devices."""

from __future__ import annotations

from placement_builders import cluster, gang, node, nodes, run_filter

from federator.placement.plugins.network import FABRIC_MISMATCH, INSUFFICIENT_RDMA, NetworkFilter

RDMA = cluster("ib", nodes("n", 4), fabric="rdma", rdma_kind="infiniband")
ETH = cluster("eth", nodes("n", 4, rdma=0), fabric="ethernet")


def test_rdma_gang_needs_an_rdma_cluster() -> None:
    g = gang("g", network="rdma")
    assert run_filter(NetworkFilter(), g, RDMA)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(NetworkFilter(), g, ETH)
    assert result.code == FABRIC_MISMATCH and "needs an RDMA fabric" in result.message  # type: ignore[attr-defined]


def test_ethernet_gang_stays_off_rdma_clusters() -> None:
    g = gang("g", network="ethernet")
    assert run_filter(NetworkFilter(), g, ETH)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(NetworkFilter(), g, RDMA)
    assert result.code == FABRIC_MISMATCH and "infiniband" in result.message  # type: ignore[attr-defined]


def test_any_network_takes_both() -> None:
    g = gang("g", network="any")
    assert run_filter(NetworkFilter(), g, ETH)[0].ok  # type: ignore[attr-defined]
    assert run_filter(NetworkFilter(), g, RDMA)[0].ok  # type: ignore[attr-defined]


def test_pods_asking_rdma_need_free_devices() -> None:
    busy = cluster("busy", [node("a", used_rdma=1), node("b"), node("c")])
    g = gang("g", pods=3, gpus=8, rdma=1, network="rdma")
    result, _ = run_filter(NetworkFilter(), g, busy)
    assert result.code == INSUFFICIENT_RDMA  # type: ignore[attr-defined]
    assert result.numbers["devices_free"] == 2 and result.numbers["devices_needed"] == 3  # type: ignore[attr-defined]
    assert "2 schedulable nodes have free rdma/hca" in result.message  # type: ignore[attr-defined]
    assert run_filter(NetworkFilter(), gang("g", pods=2, rdma=1), busy)[0].ok  # type: ignore[attr-defined]


def test_rdma_devices_on_an_ethernet_cluster_do_not_exist() -> None:
    result, _ = run_filter(NetworkFilter(), gang("g", rdma=1), ETH)
    assert result.code == INSUFFICIENT_RDMA  # type: ignore[attr-defined]
