"""Explanations: the text `federator describe job` shows for placed and waiting gangs."""

from __future__ import annotations

from placement_builders import by_name, cluster, gang, nodes

from federator.placement import Profile, run_cycle
from federator.placement.explain import render_decision, render_unplaced


def test_decision_shows_nodes_scores_and_why_not() -> None:
    snaps = by_name(
        cluster("dc-a", nodes("n", 2), rv="812"),
        cluster("frag", nodes("n", 16, used=7)),
        cluster("eth", nodes("n", 4, rdma=0), fabric="ethernet", location="cloud"),
    )
    g = gang("vision/resnet", pods=2, gpus=8, rdma=1, network="rdma", models=["A100"])
    (decision,) = run_cycle([g], snaps, Profile(), now=0.0).decisions
    text = render_decision(decision)
    lines = text.splitlines()
    assert lines[0] == (
        "Placed vision/resnet in cluster dc-a on A100 (2 pods on 2 nodes, decided at member resourceVersion 812)"
    )
    assert "  n-000: worker-0" in lines and "  n-001: worker-1" in lines
    score_header = next(line for line in lines if line.strip().startswith("CLUSTER  TOTAL"))
    for plugin in ("data-locality", "packing", "preference", "cost", "topology", "network-headroom"):
        assert plugin in score_header
    assert any(line.strip().startswith("dc-a") and "100x5" in line for line in lines)
    frag_row = next(line for line in lines if line.strip().startswith("frag"))
    assert "gang-fit" in frag_row and "InsufficientGpu" in frag_row
    assert "needs 2 pods of 8 A100 GPUs with RDMA; at most 0 fit" in frag_row
    eth_row = next(line for line in lines if line.strip().startswith("eth "))
    assert "FabricMismatch" in eth_row


def test_unplaced_with_and_without_hold() -> None:
    snaps = by_name(cluster("a", nodes("n", 2, used=4)))
    young = run_cycle([gang("ns/big", pods=2, gpus=8)], snaps, Profile(hold_after_seconds=60), now=10.0)
    text = render_unplaced(young.unplaced[0])
    assert text.splitlines()[0] == "ns/big is waiting: no cluster can take the whole gang now"
    assert "InsufficientGpu" in text and "Holding" not in text
    old = run_cycle([gang("ns/big", pods=2, gpus=8)], snaps, Profile(hold_after_seconds=60), now=100.0)
    text = render_unplaced(old.unplaced[0])
    assert "Holding 2 nodes in a for it (50% of what it needs there is already free): n-000, n-001" in text
    never = run_cycle([gang("ns/huge", pods=9, gpus=8)], snaps, Profile(), now=0.0)
    assert render_unplaced(never.unplaced[0]).startswith("ns/huge fits no eligible cluster, even with every node free")
