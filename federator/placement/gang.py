"""GangRequest: what one training job asks of placement, in placement's own terms.

The controllers translate a TrainingJob into a GangRequest (roles with
replicas and per-pod requests, network, GPU models, datasets, selectors,
tolerations, priority, submission time). Placement never sees the API types.

All-or-nothing is the point: a gang is placed whole into one cluster or not
at all. Validation here rejects requests that could never be honoured or
that are hostile in size (more than `MAX_GANG_PODS` pods, at its maximum),
with a message naming the field; it must never silently fix a request up.

Elastic gangs: a role may run with any number of pods between its
`min_replicas` and `max_replicas` (`replicas` is the preferred start;
1 <= min <= replicas <= max; a role that sets neither has
min = replicas = max and is placed exactly as before). Placement sizes an
elastic gang in steps: step k in 0..`steps` gives each role
min + k x (max - min) // steps pods, so step 0 is the gang at its minimum,
`steps` at its maximum, and each step adds pods (for a gang with one
elastic role, a step is one pod of it). `sized(k)` is the gang at step k:
a fixed gang (min = replicas = max) with the same identity, which is what
every fixed-size part of placement (filters, packing, quota, holds,
preemption) works on. The derived `total`, `pod_count`, `shape` and
`fit_order` describe a gang at its preferred size (`replicas`).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from immutables import Map

from federator.placement.resources import Resources
from federator.placement.snapshot import Taint, TaintEffect

__all__ = [
    "MAX_GANG_PODS",
    "BudgetExceeded",
    "ClusterTier",
    "GangRequest",
    "LabelRequirement",
    "LabelSelector",
    "Network",
    "RoleRequest",
    "SelectorOperator",
    "SpotPolicy",
    "Toleration",
    "TolerationOperator",
]

# A gang larger than this is a typo or an attack; no member cluster runs one.
MAX_GANG_PODS = 10_000
_MAX_NAME = 253


class SpotPolicy(StrEnum):
    """Whether a gang may run on spot capacity (spec.placement.spot)."""

    NEVER = "never"
    ALLOWED = "allowed"
    PREFERRED = "preferred"


class Network(StrEnum):
    """The fabric a gang needs.

    - rdma: an RDMA cluster (InfiniBand or RoCE); pods asking `rdma/hca` get devices.
    - ethernet: an Ethernet cluster. The gang was built for TCP collectives, and
      keeping such gangs off RDMA clusters leaves those for gangs that need them.
    - any: either.
    """

    RDMA = "rdma"
    ETHERNET = "ethernet"
    ANY = "any"


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("matchExpressions[].key must not be empty")
        operator = SelectorOperator(self.operator)
        object.__setattr__(self, "operator", operator)
        values = frozenset(self.values)
        object.__setattr__(self, "values", values)
        if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
            raise ValueError(f"matchExpressions[{self.key}]: operator {operator.value} needs values")
        if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
            raise ValueError(f"matchExpressions[{self.key}]: operator {operator.value} takes no values")

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op is SelectorOperator.EXISTS:
            return self.key in labels
        if op is SelectorOperator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op is SelectorOperator.IN:
            return value is not None and value in self.values
        return value is None or value not in self.values

    def describe(self) -> str:
        if self.operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST):
            return f"{self.key} {self.operator.value}"
        return f"{self.key} {self.operator.value} ({', '.join(sorted(self.values))})"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Kubernetes label selector semantics: every matchLabels pair and every expression must hold."""

    match_labels: Mapping[str, str] = field(default_factory=Map)
    match_expressions: tuple[LabelRequirement, ...] = ()

    def __post_init__(self) -> None:
        labels = self.match_labels
        if not isinstance(labels, Mapping):
            raise TypeError("matchLabels must be a mapping")
        for key, value in labels.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise ValueError(f"matchLabels must map non-empty strings to strings, got {key!r}: {value!r}")
        object.__setattr__(self, "match_labels", Map(labels))
        object.__setattr__(self, "match_expressions", tuple(self.match_expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)

    def first_mismatch(self, labels: Mapping[str, str]) -> str | None:
        """The first term that fails, for messages; None if the selector matches."""
        for key in sorted(self.match_labels):
            if labels.get(key) != self.match_labels[key]:
                return f"{key}={self.match_labels[key]}"
        for requirement in self.match_expressions:
            if not requirement.matches(labels):
                return requirement.describe()
        return None

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    @classmethod
    def from_wire(cls, raw: object) -> LabelSelector:
        """A (validated) wire label selector, {matchLabels, matchExpressions}; anything else selects all."""
        if not isinstance(raw, Mapping):
            return cls()
        match_labels = raw.get("matchLabels") or {}
        expressions = tuple(
            LabelRequirement(key=str(e.get("key")), operator=SelectorOperator(str(e.get("operator"))),
                             values=frozenset(str(v) for v in (e.get("values") or ())))
            for e in (raw.get("matchExpressions") or ())
            if isinstance(e, Mapping)
        )
        return cls(match_labels={str(k): str(v) for k, v in match_labels.items()}, match_expressions=expressions)


@dataclass(frozen=True, slots=True)
class ClusterTier:
    """One tier of a gang's spill-over order (its queue's spec.tiers): the clusters `selector` picks, and how
    long the gang waits with no room in this tier and the ones before it before the next is considered too."""

    name: str
    selector: LabelSelector
    spill_after_seconds: float = 300.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > _MAX_NAME:
            raise ValueError(f"tier name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.selector, LabelSelector):
            raise TypeError(f"tier {self.name}: selector must be a LabelSelector")
        spill = self.spill_after_seconds
        if isinstance(spill, bool) or not isinstance(spill, int | float) or not math.isfinite(spill) or spill < 0:
            raise ValueError(f"tier {self.name}: spill_after_seconds must be a finite number >= 0, got {spill!r}")


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    """The gang's queue has reached its monthly budget (its Queue's spec.budget): `spent` of `limit` in `unit`
    (a currency code, or "GPU-hours"). Set by the hub's queue accounting; the "budget" filter reads it."""

    spent: float
    limit: float
    unit: str

    def __post_init__(self) -> None:
        for name in ("spent", "limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"BudgetExceeded.{name} must be a finite number, got {value!r}")
        if not isinstance(self.unit, str) or not self.unit or len(self.unit) > 32:
            raise ValueError(f"BudgetExceeded.unit must be a short non-empty string, got {self.unit!r}")

    def text(self) -> str:
        """"1,512.40 of 1,500.00 USD this month" (GPU-hours with one decimal)."""
        digits = 1 if self.unit == "GPU-hours" else 2
        return f"{self.spent:,.{digits}f} of {self.limit:,.{digits}f} {self.unit} this month"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration semantics (an empty key with Exists tolerates every taint)."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None

    def __post_init__(self) -> None:
        operator = TolerationOperator(self.operator)
        object.__setattr__(self, "operator", operator)
        if self.effect is not None:
            object.__setattr__(self, "effect", TaintEffect(self.effect))
        if not self.key and operator is not TolerationOperator.EXISTS:
            raise ValueError("a toleration with an empty key must use operator Exists")
        if operator is TolerationOperator.EXISTS and self.value:
            raise ValueError(f"toleration {self.key!r}: operator Exists takes no value")

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator is TolerationOperator.EXISTS:
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class RoleRequest:
    """One role of a gang (e.g. "ps", "worker"): `replicas` identical pods each requesting `requests`.

    Elastic when `min_replicas` < `max_replicas`: it may run with any count in
    between (`replicas` is the preferred start). Either bound left out (None)
    is `replicas`; after construction both are ints.
    """

    name: str
    replicas: int
    requests: Resources
    min_replicas: int | None = None
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str) or len(self.name) > 63:
            raise ValueError(f"role name must be 1-63 characters, got {self.name!r}")
        if type(self.replicas) is not int or self.replicas < 1:
            raise ValueError(f"role {self.name!r}: replicas must be a positive integer, got {self.replicas!r}")
        if not isinstance(self.requests, Resources):
            raise TypeError(f"role {self.name!r}: requests must be Resources")
        for field_name in ("min_replicas", "max_replicas"):
            value = getattr(self, field_name)
            if value is None:
                object.__setattr__(self, field_name, self.replicas)
            elif type(value) is not int or value < 1:
                raise ValueError(f"role {self.name!r}: {field_name} must be a positive integer, got {value!r}")
        low, high = self.min_replicas, self.max_replicas
        assert low is not None and high is not None
        if low > self.replicas:
            raise ValueError(
                f"role {self.name!r}: min_replicas ({low}) must be at most replicas ({self.replicas})"
            )
        if high < self.replicas:
            raise ValueError(
                f"role {self.name!r}: max_replicas ({high}) must be at least replicas ({self.replicas})"
            )

    @property
    def low(self) -> int:
        """`min_replicas` as an int (it always is one after construction)."""
        return self.min_replicas if self.min_replicas is not None else self.replicas

    @property
    def high(self) -> int:
        """`max_replicas` as an int (it always is one after construction)."""
        return self.max_replicas if self.max_replicas is not None else self.replicas

    @property
    def elastic(self) -> bool:
        return self.low < self.high

    def fixed(self, replicas: int) -> RoleRequest:
        """This role with exactly `replicas` pods (min = replicas = max)."""
        if replicas == self.replicas and not self.elastic:
            return self
        return RoleRequest(self.name, replicas, self.requests)


def _fit_order_key(role: RoleRequest) -> tuple[int, int, int, int, str]:
    r = role.requests
    return (-r.gpu, -r.rdma, -r.cpu_milli, -r.memory, role.name)


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A whole gang to place: every pod of every role, into one cluster, or nowhere.

    `key` is the job's "namespace/name" (for people), `uid` its identity (for
    reservations and for matching the member's pods). `excluded_clusters`
    maps a cluster name to the time (seconds, same clock as `now`) until
    which the gang must not go there, e.g. after being pulled back from it;
    `excluded_nodes` maps a cluster name to nodes of it the gang's pods must
    not use (a failure policy's Requeue with exclude Node), the rest of the
    cluster staying open (`node_accepts_gang`).
    `queue` names the queue whose quota it is charged to; "" means no
    queue: no quota, no fair share, never preempted (placement as before
    queues existed).
    """

    key: str
    uid: str
    roles: tuple[RoleRequest, ...]
    network: Network = Network.ANY
    gpu_models: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    cluster_selector: LabelSelector | None = None
    node_selector: Mapping[str, str] = field(default_factory=Map)
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    submitted_at: float = 0.0
    excluded_clusters: Mapping[str, float] = field(default_factory=Map)
    excluded_nodes: Mapping[str, frozenset[str]] = field(default_factory=Map)
    queue: str = ""
    # Spill-over order (its queue's tiers): () places anywhere. `waiting_since` (when it last entered the
    # placement queue; None: submitted_at) is what a tier's spill_after_seconds counts from.
    tiers: tuple[ClusterTier, ...] = ()
    waiting_since: float | None = None
    # spec.placement.affinity: pinned cluster names (empty: any), required terms (ORed; empty: any) and
    # weighted preferred terms.
    cluster_names: frozenset[str] = frozenset()
    required_terms: tuple[LabelSelector, ...] = ()
    preferred_terms: tuple[tuple[int, LabelSelector], ...] = ()
    spot: SpotPolicy = SpotPolicy.NEVER
    # Its queue is over its monthly budget (None: it is not, or has none): only already-paid clusters ("budget").
    over_budget: BudgetExceeded | None = None
    # Derived in __post_init__.
    fit_order: tuple[RoleRequest, ...] = field(init=False, compare=False, repr=False)
    total: Resources = field(init=False, compare=False, repr=False)
    pod_count: int = field(init=False, compare=False, repr=False)
    rdma_pod_count: int = field(init=False, compare=False, repr=False)
    # What the pods ask, role by role in fit order: gangs with the same shape pack the same way.
    shape: tuple[tuple[str, int, int, int, int, int], ...] = field(init=False, compare=False, repr=False)
    # Some role may run with fewer or more pods (min_replicas < max_replicas); and its number of size steps.
    elastic: bool = field(init=False, compare=False, repr=False)
    steps: int = field(init=False, compare=False, repr=False)
    # (pods at the minimum, pods at the maximum), and each role's (min, max) in fit order: memo keys.
    pods_range: tuple[int, int] = field(init=False, compare=False, repr=False)
    ranges: tuple[tuple[int, int], ...] = field(init=False, compare=False, repr=False)
    # step -> the gang at that step (built once each: a cycle asks for the same few sizes again and again).
    _sized: dict[int, GangRequest] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("key", "uid"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
                raise ValueError(f"gang {name} must be 1-{_MAX_NAME} characters, got {value!r}")
        roles = tuple(self.roles)
        if not roles:
            raise ValueError(f"gang {self.key}: roles must not be empty")
        names = [role.name for role in roles]
        if len(set(names)) != len(names):
            raise ValueError(f"gang {self.key}: role names must be unique, got {names}")
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "network", Network(self.network))
        for name in ("gpu_models", "datasets"):
            values = tuple(getattr(self, name))
            if any(not isinstance(v, str) or not v for v in values) or len(set(values)) != len(values):
                raise ValueError(f"gang {self.key}: {name} must be distinct non-empty strings, got {values!r}")
            object.__setattr__(self, name, values)
        if self.cluster_selector is not None and not isinstance(self.cluster_selector, LabelSelector):
            raise TypeError(f"gang {self.key}: cluster_selector must be a LabelSelector")
        node_selector = self.node_selector
        if not isinstance(node_selector, Mapping) or any(
            not isinstance(k, str) or not isinstance(v, str) for k, v in node_selector.items()
        ):
            raise ValueError(f"gang {self.key}: node_selector must map strings to strings")
        object.__setattr__(self, "node_selector", Map(node_selector))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))
        if type(self.priority) is not int:
            raise TypeError(f"gang {self.key}: priority must be an int")
        if not isinstance(self.submitted_at, int | float) or not math.isfinite(self.submitted_at):
            raise ValueError(f"gang {self.key}: submitted_at must be a finite number")
        excluded = self.excluded_clusters
        if not isinstance(excluded, Mapping) or any(
            not isinstance(k, str) or not isinstance(v, int | float) or not math.isfinite(v) for k, v in excluded.items()
        ):
            raise ValueError(f"gang {self.key}: excluded_clusters must map cluster names to finite times")
        object.__setattr__(self, "excluded_clusters", Map(excluded))
        nodes = self.excluded_nodes
        if not isinstance(nodes, Mapping) or any(
            not isinstance(k, str) or not isinstance(v, frozenset | set | tuple | list)
            or any(not isinstance(n, str) or not n for n in v) for k, v in nodes.items()
        ):
            raise ValueError(f"gang {self.key}: excluded_nodes must map cluster names to sets of node names")
        object.__setattr__(self, "excluded_nodes", Map({k: frozenset(v) for k, v in nodes.items() if v}))
        if not isinstance(self.queue, str) or len(self.queue) > _MAX_NAME:
            raise ValueError(f"gang {self.key}: queue must be a string of at most {_MAX_NAME} characters")
        object.__setattr__(self, "tiers", tuple(self.tiers))
        if any(not isinstance(t, ClusterTier) for t in self.tiers):
            raise TypeError(f"gang {self.key}: tiers must be ClusterTiers")
        object.__setattr__(self, "spot", SpotPolicy(self.spot))
        if self.over_budget is not None and not isinstance(self.over_budget, BudgetExceeded):
            raise TypeError(f"gang {self.key}: over_budget must be a BudgetExceeded or None")
        object.__setattr__(self, "cluster_names", frozenset(self.cluster_names))
        if any(not isinstance(n, str) or not n for n in self.cluster_names):
            raise ValueError(f"gang {self.key}: cluster_names must be non-empty strings")
        object.__setattr__(self, "required_terms", tuple(self.required_terms))
        object.__setattr__(self, "preferred_terms", tuple(self.preferred_terms))
        if any(not isinstance(t, LabelSelector) for t in self.required_terms) or any(
                not isinstance(t, tuple) or len(t) != 2 or type(t[0]) is not int or not 1 <= t[0] <= 100
                or not isinstance(t[1], LabelSelector) for t in self.preferred_terms):
            raise ValueError(f"gang {self.key}: affinity terms must be LabelSelectors (preferred: weight 1..100)")
        since = self.waiting_since
        if since is not None and (isinstance(since, bool) or not isinstance(since, int | float)
                                  or not math.isfinite(since)):
            raise ValueError(f"gang {self.key}: waiting_since must be a finite number or None")
        pod_count = sum(role.replicas for role in roles)
        most = sum(role.high for role in roles)
        if most > MAX_GANG_PODS:
            what = "pods" if most == pod_count else "pods at max_replicas"
            raise ValueError(f"gang {self.key}: {most} {what} exceeds the limit of {MAX_GANG_PODS}")
        steps = max(role.high - role.low for role in roles)
        object.__setattr__(self, "elastic", steps > 0)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "pods_range", (sum(role.low for role in roles), most))
        object.__setattr__(self, "_sized", {})
        object.__setattr__(self, "pod_count", pod_count)
        fit_order = tuple(sorted(roles, key=_fit_order_key))
        object.__setattr__(self, "fit_order", fit_order)
        object.__setattr__(self, "ranges", tuple((role.low, role.high) for role in fit_order))
        object.__setattr__(
            self,
            "shape",
            tuple(
                (r.name, r.replicas, r.requests.cpu_milli, r.requests.memory, r.requests.gpu, r.requests.rdma)
                for r in fit_order
            ),
        )
        total = Resources()
        for role in roles:
            total = total + role.requests.times(role.replicas)
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "rdma_pod_count", sum(r.replicas for r in roles if r.requests.rdma > 0))

    @property
    def needs_gpu(self) -> bool:
        return self.total.gpu > 0

    # ------------------------------------------------------------ elastic sizes

    def counts(self, step: int) -> dict[str, int]:
        """Pods of each role at `step` (0 = every role at its minimum, `steps` = at its maximum)."""
        if type(step) is not int or not 0 <= step <= self.steps:
            raise ValueError(f"gang {self.key}: size step must be an int in 0..{self.steps}, got {step!r}")
        if not self.elastic:
            return {role.name: role.replicas for role in self.roles}
        return {role.name: role.low + step * (role.high - role.low) // self.steps for role in self.roles}

    def sized(self, step: int) -> GangRequest:
        """The gang at `step`: a fixed gang (min = replicas = max for every role) with the same identity."""
        known = self._sized.get(step)
        if known is not None:
            return known
        if not self.elastic:
            self.counts(step)  # validates: only step 0 exists
            return self
        counts = self.counts(step)
        fixed = replace(self, roles=tuple(role.fixed(counts[role.name]) for role in self.roles))
        if len(self._sized) < 64:
            self._sized[step] = fixed
        return fixed

    @property
    def minimum(self) -> GangRequest:
        """The gang at its minimum size (itself for a fixed gang)."""
        return self.sized(0)

    @property
    def maximum(self) -> GangRequest:
        """The gang at its maximum size (itself for a fixed gang)."""
        return self.sized(self.steps)

    def range_pods(self) -> tuple[int, int]:
        """(pods at the minimum, pods at the maximum)."""
        return self.pods_range

    def resized(self, replicas: Mapping[str, int]) -> GangRequest:
        """The gang with exactly these pods per role (a fixed gang), e.g. what a Decision chose or what runs now.

        Every role must be given, within its [min_replicas, max_replicas].
        """
        if not isinstance(replicas, Mapping) or set(replicas) != {role.name for role in self.roles}:
            raise ValueError(f"gang {self.key}: replicas must name every role exactly once, got {dict(replicas)!r}")
        for role in self.roles:
            count = replicas[role.name]
            if type(count) is not int or not role.low <= count <= role.high:
                raise ValueError(
                    f"gang {self.key}: role {role.name!r} must have {role.low}..{role.high} replicas, got {count!r}"
                )
        if all(replicas[role.name] == role.replicas for role in self.roles) and not self.elastic:
            return self
        return replace(self, roles=tuple(role.fixed(replicas[role.name]) for role in self.roles))

    def tier_of(self, labels: Mapping[str, str]) -> int | None:
        """The index of the first tier whose selector matches a cluster's labels; None: in no tier."""
        for index, tier in enumerate(self.tiers):
            if tier.selector.matches(labels):
                return index
        return None

    def open_tiers(self, now: float) -> tuple[int, float]:
        """(how many tiers are open at `now`, how long the gang has waited): tier k+1 opens once the gang has
        waited the spill_after_seconds of tiers 0..k together."""
        waited = max(0.0, now - (self.submitted_at if self.waiting_since is None else self.waiting_since))
        opened, threshold = 1, 0.0
        for tier in self.tiers[:-1]:
            threshold += tier.spill_after_seconds
            if waited < threshold:
                break
            opened += 1
        return min(opened, len(self.tiers)), waited

    def tolerates(self, taints: tuple[Taint, ...]) -> bool:
        """True if every taint that blocks scheduling is tolerated by one of the gang's tolerations."""
        for taint in taints:
            if taint.blocks_scheduling and not any(t.tolerates(taint) for t in self.tolerations):
                return False
        return True

    def describe_size(self, gpu_model: str | None = None) -> str:
        """E.g. "8 pods of 8 A100 GPUs with RDMA" for a one-role gang, "10 pods, 32 A100 GPUs" otherwise."""
        model = f"{gpu_model} " if gpu_model else ""
        rdma = " with RDMA" if self.total.rdma else ""
        if len(self.roles) == 1:
            role = self.roles[0]
            if role.requests.gpu:
                return f"{role.replicas} pods of {role.requests.gpu} {model}GPUs{rdma}"
            return f"{role.replicas} pods of {role.requests.describe()}"
        return f"{self.pod_count} pods, {self.total.gpu} {model}GPUs{rdma}"
