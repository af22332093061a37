"""The filter/score framework: plugins registered by name, a Profile that picks and weighs them.

Shape borrowed from kube-scheduler and Volcano:
- a filter plugin answers `filter(gang, snapshot, ctx) -> FilterResult`:
  ok, or a stable code, a sentence and the numbers behind it;
- a score plugin answers `score(gang, snapshot, ctx) -> float` (raw, higher
  is better) and `normalize(raw by cluster) -> 0..100 by cluster`;
- a Profile lists the filters in the order they run (cheap first; the first
  "no" is the cluster's reason) and a weight per score plugin;
- the ranking is the weighted sum of normalised scores, ties broken by
  cluster name, so the same inputs always give the same order.

`EvalContext` is the per-(gang, cluster) scratch of one evaluation, like
kube-scheduler's CycleState: the gpu-model filter leaves the models to try,
the gang-fit filter leaves the node-level fit that scores and the
reservation use. It lives only for one evaluation.

Pure: no I/O, no clocks (time comes in as `now`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from immutables import Map

from federator.placement.gang import GangRequest
from federator.placement.nodefit import GangFit
from federator.placement.snapshot import ClusterSnapshot, Location

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_WEIGHTS",
    "GANG_FIT",
    "EvalContext",
    "FilterPlugin",
    "FilterResult",
    "MaxNormalized",
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
    "network",
    "gpu-model",
    "quota",
    GANG_FIT,
)
# Data locality outweighs location preference (a cross-site copy of a big
# dataset costs more than running in the cloud); preference outweighs packing,
# topology, headroom and cost together, so "on-prem before cloud" holds unless
# the data says otherwise.
DEFAULT_WEIGHTS: Mapping[str, float] = Map(
    {
        "data-locality": 8.0,
        "preference": 5.0,
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
        if type(self.max_holds_per_cluster) is not int or self.max_holds_per_cluster < 0:
            raise ProfileError(f"profile {self.name!r}: max_holds_per_cluster must be a non-negative int")


class EvalContext:
    """Scratch of one (gang, cluster) evaluation; see the module docstring."""

    __slots__ = ("now", "profile", "dataset_sizes", "gpu_models", "fit")

    def __init__(self, *, now: float, profile: Profile, dataset_sizes: Mapping[str, int]) -> None:
        self.now = now
        self.profile = profile
        # Size of every dataset any cluster declares: name -> bytes.
        self.dataset_sizes = dataset_sizes
        # Set by the gpu-model filter: models to try, in order; None = not filtered yet.
        self.gpu_models: tuple[str, ...] | None = None
        # Set by the gang-fit filter when the gang fits.
        self.fit: GangFit | None = None


@runtime_checkable
class FilterPlugin(Protocol):
    @property
    def name(self) -> str: ...

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult: ...


@runtime_checkable
class ScorePlugin(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float: ...

    def normalize(self, raw: Mapping[str, float]) -> dict[str, float]: ...


class MaxNormalized:
    """Default normalisation: raw / max(raw) * 100 (all zero -> all zero); proportions are kept."""

    def normalize(self, raw: Mapping[str, float]) -> dict[str, float]:
        top = max(raw.values(), default=0.0)
        if top <= 0:
            return {cluster: 0.0 for cluster in raw}
        return {cluster: 100.0 * max(0.0, value) / top for cluster, value in raw.items()}


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    profile: Profile
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]


class PluginRegistry:
    """Filter and score plugins by name; `resolve` turns a Profile into plugin objects."""

    def __init__(self, *, filters: Iterable[FilterPlugin], scores: Iterable[ScorePlugin]) -> None:
        self._filters: dict[str, FilterPlugin] = {}
        self._scores: dict[str, ScorePlugin] = {}
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
        return ResolvedProfile(
            profile=profile,
            filters=tuple(self._filters[name] for name in profile.filters),
            scores=tuple(
                (self._scores[name], float(weight))
                for name, weight in sorted(profile.weights.items())
                if weight > 0
            ),
        )
