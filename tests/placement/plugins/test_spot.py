"""Filter and score "spot", and GPU-hour prices by model in score "cost"."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, node, run_filter, score_columns

from federator.placement.cycle import run_cycle
from federator.placement.framework import Profile
from federator.placement.gang import SpotPolicy
from federator.placement.plugins.spot import SPOT_NOT_ALLOWED, SpotFilter, SpotScore
from federator.placement.snapshot import ClusterInfo

ONPREM = cluster("onprem", [node("n")])
SPOT = cluster("spot", [node("n")], location="cloud", spot=True, interruption_rate_per_hour=0.05, cost=0.5)


def test_spot_clusters_take_only_gangs_that_allow_them() -> None:
    result, _ = run_filter(SpotFilter(), gang("g"), SPOT)
    assert result.code == SPOT_NOT_ALLOWED  # type: ignore[attr-defined]
    assert "about 5% of its nodes lost per hour" in result.message  # type: ignore[attr-defined]
    for policy in (SpotPolicy.ALLOWED, SpotPolicy.PREFERRED):
        assert run_filter(SpotFilter(), gang("g", spot=policy), SPOT)[0].ok  # type: ignore[attr-defined]
    assert run_filter(SpotFilter(), gang("g"), ONPREM)[0].ok  # type: ignore[attr-defined]


def test_preferred_spot_wins_allowed_spot_does_not_by_itself() -> None:
    assert SpotScore().score(gang("g", spot=SpotPolicy.PREFERRED), SPOT, None) == 1.0  # type: ignore[arg-type]
    assert SpotScore().score(gang("g", spot=SpotPolicy.ALLOWED), SPOT, None) == 0.0  # type: ignore[arg-type]
    both = {"onprem": ONPREM, "spot": SPOT}
    assert [d.cluster for d in run_cycle([gang("a", spot=SpotPolicy.ALLOWED)], both, Profile(), now=0.0).decisions] \
        == ["onprem"]
    assert [d.cluster for d in run_cycle([gang("p", spot=SpotPolicy.PREFERRED)], both, Profile(), now=0.0).decisions] \
        == ["spot"]
    assert [d.cluster for d in run_cycle([gang("n")], {"spot": SPOT}, Profile(), now=0.0).decisions] == []


def test_the_cost_score_reads_the_price_of_the_gangs_gpu_model() -> None:
    # A100s are cheap in "mixed", H100s dear; "flat" charges 3 for any GPU
    mixed = cluster("mixed", [node("n", model="A100")], cost=5.0, cost_per_model={"A100": 1.5, "H100": 6.0})
    flat = cluster("flat", [node("n", model="A100")], cost=3.0)
    cols = score_columns("cost", gang("g", models=("A100",)), [mixed, flat])
    assert cols == {"mixed": (1.5, 100.0), "flat": (3.0, 50.0)}
    assert mixed.info.price("H100") == 6.0 and mixed.info.price("V100") == 5.0 and mixed.info.price(None) == 5.0
    assert mixed.info.cheapest_price() == 1.5


@pytest.mark.parametrize("bad", [{"cost_per_model": {"A100": -1.0}}, {"cost_per_model": {"": 1.0}},
                                 {"cost_per_model": {"A100": float("inf")}}, {"interruption_rate_per_hour": 1.5},
                                 {"spot": "yes"}])
def test_bad_cost_fields_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        ClusterInfo(location="on-prem", fabric="ethernet", **bad)  # type: ignore[arg-type]
