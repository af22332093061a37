"""Filter and score "tier": a gang's spill-over order across clusters (its queue's tiers)."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, node, run_filter

from federator.placement import LabelSelector
from federator.placement.cycle import run_cycle
from federator.placement.framework import Profile
from federator.placement.gang import ClusterTier
from federator.placement.plugins.tier import NOT_IN_A_TIER, TIER_NOT_YET, TierFilter, TierScore, duration

TIERS = (ClusterTier("on-prem", LabelSelector({"tier": "on-prem"}), 300.0),
         ClusterTier("cloud", LabelSelector({"tier": "cloud"}), 600.0),
         ClusterTier("spot", LabelSelector(), 0.0))
ONPREM = cluster("a", [node("n")], labels={"tier": "on-prem"})
CLOUD = cluster("b", [node("n")], labels={"tier": "cloud"}, location="cloud")
SPOT = cluster("c", [node("n")], labels={"spot": "yes"}, location="cloud")


def tiered(**kwargs: object) -> object:
    return gang("g", queue="team", tiers=TIERS, waiting_since=1000.0, submitted_at=0.0, **kwargs)


def test_a_gang_without_tiers_passes_everywhere() -> None:
    for snap in (ONPREM, CLOUD, SPOT):
        assert run_filter(TierFilter(), gang("g"), snap, now=5.0)[0].ok  # type: ignore[attr-defined]


@pytest.mark.parametrize(("waited", "open_"), [(0, {"a"}), (299.9, {"a"}), (300, {"a", "b"}),
                                               (899, {"a", "b"}), (900, {"a", "b", "c"}), (10**6, {"a", "b", "c"})])
def test_tiers_open_one_by_one_counted_from_when_the_gang_entered_the_queue(waited: float, open_: set[str]) -> None:
    g = tiered()
    passed = {s.name for s in (ONPREM, CLOUD, SPOT)
              if run_filter(TierFilter(), g, s, now=1000.0 + waited)[0].ok}  # type: ignore[attr-defined]
    assert passed == open_


def test_the_why_not_says_which_tier_is_full_for_how_long() -> None:
    result, _ = run_filter(TierFilter(), tiered(), CLOUD, now=1000.0 + 180)
    assert result.code == TIER_NOT_YET  # type: ignore[attr-defined]
    assert result.message == "tier 2 (cloud) not yet: tier 1 (on-prem) full for 3m of 5m"  # type: ignore[attr-defined]
    result, _ = run_filter(TierFilter(), tiered(), SPOT, now=1000.0 + 300 + 45)
    assert result.message == "tier 3 (spot) not yet: tier 2 (cloud) full for 45s of 10m"  # type: ignore[attr-defined]
    assert dict(result.numbers) == {"tier": 3, "waited_seconds": 45.0, "spill_after_seconds": 600.0}  # type: ignore[attr-defined]


def test_a_cluster_in_no_tier_never_takes_the_gang() -> None:
    g = gang("g", queue="team", tiers=TIERS[:2], waiting_since=0.0)
    result, _ = run_filter(TierFilter(), g, SPOT, now=10**9)
    assert result.code == NOT_IN_A_TIER and "none of queue team's tiers (on-prem, cloud)" in result.message  # type: ignore[attr-defined]


def test_a_cluster_in_two_tiers_belongs_to_the_first() -> None:
    both = cluster("d", [node("n")], labels={"tier": "on-prem", "spot": "yes"})
    assert tiered().tier_of(both.info.labels) == 0  # type: ignore[attr-defined]


def test_the_score_puts_a_lower_tier_ahead_of_everything_else() -> None:
    g = tiered()
    ctx_now = 1000.0 + 10**6
    assert [TierScore().score(g, s, None) for s in (ONPREM, CLOUD, SPOT)] == [1.0, 0.5, 0.0]  # type: ignore[arg-type]
    # every tier open: the on-prem cluster wins even though the cloud one is cheaper and has the data
    cheap_cloud = cluster("b", [node("n")], labels={"tier": "cloud"}, location="cloud", cost=0.01,
                          datasets={"imagenet": 10**12})
    dear_onprem = cluster("a", [node("n")], labels={"tier": "on-prem"}, cost=99.0)
    result = run_cycle([gang("g", queue="", tiers=TIERS, waiting_since=0.0, datasets=("imagenet",))],
                       {"a": dear_onprem, "b": cheap_cloud}, Profile(), now=ctx_now)
    assert [d.cluster for d in result.decisions] == ["a"]


def test_with_room_in_tier_one_the_gang_never_goes_to_tier_two_and_with_none_it_waits() -> None:
    full = cluster("a", [node("n", gpus=0)], labels={"tier": "on-prem"})
    g = gang("g", queue="", tiers=TIERS, waiting_since=0.0)
    result = run_cycle([g], {"a": full, "b": CLOUD}, Profile(), now=299.0)
    assert not result.decisions
    [unplaced] = result.unplaced
    assert unplaced.why_not["b"].message == "tier 2 (cloud) not yet: tier 1 (on-prem) full for 4m59s of 5m"
    result = run_cycle([g], {"a": full, "b": CLOUD}, Profile(), now=300.0)
    assert [d.cluster for d in result.decisions] == ["b"]
    result = run_cycle([g], {"a": ONPREM, "b": CLOUD}, Profile(), now=10**6)
    assert [d.cluster for d in result.decisions] == ["a"]


def test_durations_read_like_kubectl_ages() -> None:
    assert [duration(s) for s in (0, 59.9, 60, 180, 299, 600, 3600, 4200)] == \
        ["0s", "59s", "1m", "3m", "4m59s", "10m", "1h", "1h10m"]


def test_bad_tiers_are_refused() -> None:
    with pytest.raises(ValueError, match="spill_after_seconds"):
        ClusterTier("x", LabelSelector(), -1.0)
    with pytest.raises(TypeError, match="selector"):
        ClusterTier("x", {"tier": "a"}, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="waiting_since"):
        gang("g", tiers=TIERS, waiting_since=float("nan"))
    with pytest.raises(TypeError, match="ClusterTiers"):
        gang("g", tiers=("on-prem",))
