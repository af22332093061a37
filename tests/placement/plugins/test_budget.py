"""Filter "budget": a gang whose queue is over its monthly budget goes only to already-paid capacity."""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, node, run_filter

from federator.placement.cycle import run_cycle
from federator.placement.framework import DEFAULT_FILTERS, Profile
from federator.placement.gang import BudgetExceeded
from federator.placement.plugins.budget import OVER_BUDGET, BudgetFilter

OVER = BudgetExceeded(spent=1512.4, limit=1500.0, unit="USD")
ONPREM = cluster("onprem", [node("n", model="A100")], cost=0.0)
CLOUD = cluster("cloud", [node("n", model="H100")], location="cloud", cost=4.5)
# A100s already paid for, H100s rented by the hour
MIXED = cluster("mixed", [node("a", model="A100"), node("h", model="H100")], cost=0.0,
                cost_per_model={"H100": 6.0})


def _over(**kwargs: object) -> object:
    return gang("g", queue="team-a", over_budget=OVER, **kwargs)


def _filter(g: object, snap: object) -> tuple[object, object]:
    """The "budget" filter after "gpu-model" left the models to try (as the default profile runs them)."""
    from federator.placement.plugins.gpu_model import GpuModelFilter
    result, ctx = run_filter(GpuModelFilter(), g, snap)  # type: ignore[arg-type]
    assert result.ok  # type: ignore[attr-defined]
    return BudgetFilter().filter(g, snap, ctx), ctx  # type: ignore[arg-type]


def test_it_runs_after_gpu_model_and_before_quota() -> None:
    assert DEFAULT_FILTERS.index("gpu-model") < DEFAULT_FILTERS.index("budget") < DEFAULT_FILTERS.index("quota")


def test_a_gang_under_budget_or_without_gpus_passes_everywhere() -> None:
    for snap in (ONPREM, CLOUD, MIXED):
        assert _filter(gang("g", queue="team-a"), snap)[0].ok  # type: ignore[attr-defined]
        assert _filter(gang("g", queue="team-a", gpus=0, over_budget=OVER), snap)[0].ok  # type: ignore[attr-defined]


def test_over_budget_only_already_paid_clusters_pass_and_the_reason_says_why() -> None:
    assert _filter(_over(), ONPREM)[0].ok  # type: ignore[attr-defined]
    result, _ = _filter(_over(), CLOUD)
    assert result.code == OVER_BUDGET  # type: ignore[attr-defined]
    assert result.message == ("queue team-a is over its budget (1,512.40 of 1,500.00 USD this month): only "  # type: ignore[attr-defined]
                              "already-paid clusters (GPU-hour price 0); this one charges 4.5 per GPU-hour")
    assert dict(result.numbers) == {"spent": 1512.4, "limit": 1500.0, "price": 4.5}  # type: ignore[attr-defined]


def test_on_a_cluster_with_free_and_paid_models_only_the_free_ones_are_tried() -> None:
    result, ctx = _filter(_over(models=("H100", "A100")), MIXED)
    assert result.ok and ctx.gpu_models == ("A100",)  # type: ignore[attr-defined]
    result, _ = _filter(_over(models=("H100",)), MIXED)
    assert result.code == OVER_BUDGET and "charges 6 per GPU-hour" in result.message  # type: ignore[attr-defined]


def test_gpu_hour_budgets_read_in_hours() -> None:
    hours = BudgetExceeded(spent=2010.25, limit=2000, unit="GPU-hours")
    result, _ = _filter(gang("g", queue="q", over_budget=hours), CLOUD)
    assert "(2,010.2 of 2,000.0 GPU-hours this month)" in result.message  # type: ignore[attr-defined]


def test_in_a_cycle_an_over_budget_gang_goes_on_prem_or_waits_and_is_never_hopeless() -> None:
    # under budget the cheaper-per-score cloud cluster may win; over budget only on-prem is open
    result = run_cycle([_over()], {"onprem": ONPREM, "cloud": CLOUD}, Profile(), now=0.0)  # type: ignore[list-item]
    assert [d.cluster for d in result.decisions] == ["onprem"]
    full = cluster("onprem", [node("n", model="A100", used=8)], cost=0.0)
    result = run_cycle([_over()], {"onprem": full, "cloud": CLOUD}, Profile(), now=0.0)  # type: ignore[list-item]
    assert not result.decisions
    [unplaced] = result.unplaced
    assert unplaced.why_not["cloud"].code == OVER_BUDGET and not unplaced.never_fits
    # on-prem too small for the gang even when empty: still not hopeless, the budget opens the cloud next month
    small = cluster("onprem", [node("n", model="A100", gpus=4)], cost=0.0)
    result = run_cycle([_over()], {"onprem": small, "cloud": CLOUD}, Profile(), now=0.0)  # type: ignore[list-item]
    [unplaced] = result.unplaced
    assert unplaced.why_not["cloud"].code == OVER_BUDGET and not unplaced.never_fits
    # the same gang under budget goes to the cloud
    under = gang("g", queue="team-a")
    result = run_cycle([under], {"onprem": full, "cloud": CLOUD}, Profile(), now=0.0)
    assert [d.cluster for d in result.decisions] == ["cloud"]


def test_bad_budget_states_are_refused() -> None:
    with pytest.raises(ValueError, match="spent"):
        BudgetExceeded(spent=float("nan"), limit=1.0, unit="USD")
    with pytest.raises(ValueError, match="unit"):
        BudgetExceeded(spent=1.0, limit=1.0, unit="")
    with pytest.raises(TypeError, match="over_budget"):
        gang("g", over_budget=True)
