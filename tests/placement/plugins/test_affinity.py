"""Filter and score "affinity": spec.placement.affinity (pinning, required and preferred cluster terms)."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, node, run_filter

from federator.placement import LabelRequirement, LabelSelector
from federator.placement.cycle import run_cycle
from federator.placement.framework import Profile
from federator.placement.plugins.affinity import AFFINITY_MISMATCH, NOT_PINNED, AffinityFilter, AffinityScore

EU = cluster("eu-1", [node("n")], labels={"region": "eu", "site": "on-prem"})
US = cluster("us-1", [node("n")], labels={"region": "us", "site": "cloud"}, location="cloud")
AP = cluster("ap-1", [node("n")], labels={"region": "ap"}, location="cloud")


def test_no_affinity_passes_and_scores_zero_everywhere() -> None:
    for snap in (EU, US, AP):
        assert run_filter(AffinityFilter(), gang("g"), snap)[0].ok  # type: ignore[attr-defined]
        assert AffinityScore().score(gang("g"), snap, None) == 0.0  # type: ignore[arg-type]


def test_pinning_keeps_the_gang_to_named_clusters() -> None:
    g = gang("g", cluster_names=frozenset({"us-1", "ap-1"}))
    assert run_filter(AffinityFilter(), g, US)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(AffinityFilter(), g, EU)
    assert result.code == NOT_PINNED and result.message == "the job is pinned to ap-1, us-1"  # type: ignore[attr-defined]


def test_required_terms_are_ored() -> None:
    g = gang("g", required_terms=(LabelSelector({"region": "eu"}),
                                  LabelSelector(match_expressions=(
                                      LabelRequirement("site", "In", frozenset({"cloud"})),))))  # type: ignore[arg-type]
    assert run_filter(AffinityFilter(), g, EU)[0].ok and run_filter(AffinityFilter(), g, US)[0].ok  # type: ignore[attr-defined]
    result, _ = run_filter(AffinityFilter(), g, AP)
    assert result.code == AFFINITY_MISMATCH  # type: ignore[attr-defined]
    assert result.message == "cluster labels match no required affinity term: region=eu; site In (cloud)"  # type: ignore[attr-defined]


def test_preferred_terms_score_their_share_of_the_weight_and_steer_the_choice() -> None:
    g = gang("g", preferred_terms=((80, LabelSelector({"region": "ap"})), (20, LabelSelector({"site": "cloud"}))))
    assert [AffinityScore().score(g, s, None) for s in (EU, US, AP)] == [0.0, 0.2, 0.8]  # type: ignore[arg-type]
    # without the preference the on-prem cluster wins (location preference); with it, ap-1
    assert [d.cluster for d in run_cycle([gang("h")], {"eu-1": EU, "ap-1": AP}, Profile(), now=0.0).decisions] == ["eu-1"]
    assert [d.cluster for d in run_cycle([g], {"eu-1": EU, "ap-1": AP}, Profile(), now=0.0).decisions] == ["ap-1"]


def test_bad_affinity_terms_are_refused() -> None:
    with pytest.raises(ValueError, match="affinity terms"):
        gang("g", preferred_terms=((0, LabelSelector()),))
    with pytest.raises(ValueError, match="affinity terms"):
        gang("g", required_terms=({"region": "eu"},))
    with pytest.raises(ValueError, match="cluster_names"):
        gang("g", cluster_names=frozenset({""}))
