"""Filter "cluster-selector": cluster labels against the gang's clusterSelector."""

from __future__ import annotations

from placement_builders import cluster, gang, node, run_filter

from federator.placement import LabelRequirement, LabelSelector
from federator.placement.plugins.cluster_selector import SELECTOR_MISMATCH, ClusterSelectorFilter


def test_no_selector_passes_every_cluster() -> None:
    assert run_filter(ClusterSelectorFilter(), gang("g"), cluster("a", [node("n")]))[0].ok  # type: ignore[attr-defined]


def test_match_labels_and_expressions() -> None:
    selector = LabelSelector(
        match_labels={"tier": "research"},
        match_expressions=(LabelRequirement("region", "NotIn", frozenset({"ap"})),),  # type: ignore[arg-type]
    )
    g = gang("g", cluster_selector=selector)
    research = cluster("a", [node("n")], labels={"tier": "research", "region": "eu"})
    prod = cluster("b", [node("n")], labels={"tier": "prod"})
    asia = cluster("c", [node("n")], labels={"tier": "research", "region": "ap"})
    assert run_filter(ClusterSelectorFilter(), g, research)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(ClusterSelectorFilter(), g, prod)
    assert result.code == SELECTOR_MISMATCH and "tier=research" in result.message  # type: ignore[attr-defined]
    result, _ = run_filter(ClusterSelectorFilter(), g, asia)
    assert result.code == SELECTOR_MISMATCH and "region NotIn (ap)" in result.message  # type: ignore[attr-defined]
