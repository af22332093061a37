"""Framework: profiles validated against the registry, weights, normalisation, deterministic ranking."""

from __future__ import annotations

import pytest
from placement_builders import by_name, cluster, gang, nodes

from federator.placement import Profile, ProfileError, run_cycle
from federator.placement.framework import (
    DEFAULT_FILTERS,
    EvalContext,
    FilterPlugin,
    FilterResult,
    PluginRegistry,
    ScorePlugin,
)
from federator.placement.gang import GangRequest
from federator.placement.plugins import default_registry
from federator.placement.snapshot import ClusterSnapshot


def test_default_registry_knows_every_default_plugin() -> None:
    registry = default_registry()
    resolved = registry.resolve(Profile())
    assert tuple(p.name for p in resolved.filters) == DEFAULT_FILTERS
    assert {p.name for p, _ in resolved.scores} == set(registry.score_names)
    for plugin in resolved.filters:
        assert isinstance(plugin, FilterPlugin)
    for score, _ in resolved.scores:
        assert isinstance(score, ScorePlugin)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"filters": ("health",)}, "'gang-fit' is required"),
        ({"filters": ("gang-fit", "gang-fit")}, "listed twice"),
        ({"weights": {"packing": -1}}, "must not be negative"),
        ({"weights": {"packing": float("nan")}}, "finite"),
        ({"weights": {"packing": True}}, "finite"),
        ({"reservation_ttl_seconds": 0}, "positive"),
        ({"hold_after_seconds": -5}, "positive"),
        ({"max_holds_per_cluster": -1}, "non-negative"),
        ({"prefer_location": "moon"}, "moon"),
    ],
)
def test_profile_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Profile(**kwargs)  # type: ignore[arg-type]


def test_unknown_plugin_names_are_errors() -> None:
    with pytest.raises(ProfileError, match="unknown filter 'gpu-count'"):
        default_registry().resolve(Profile(filters=("gpu-count", "gang-fit")))
    with pytest.raises(ProfileError, match="unknown score 'vibes'"):
        default_registry().resolve(Profile(weights={"vibes": 1.0}))


def test_ties_are_broken_by_cluster_name() -> None:
    snaps = by_name(cluster("zeta", nodes("n", 2)), cluster("alpha", nodes("n", 2)), cluster("mid", nodes("n", 2)))
    decision = run_cycle([gang("g")], snaps, Profile(exhaustive=True), now=0.0).decisions[0]
    assert [s.cluster for s in decision.scores] == ["alpha", "mid", "zeta"]
    assert decision.cluster == "alpha"
    assert len({s.total for s in decision.scores}) == 1
    # Pruned: the same choice; the others could at best tie, and lose the tie on name, so they are not fitted.
    pruned = run_cycle([gang("g")], snaps, Profile(), now=0.0).decisions[0]
    assert pruned.cluster == "alpha" and [s.cluster for s in pruned.scores] == ["alpha"]
    assert dict(pruned.outranked) == {"mid": pruned.scores[0].total, "zeta": pruned.scores[0].total}


def test_pruning_fits_only_clusters_that_could_win() -> None:
    # Ten identical clusters, one of which holds the gang's data: it wins on locality before any fit elsewhere.
    clusters = [cluster(f"c{i}", nodes("n", 4), datasets={"d": 10**12} if i == 7 else {}) for i in range(10)]
    decision = run_cycle([gang("g", datasets=["d"])], by_name(*clusters), Profile(), now=0.0).decisions[0]
    assert decision.cluster == "c7"
    assert [s.cluster for s in decision.scores] == ["c7"]
    assert set(decision.outranked) == {f"c{i}" for i in range(10) if i != 7}


def test_weights_change_the_choice() -> None:
    # "dc" is on-prem but dear; "cloud" is cheap. Preference wins by default; cost wins if only cost counts.
    snaps = by_name(
        cluster("dc", nodes("n", 2), cost=6.0),
        cluster("cloud", nodes("n", 2), cost=1.0, location="cloud", fabric="ethernet"),
    )
    assert run_cycle([gang("g")], snaps, Profile(), now=0.0).decisions[0].cluster == "dc"
    cost_only = Profile(weights={"cost": 1.0})
    decision = run_cycle([gang("g")], snaps, cost_only, now=0.0).decisions[0]
    assert decision.cluster == "cloud"
    assert [p.plugin for p in decision.scores[0].parts] == ["cost"]


class _NoOddNodes:
    """A custom filter, to show plugins are registered by name and their reasons reach the decision."""

    name = "no-odd-nodes"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        if len(snapshot.nodes) % 2:
            return FilterResult.reject("OddNodeCount", f"{len(snapshot.nodes)} nodes", nodes=len(snapshot.nodes))
        return FilterResult.passed()


def test_custom_plugins_register_by_name() -> None:
    base = default_registry()
    resolved = base.resolve(Profile())
    registry = PluginRegistry(
        filters=(*resolved.filters, _NoOddNodes()),
        scores=tuple(score for score, _ in resolved.scores),
    )
    profile = Profile(filters=("no-odd-nodes", *DEFAULT_FILTERS))
    snaps = by_name(cluster("odd", nodes("n", 3)), cluster("even", nodes("n", 2)))
    decision = run_cycle([gang("g")], snaps, profile, now=0.0, registry=registry).decisions[0]
    assert decision.cluster == "even"
    assert decision.why_not["odd"].filter == "no-odd-nodes"
    assert decision.why_not["odd"].code == "OddNodeCount"
    with pytest.raises(ProfileError, match="registered twice"):
        PluginRegistry(filters=(_NoOddNodes(), _NoOddNodes()), scores=())
