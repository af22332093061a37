"""The filter/score framework: plugins registered by name, a Profile that picks and weighs them.

Shape borrowed from kube-scheduler and Volcano:
- a filter plugin answers `filter(gang, snapshot, ctx) -> FilterResult`:
  ok, or a stable code, a sentence and the numbers behind it;
- a score plugin answers `score(gang, snapshot, ctx) -> float` (raw, higher
  is better) and `normalize(raw, gang, ctx) -> 0..100`. Normalisation is
  absolute: it may use cycle-wide reference values (`FederationStats`: the
  largest bandwidth, the cheapest GPU-hour, the largest node, dataset sizes)
  but never the other candidates, so a cluster's score does not depend on
  which other clusters passed. That is what lets the cycle prune: a plugin
  that does not need the node-level fit (`needs_fit = False`) is exact before
  the fit, the others are at most 100, so a cluster whose upper bound cannot
  beat the best total found so far is never fitted node by node;
- a Profile lists the filters in the order they run (cheap first; the first
  "no" is the cluster's reason) and a weight per score plugin;
- a filter may be deferred (`DeferredFilter`): its `precheck` (O(1)
  necessary conditions) runs in its place in the chain, its exact `filter`
  only for clusters that could still win (gang-fit is the one that is);
- the ranking is the weighted sum of normalised scores, ties broken by
  cluster name, so the same inputs always give the same order. Pruning never
  changes the choice: see `cycle.evaluate_gang`.

`EvalContext` is the per-(gang, cluster) scratch of one evaluation, like
kube-scheduler's CycleState: the gpu-model filter leaves the models to try,
the quota filter narrows them to the models the gang's queue has room for
(the cycle's `Admission`, passed in), the gang-fit filter leaves the
node-level fit that scores and the reservation use. It lives only for one
evaluation.

Elastic gangs (see `gang`): filters, pre-fit scores and the fit are asked
about the gang at its minimum (so a cluster's reason is always the one at
the minimum), with the elastic request in `ctx.elastic`; gang-fit then
finds the largest size that fits there and leaves it in `ctx.sized` (its
fit in `ctx.fit`), and post-fit scores are asked about that size. A
`BoundedScore` is asked about the gang at its maximum and must bound every
size.

Pure: no I/O, no clocks (time comes in as `now`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from immutables import Map

from federator.placement.admission import Admission
from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit
from federator.placement.resources import ZERO, Resources
from federator.placement.snapshot import ClusterSnapshot, Location

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_WEIGHTS",
    "GANG_FIT",
    "PASSED",
    "BoundedScore",
    "DeferredFilter",
    "EvalContext",
    "FederationStats",
    "FilterPlugin",
    "FilterResult",
    "PluginRegistry",
    "Profile",
    "ProfileError",
    "ResolvedProfile",
    "ScorePlugin",
]

GANG_FIT = "gang-fit"
DEFAULT_FILTERS: tuple[str, ...] = (
    "health",
    "exclusion",
    "cluster-selector",
    "affinity",
    "tier",
    "spot",
    "network",
    "gpu-model",
    "budget",
    "quota",
    GANG_FIT,
)
# Data locality outweighs location preference (a cross-site copy of a big
# dataset costs more than running in the cloud); preference outweighs packing,
# topology, headroom and cost together, so "on-prem before cloud" holds unless
# the data says otherwise. For an elastic gang, the size a cluster fits
# (elastic-size) weighs less than preference and more than any one of packing,
# topology, headroom and cost; a fixed-size gang scores 0 on it everywhere.
DEFAULT_WEIGHTS: Mapping[str, float] = Map(
    {
        # A lower tier of the gang's spill-over order first: one tier's step (at most 5 tiers, so at least
        # 200 x 100 / 4 = 5000) outweighs all the other scores together (at most 40 x 100 = 4000).
        "tier": 200.0,
        # What the job says it prefers (spec.placement.affinity.preferred, spot: preferred) before what the
        # hub infers.
        "affinity": 10.0,
        "spot": 10.0,
        "data-locality": 8.0,
        "preference": 5.0,
        "elastic-size": 3.0,
        "packing": 1.0,
        "topology": 1.0,
        "network-headroom": 1.0,
        "cost": 1.0,
    }
)


class ProfileError(ValueError):
    """A profile that names unknown plugins or has invalid settings."""


@dataclass(frozen=True, slots=True)
class FilterResult:
    ok: bool
    code: str = ""
    message: str = ""
    numbers: Mapping[str, int | float] = field(default_factory=Map)

    @staticmethod
    def passed() -> FilterResult:
        return _PASSED

    @staticmethod
    def reject(code: str, message: str, **numbers: int | float) -> FilterResult:
        return FilterResult(False, code, message, Map(numbers))


_PASSED = FilterResult(True)
# The one "ok" result; plugins return it instead of building a new one per cluster.
PASSED = _PASSED


@dataclass(frozen=True, slots=True)
class Profile:
    """Which filters run (in order), how scores are weighed, and the cycle's timing knobs."""

    name: str = "default"
    filters: tuple[str, ...] = DEFAULT_FILTERS
    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    # Location the preference score favours; None scores every location alike.
    prefer_location: Location | None = Location.ON_PREM
    # A placed reservation not yet shown by the member is dropped after this long.
    reservation_ttl_seconds: float = 300.0
    # A gang unplaced this long after submission may take a head-of-line hold.
    hold_after_seconds: float = 600.0
    max_holds_per_cluster: int = 1
    # Fit and score every cluster that passes the cheap filters, even those that cannot win
    # (same decisions, fuller explanations, slower): for describe and debugging.
    exhaustive: bool = False
    # Among preemption candidates of equal priority, evict those whose eviction loses the fewest GPU-seconds
    # (work since their last checkpoint) first; False: the order before checkpoints (most recently started).
    victims_by_lost_work: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "filters", tuple(self.filters))
        if len(set(self.filters)) != len(self.filters):
            raise ProfileError(f"profile {self.name!r}: filters are listed twice: {list(self.filters)}")
        if GANG_FIT not in self.filters:
            raise ProfileError(
                f"profile {self.name!r}: filter {GANG_FIT!r} is required (placement needs a node-level assignment)"
            )
        weights = self.weights
        if not isinstance(weights, Mapping):
            raise ProfileError(f"profile {self.name!r}: weights must map score plugin names to numbers")
        for plugin, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise ProfileError(f"profile {self.name!r}: weight of {plugin!r} must be a finite number")
            if weight < 0:
                raise ProfileError(f"profile {self.name!r}: weight of {plugin!r} must not be negative")
        object.__setattr__(self, "weights", Map(weights))
        if self.prefer_location is not None:
            object.__setattr__(self, "prefer_location", Location(self.prefer_location))
        for knob in ("reservation_ttl_seconds", "hold_after_seconds"):
            value = getattr(self, knob)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ProfileError(f"profile {self.name!r}: {knob} must be a positive number")
        if type(self.victims_by_lost_work) is not bool:
            raise ProfileError(f"profile {self.name!r}: victims_by_lost_work must be a bool")
        if type(self.max_holds_per_cluster) is not int or self.max_holds_per_cluster < 0:
            raise ProfileError(f"profile {self.name!r}: max_holds_per_cluster must be a non-negative int")


@dataclass(frozen=True, slots=True)
class FederationStats:
    """Cycle-wide reference values for absolute score normalisation, computed once per cycle."""

    # Size of every dataset any cluster declares (the largest declaration wins): name -> bytes.
    dataset_sizes: Mapping[str, int] = field(default_factory=Map)
    max_bandwidth_gbps: float = 0.0
    min_cost_per_gpu_hour: float = 0.0
    # Componentwise maximum of the allocatable of every schedulable node in the federation.
    max_node_allocatable: Resources = ZERO

    @classmethod
    def of(cls, snapshots: Iterable[ClusterSnapshot]) -> FederationStats:
        sizes: dict[str, int] = {}
        bandwidth = 0.0
        cost: float | None = None
        cpu = memory = gpu = rdma = 0
        for snapshot in snapshots:
            info = snapshot.info
            for name, size in info.datasets.items():
                if size > sizes.get(name, -1):
                    sizes[name] = size
            bandwidth = max(bandwidth, float(info.bandwidth_gbps))
            cheapest = info.cheapest_price()
            cost = cheapest if cost is None else min(cost, cheapest)
            largest = snapshot.index.max_node_allocatable
            cpu = max(cpu, largest.cpu_milli)
            memory = max(memory, largest.memory)
            gpu = max(gpu, largest.gpu)
            rdma = max(rdma, largest.rdma)
        return cls(
            dataset_sizes=Map(sizes),
            max_bandwidth_gbps=bandwidth,
            min_cost_per_gpu_hour=cost or 0.0,
            max_node_allocatable=Resources(cpu, memory, gpu, rdma),
        )


class EvalContext:
    """Scratch of one (gang, cluster) evaluation; see the module docstring."""

    __slots__ = ("now", "profile", "federation", "admission", "gpu_models", "fit", "elastic", "sized")

    def __init__(
        self,
        *,
        now: float,
        profile: Profile,
        federation: FederationStats,
        admission: Admission | None = None,
        elastic: GangRequest | None = None,
    ) -> None:
        self.now = now
        self.profile = profile
        self.federation = federation
        # What the gang's queue admits (None: no queues in this cycle, or the gang has none): read by "quota".
        self.admission = admission
        # Set by the gpu-model filter: models to try, in order; None = not filtered yet.
        self.gpu_models: tuple[str, ...] | None = None
        # Set by the gang-fit filter when the gang fits.
        self.fit: GangFit | None = None
        # The elastic request when the gang being filtered is its minimum (None for a fixed-size gang).
        self.elastic = elastic
        # Set by the gang-fit filter for an elastic gang: the gang at the largest size that fits (`fit` is its fit).
        self.sized: GangRequest | None = None

    def max_step(self, model: str | None) -> int:
        """The largest size step of the elastic gang its queue admits on `model` (its maximum without a cap)."""
        elastic = self.elastic
        if elastic is None:
            return 0
        admission = self.admission
        if admission is None:
            return elastic.steps
        return min(elastic.steps, admission.max_step.get(model or "", elastic.steps))


@runtime_checkable
class FilterPlugin(Protocol):
    @property
    def name(self) -> str: ...

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult: ...


@runtime_checkable
class DeferredFilter(Protocol):
    """A filter with a cheap necessary check (`precheck`) and an expensive exact one (`filter`)."""

    @property
    def name(self) -> str: ...

    def precheck(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult: ...

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult: ...


@runtime_checkable
class ScorePlugin(Protocol):
    @property
    def name(self) -> str: ...

    # True if `score` reads `ctx.fit` (the node-level fit); such scores are bounded by 100 before the fit.
    @property
    def needs_fit(self) -> bool: ...

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float: ...

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float: ...


@runtime_checkable
class BoundedScore(Protocol):
    """A fit-dependent score that can bound itself before the fit, from the snapshot index alone.

    `bound` must be >= `normalize(score(...))` for every fit the gang-fit
    filter could produce on this snapshot; the cycle relies on it to skip
    fitting clusters that cannot win. For an elastic gang it is asked about
    the gang at its maximum (`ctx.elastic` set) and must hold for every size.
    """

    def bound(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float: ...


Check = Callable[[GangRequest, ClusterSnapshot, EvalContext], FilterResult]


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    profile: Profile
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]
    # (filter name, check) in profile order, with deferred filters' prechecks in their place.
    cheap_checks: tuple[tuple[str, Check], ...] = ()
    # (filter name, exact check) of the deferred filters, in profile order.
    exact_checks: tuple[tuple[str, Check], ...] = ()
    # Scores split once here (Protocol isinstance checks are slow): exact before the fit, and after it.
    pre_fit_scores: tuple[tuple[ScorePlugin, float], ...] = ()
    post_fit_scores: tuple[tuple[ScorePlugin, float], ...] = ()
    # Post-fit scores that bound themselves before the fit, and the fixed maximum of the others.
    bounded_scores: tuple[tuple[BoundedScore, float], ...] = ()
    unbounded_max: float = 0.0


class PluginRegistry:
    """Filter and score plugins by name; `resolve` turns a Profile into plugin objects."""

    def __init__(self, *, filters: Iterable[FilterPlugin], scores: Iterable[ScorePlugin]) -> None:
        self._filters: dict[str, FilterPlugin] = {}
        self._scores: dict[str, ScorePlugin] = {}
        self._resolved: dict[Profile, ResolvedProfile] = {}
        for plugin in filters:
            if plugin.name in self._filters:
                raise ProfileError(f"filter plugin {plugin.name!r} registered twice")
            self._filters[plugin.name] = plugin
        for score in scores:
            if score.name in self._scores:
                raise ProfileError(f"score plugin {score.name!r} registered twice")
            self._scores[score.name] = score

    @property
    def filter_names(self) -> tuple[str, ...]:
        return tuple(self._filters)

    @property
    def score_names(self) -> tuple[str, ...]:
        return tuple(self._scores)

    def resolve(self, profile: Profile) -> ResolvedProfile:
        """Plugins of a profile; resolved once per profile (registries and profiles are immutable)."""
        resolved = self._resolved.get(profile)
        if resolved is None:
            resolved = self._resolve(profile)
            if len(self._resolved) < 64:
                self._resolved[profile] = resolved
        return resolved

    def _resolve(self, profile: Profile) -> ResolvedProfile:
        unknown = [name for name in profile.filters if name not in self._filters]
        if unknown:
            raise ProfileError(
                f"profile {profile.name!r}: unknown filter {unknown[0]!r}; known: {', '.join(self._filters)}"
            )
        unknown = [name for name in profile.weights if name not in self._scores]
        if unknown:
            raise ProfileError(
                f"profile {profile.name!r}: unknown score {unknown[0]!r}; known: {', '.join(self._scores)}"
            )
        filters = tuple(self._filters[name] for name in profile.filters)
        cheap: list[tuple[str, Check]] = []
        exact: list[tuple[str, Check]] = []
        for plugin in filters:
            if isinstance(plugin, DeferredFilter):
                cheap.append((plugin.name, plugin.precheck))
                exact.append((plugin.name, plugin.filter))
            else:
                cheap.append((plugin.name, plugin.filter))
        scores = tuple(
            (self._scores[name], float(weight)) for name, weight in sorted(profile.weights.items()) if weight > 0
        )
        post = tuple((score, weight) for score, weight in scores if score.needs_fit)
        bounded: list[tuple[BoundedScore, float]] = []
        unbounded_max = 0.0
        for score, weight in post:
            if isinstance(score, BoundedScore):
                bounded.append((score, weight))
            else:
                unbounded_max += 100.0 * weight
        return ResolvedProfile(
            profile=profile,
            filters=filters,
            scores=scores,
            cheap_checks=tuple(cheap),
            exact_checks=tuple(exact),
            pre_fit_scores=tuple((score, weight) for score, weight in scores if not score.needs_fit),
            post_fit_scores=post,
            bounded_scores=tuple(bounded),
            unbounded_max=unbounded_max,
        )
