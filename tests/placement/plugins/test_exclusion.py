"""Filter "exclusion": a gang stays away from a cluster it was pulled back from until the given time."""

from __future__ import annotations

from placement_builders import cluster, gang, node, run_filter

from federator.placement.plugins.exclusion import EXCLUDED, ExclusionFilter


def test_excluded_until_later_is_rejected_with_time_left() -> None:
    g = gang("g", excluded_clusters={"a": 1_300.0})
    result, _ = run_filter(ExclusionFilter(), g, cluster("a", [node("n")]), now=1_000.0)
    assert (result.ok, result.code) == (False, EXCLUDED)  # type: ignore[attr-defined]
    assert result.numbers["seconds_left"] == 300.0  # type: ignore[attr-defined]
    assert "300s" in result.message  # type: ignore[attr-defined]


def test_exclusion_lapses_and_applies_only_to_its_cluster() -> None:
    g = gang("g", excluded_clusters={"a": 1_000.0})
    assert run_filter(ExclusionFilter(), g, cluster("a", [node("n")]), now=1_000.0)[0].ok  # type: ignore[attr-defined]
    assert run_filter(ExclusionFilter(), g, cluster("b", [node("n")]), now=0.0)[0].ok  # type: ignore[attr-defined]
