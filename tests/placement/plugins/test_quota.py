"""Filter "quota": the empty hook admits every gang on every cluster (until quotas exist)."""

from __future__ import annotations

from placement_builders import cluster, gang, node, run_filter

from federator.placement.framework import DEFAULT_FILTERS
from federator.placement.plugins.quota import QuotaFilter


def test_quota_admits_everything_and_is_in_the_default_profile() -> None:
    huge = gang("g", pods=1000, gpus=8)
    result, _ = run_filter(QuotaFilter(), huge, cluster("a", [node("n")], healthy=False))
    assert result.ok  # type: ignore[attr-defined]
    assert "quota" in DEFAULT_FILTERS
