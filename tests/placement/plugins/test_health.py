"""Filter "health": unhealthy, cordoned, and no schedulable node."""

from __future__ import annotations

from placement_builders import cluster, gang, node, run_filter

from federator.placement.plugins.health import CORDONED, NO_SCHEDULABLE_NODES, UNHEALTHY, HealthFilter


def test_healthy_cluster_passes() -> None:
    result, _ = run_filter(HealthFilter(), gang("g"), cluster("a", [node("n")]))
    assert result.ok  # type: ignore[attr-defined]


def test_unhealthy_cluster_is_rejected_first() -> None:
    result, _ = run_filter(HealthFilter(), gang("g"), cluster("a", [node("n")], healthy=False, cordoned=True))
    assert (result.ok, result.code) == (False, UNHEALTHY)  # type: ignore[attr-defined]


def test_cordoned_cluster() -> None:
    result, _ = run_filter(HealthFilter(), gang("g"), cluster("a", [node("n")], cordoned=True))
    assert (result.ok, result.code) == (False, CORDONED)  # type: ignore[attr-defined]


def test_no_ready_schedulable_node_counts_why() -> None:
    snap = cluster("a", [node("n1", ready=False), node("n2", schedulable=False), node("n3", ready=False)])
    result, _ = run_filter(HealthFilter(), gang("g"), snap)
    assert result.code == NO_SCHEDULABLE_NODES  # type: ignore[attr-defined]
    assert dict(result.numbers) == {"nodes": 3, "not_ready": 2, "unschedulable": 1}  # type: ignore[attr-defined]
    assert "2 not ready, 1 cordoned" in result.message  # type: ignore[attr-defined]
