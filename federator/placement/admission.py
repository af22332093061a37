"""Admission: GPU quota per queue, borrowing within a cohort, fair share across queues.

Placement's own terms; callers build them from the hub's Queue objects and
from the gangs that run (placement never sees API types):
- `QueueQuota`: a queue's nominal quota (GPUs per model, optional cpu and
  memory), its cohort, how much it may borrow, its fair-share weight and its
  preemption policy.
- `RunningGang`: a gang that holds quota and room: placed or running, not
  finished, not being evicted. Its `demand` is charged to its queue; its
  per-node `amounts` are what preemption can free. An elastic one may also
  list its `pods` (`RunningPod`: name, role, node, requests, start time)
  and its `request` (the GangRequest with the roles' ranges): then its
  pods above the minimum (`removable`, newest first) are what a preemption
  can shrink it by, and `growth` can add up to the maximum.
- `QuotaLedger`: the usage of every queue during one cycle: the running
  gangs, plus what the cycle admits, minus what it evicts.

Rules (federation-wide: a queue's 64 A100s may sit in any member cluster):
- Charging. A gang's demand is its total requests: its GPUs are charged to
  the GPU model it is placed on, its cpu and memory as such. A gang that
  accepts several models is admitted for each model its queue has room for,
  and placement considers only those (the "quota" filter narrows the models
  to try, own-quota models before borrowed ones).
- Room, per resource the gang asks (GPUs of one model, cpu, memory): own
  room if used + held + demand <= nominal; else borrowed room if the queue
  has a cohort, the cohort's used + held + demand <= the cohort's nominal
  total (idle quota of the other queues), and what the queue borrows stays
  within its borrowing limit. A model the queue lists no quota for has
  nominal 0 (it can only borrow); cpu or memory without a nominal is not
  limited (and not lent). A borrowing limit limits what it lists; no limit
  at all means any idle quota of the cohort may be borrowed.
- A gang whose queue has no room is not placed (it stays pending with a
  `QuotaBlock`: "queue vision uses 96 of 96 A100 GPUs (cohort research
  lends 0); waits for 8"). A gang with no queue ("") has no quota.
- Fair share. When several queues wait, the next gang comes from the queue
  with the lowest weighted dominant share: for each resource the queue has
  a nominal quota of, used / nominal (so a queue at its nominal quota has
  share 1 whatever its size: quota is the entitlement, DRF over it);
  borrowing a resource it has no nominal of gives share infinity; the
  largest of these divided by its weight. Shares count the gangs admitted
  earlier in the same cycle. Ties: the head's priority, submission time,
  key. Within a queue: priority, then submission time (`cycle.queue_order`).
  The lane of gangs with no queue has share 0.
- Holds and quota. A gang holding nodes (the head-of-line rule of `cycle`)
  also holds its demand in its queue's quota, and an aged gang (waiting
  `hold_after_seconds`) that its queue cannot admit holds its demand in the
  quota (at most one per queue, never one its queue can never admit), so
  that smaller gangs behind it in its queue cannot take what frees up
  first. Held quota counts as used for every check but not for fair share.

Pure: no I/O, no clocks; the ledger is scratch of one cycle and never
changes its inputs.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from immutables import Map

from federator.apis.quantity import format_bytes, format_cpu
from federator.placement.decision import QuotaBlock, VictimReason
from federator.placement.gang import ClusterTier, GangRequest
from federator.placement.resources import Resources

__all__ = [
    "QUEUE_NOT_FOUND",
    "QUOTA_EXCEEDED",
    "Admission",
    "EvictionRank",
    "FairQueue",
    "QueueQuota",
    "QueueUsage",
    "QuotaAmounts",
    "QuotaLedger",
    "RoomTerm",
    "RunningGang",
    "RunningPod",
    "WithinQueue",
]

QUOTA_EXCEEDED = "QuotaExceeded"
QUEUE_NOT_FOUND = "QueueNotFound"
_MAX_NAME = 253

# A candidate's place in the eviction order (`QuotaLedger.eviction_rank`): (0 if borrowed else 1, priority,
# GPU-seconds its eviction loses (0 when not ranked by loss), -started_at, uid); smaller goes first.
EvictionRank = tuple[int, int, float, float, str]

# ("gpu", model) | ("cpu", "") | ("memory", "")
ResourceKey = tuple[str, str]
_CPU: ResourceKey = ("cpu", "")
_MEMORY: ResourceKey = ("memory", "")


class WithinQueue(StrEnum):
    """May a gang evict gangs of its own queue? LowerPriority: those of strictly lower priority."""

    LOWER_PRIORITY = "LowerPriority"
    NEVER = "Never"


def _check_name(value: object, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or len(value) > _MAX_NAME or (not value and not empty):
        raise ValueError(f"{what} must be a string of {0 if empty else 1}-{_MAX_NAME} characters, got {value!r}")
    return value


def _check_count(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be a non-negative int, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class QuotaAmounts:
    """GPUs per model, and optionally cpu (millicores) and memory (bytes); None = not limited/listed."""

    gpus: Mapping[str, int] = field(default_factory=Map)
    cpu_milli: int | None = None
    memory: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, Mapping):
            raise TypeError("quota gpus must map GPU models to counts")
        for model, count in self.gpus.items():
            _check_name(model, "quota GPU model")
            _check_count(count, f"quota of {model} GPUs")
        object.__setattr__(self, "gpus", Map(self.gpus))
        for name in ("cpu_milli", "memory"):
            value = getattr(self, name)
            if value is not None:
                _check_count(value, f"quota {name}")

    def get(self, key: ResourceKey) -> int | None:
        if key == _CPU:
            return self.cpu_milli
        if key == _MEMORY:
            return self.memory
        return self.gpus.get(key[1])


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """One queue, in placement's terms (built by callers from a Queue object)."""

    name: str
    nominal: QuotaAmounts = field(default_factory=QuotaAmounts)
    cohort: str = ""
    # None: may borrow any idle quota of its cohort; else limits what it lists.
    borrowing_limit: QuotaAmounts | None = None
    weight: float = 1.0
    within_queue: WithinQueue = WithinQueue.NEVER
    # May take back its nominal quota by evicting gangs other queues of its cohort run on borrowed quota.
    reclaim_borrowed: bool = False
    # The spill-over order of its gangs across clusters (() : anywhere); the "tier" filter and score read it
    # from the GangRequest, which the caller builds with these.
    tiers: tuple[ClusterTier, ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.name, "queue name")
        _check_name(self.cohort, f"queue {self.name}: cohort", empty=True)
        if not isinstance(self.nominal, QuotaAmounts):
            raise TypeError(f"queue {self.name}: nominal must be QuotaAmounts")
        if self.borrowing_limit is not None and not isinstance(self.borrowing_limit, QuotaAmounts):
            raise TypeError(f"queue {self.name}: borrowing_limit must be QuotaAmounts or None")
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"queue {self.name}: weight must be a positive finite number, got {weight!r}")
        object.__setattr__(self, "within_queue", WithinQueue(self.within_queue))
        if type(self.reclaim_borrowed) is not bool:
            raise TypeError(f"queue {self.name}: reclaim_borrowed must be a bool")
        object.__setattr__(self, "tiers", tuple(self.tiers))
        if any(not isinstance(t, ClusterTier) for t in self.tiers):
            raise TypeError(f"queue {self.name}: tiers must be ClusterTiers")

    def nominal_of(self, key: ResourceKey) -> int | None:
        """Nominal quota of one resource; GPUs of an unlisted model: 0; cpu/memory unset: None (unlimited)."""
        value = self.nominal.get(key)
        if value is None and key[0] == "gpu":
            return 0
        return value

    def limit_of(self, key: ResourceKey) -> int | None:
        return None if self.borrowing_limit is None else self.borrowing_limit.get(key)


@dataclass(frozen=True, slots=True)
class RunningPod:
    """One pod of a running gang: its member name, role, index, node, what it requests and when it started."""

    name: str
    role: str
    node: str
    requests: Resources
    started_at: float
    index: int = 0

    def __post_init__(self) -> None:
        _check_name(self.name, "running pod name")
        _check_name(self.role, f"running pod {self.name}: role")
        _check_name(self.node, f"running pod {self.name}: node")
        if not isinstance(self.requests, Resources):
            raise TypeError(f"running pod {self.name}: requests must be Resources")
        started = self.started_at
        if isinstance(started, bool) or not isinstance(started, int | float) or not math.isfinite(started):
            raise ValueError(f"running pod {self.name}: started_at must be a finite number")
        _check_count(self.index, f"running pod {self.name}: index")

    @property
    def age_rank(self) -> tuple[float, int, str, str]:
        """Sorts the newest first: latest start, then highest index, then role and name (descending)."""
        return (-float(self.started_at), -self.index, self.role, self.name)


@dataclass(frozen=True, slots=True)
class RunningGang:
    """A gang that holds quota and room: placed or running, not finished, not being evicted.

    Built by callers from the job (queue, priority, demand, model, whether it
    was admitted on borrowed quota: `Decision.borrowed`) and from the member
    pods (`amounts`: node -> what its pods hold there now, in `cluster`).

    Elastic gangs (optional, compatible: both default to nothing): `pods`
    lists its member pods, and `request` is its GangRequest (the roles'
    min_replicas / max_replicas, what a pod asks, where pods may go). With
    `pods`, `amounts` may be left empty (it is their sum per node) or must
    equal that sum. `removable` is derived: per role, the pods beyond its
    min_replicas, the newest first (by start time, then index), all roles
    merged newest first: the only pods a preemption may take from it, in
    that order. Without an elastic `request` and `pods`, nothing is removable.

    `checkpointed_at` (default None: never): when its current copy last reported
    a checkpoint (the caller reads it from the job's status; a report of an
    earlier copy is not this copy's). Work since `unsaved_since` (that time,
    or `started_at` if later or absent) is what an eviction loses:
    `lost_gpu_seconds(now)` is its GPUs times the seconds since then. Among
    candidates of equal priority, preemption evicts the smallest loss first
    (`QuotaLedger.eviction_rank`); `now` comes from the caller.

    `fixed` (default ""): why the gang keeps the size it was placed at although its
    request is elastic (the caller knows: the member's own operator runs it and
    cannot resize it in place, e.g. a JobSet, whose replicatedJobs are immutable
    while it runs). Then nothing is removable (a preemption evicts it whole or not
    at all) and `growth.plan_growth` holds it back with that reason.
    """

    uid: str
    key: str
    cluster: str
    queue: str
    priority: int
    started_at: float
    demand: Resources
    gpu_model: str | None = None
    amounts: Mapping[str, Resources] = field(default_factory=Map)
    borrowed: bool = False
    pods: tuple[RunningPod, ...] = ()
    request: GangRequest | None = None
    fixed: str = ""
    checkpointed_at: float | None = None
    # Derived: pods above the minimum, newest first (see the class docstring).
    removable: tuple[RunningPod, ...] = field(init=False, compare=False, repr=False)
    # Derived: some of its pods hold no GPU (they may sit on nodes of any model).
    has_gpu_free_pods: bool = field(init=False, compare=False, repr=False)
    # Derived: since when its work is not saved (the later of its start and its last checkpoint).
    unsaved_since: float = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_name(self.uid, "running gang uid")
        _check_name(self.key, f"running gang {self.uid}: key")
        _check_name(self.cluster, f"running gang {self.key}: cluster")
        _check_name(self.queue, f"running gang {self.key}: queue", empty=True)
        if type(self.priority) is not int:
            raise TypeError(f"running gang {self.key}: priority must be an int")
        started = self.started_at
        if isinstance(started, bool) or not isinstance(started, int | float) or not math.isfinite(started):
            raise ValueError(f"running gang {self.key}: started_at must be a finite number")
        if not isinstance(self.demand, Resources):
            raise TypeError(f"running gang {self.key}: demand must be Resources")
        if self.gpu_model is not None:
            _check_name(self.gpu_model, f"running gang {self.key}: gpu_model")
        elif self.demand.gpu:
            raise ValueError(f"running gang {self.key}: a gang with GPUs needs the gpu_model it is charged to")
        amounts = self.amounts
        if not isinstance(amounts, Mapping) or not all(
            isinstance(node, str) and isinstance(amount, Resources) for node, amount in amounts.items()
        ):
            raise TypeError(f"running gang {self.key}: amounts must map node names to Resources")
        pods = tuple(self.pods)
        object.__setattr__(self, "pods", pods)
        if type(self.fixed) is not str:
            raise TypeError(f"running gang {self.key}: fixed must be a str")
        removable: tuple[RunningPod, ...] = ()
        if pods:
            amounts = self._check_pods(pods, amounts)
            removable = () if self.fixed else self._removable(pods)
        object.__setattr__(self, "amounts", Map(amounts))
        object.__setattr__(self, "removable", removable)
        object.__setattr__(self, "has_gpu_free_pods", any(not amount.gpu for amount in amounts.values()))
        if type(self.borrowed) is not bool:
            raise TypeError(f"running gang {self.key}: borrowed must be a bool")
        saved = self.checkpointed_at
        if saved is not None and (
            isinstance(saved, bool) or not isinstance(saved, int | float) or not math.isfinite(saved)
        ):
            raise ValueError(f"running gang {self.key}: checkpointed_at must be a finite number or None")
        since = float(started) if saved is None else max(float(started), float(saved))
        object.__setattr__(self, "unsaved_since", since)

    def lost_gpu_seconds(self, now: float) -> float:
        """GPU-seconds of work an eviction at `now` loses: its GPUs times the seconds since `unsaved_since`."""
        return self.demand.gpu * max(0.0, now - self.unsaved_since)

    def _check_pods(self, pods: tuple[RunningPod, ...], amounts: Mapping[str, Resources]) -> Mapping[str, Resources]:
        """Validate `pods` (and `request`) and return the per-node amounts (their sum, which `amounts` must equal)."""
        request = self.request
        if request is not None:
            if not isinstance(request, GangRequest):
                raise TypeError(f"running gang {self.key}: request must be a GangRequest")
            if request.uid != self.uid:
                raise ValueError(f"running gang {self.key}: request is for gang {request.uid!r}, not {self.uid!r}")
        roles = {role.name for role in request.roles} if request is not None else None
        summed: dict[str, Resources] = {}
        names: set[str] = set()
        for pod in pods:
            if not isinstance(pod, RunningPod):
                raise TypeError(f"running gang {self.key}: pods must be RunningPod values, got {pod!r}")
            if pod.name in names:
                raise ValueError(f"running gang {self.key}: pod {pod.name!r} is listed twice")
            names.add(pod.name)
            if roles is not None and pod.role not in roles:
                raise ValueError(f"running gang {self.key}: pod {pod.name!r} has role {pod.role!r}, not one of its roles")
            previous = summed.get(pod.node)
            summed[pod.node] = pod.requests if previous is None else previous + pod.requests
        if amounts and dict(amounts) != summed:
            raise ValueError(f"running gang {self.key}: amounts must be the sum of its pods' requests per node")
        return summed

    def _removable(self, pods: tuple[RunningPod, ...]) -> tuple[RunningPod, ...]:
        request = self.request
        if request is None or not request.elastic:
            return ()
        out: list[RunningPod] = []
        for role in request.roles:
            mine = sorted((pod for pod in pods if pod.role == role.name), key=lambda pod: pod.age_rank)
            extra = len(mine) - role.low
            if extra > 0:
                out.extend(mine[:extra])  # newest first
        out.sort(key=lambda pod: pod.age_rank)
        return tuple(out)

    def replicas(self) -> dict[str, int]:
        """Pods per role now (from `pods`; every role of `request` listed, 0 if none runs)."""
        counts = {role.name: 0 for role in self.request.roles} if self.request is not None else {}
        for pod in self.pods:
            counts[pod.role] = counts.get(pod.role, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What a queue uses (for its status): used, of which borrowed (above nominal), and admitted gangs."""

    queue: str
    used: QuotaAmounts
    borrowed: QuotaAmounts
    gangs: int


@dataclass(frozen=True, slots=True)
class Admission:
    """What a gang's queue admits in this cycle.

    `models`: the GPU models it has room for, own-quota models first (() for
    a gang without GPUs); `own`: those within its nominal quota; `borrowing`:
    a GPU-less gang admitted only by borrowing. When not admitted, `block`
    says why and `never` whether it ever can be.
    """

    queue: str
    admitted: bool
    models: tuple[str, ...] = ()
    own: frozenset[str] = frozenset()
    borrowing: bool = False
    # Some model the gang accepts was left out for lack of quota.
    narrowed: bool = False
    block: QuotaBlock | None = None
    never: bool = False
    # Elastic gangs (admitted at their minimum): model ("" for a gang without GPUs) -> the largest size step
    # its queue has room for there. Within nominal quota on an own-quota model: an elastic gang does not
    # borrow to grow. Empty for a fixed-size gang.
    max_step: Mapping[str, int] = field(default_factory=Map)

    def borrows(self, model: str | None) -> bool:
        """Would a placement on `model` run on borrowed quota?"""
        if model is None:
            return self.borrowing
        return model not in self.own


@dataclass(frozen=True, slots=True)
class _Verdict:
    ok: bool
    borrowing: bool = False
    never: bool = False
    text: str = ""
    numbers: Mapping[str, int | float] = field(default_factory=Map)


NO_ROOM, OWN_ROOM, BORROWED_ROOM = 0, 1, 2
_NO_USAGE: Counter[ResourceKey] = Counter()  # read only: the usage of a queue nothing is charged to


@dataclass(frozen=True, slots=True)
class RoomTerm:
    """One resource a gang asks, as its queue's quota stands now: everything the room rule reads.

    `room` is the rule (module docstring, "Room"), in one place: admission,
    `fits_after` and the preemption planner (which sums what its candidate
    victims would free, per term, without asking the ledger again) all use it.
    """

    key: ResourceKey
    demand: int
    nominal: int
    used: int
    held: int
    limit: int | None
    # None: the queue has no cohort.
    cohort_nominal: int | None
    cohort_load: int

    def room(self, removed_queue: int = 0, removed_cohort: int = 0, *, own_only: bool = False) -> int:
        """NO_ROOM, OWN_ROOM or BORROWED_ROOM once gangs charging `removed_*` of it are gone."""
        taken = self.used - removed_queue + self.held + self.demand
        if taken <= self.nominal:
            return OWN_ROOM
        if self.cohort_nominal is not None and not own_only:
            within_limit = self.limit is None or taken - self.nominal <= self.limit
            if within_limit and self.cohort_load - removed_cohort + self.demand <= self.cohort_nominal:
                return BORROWED_ROOM
        return NO_ROOM


def _demand_keys(model: str | None, demand: Resources) -> list[tuple[ResourceKey, int]]:
    keys: list[tuple[ResourceKey, int]] = []
    if demand.gpu and model is not None:
        keys.append((("gpu", model), demand.gpu))
    if demand.cpu_milli:
        keys.append((_CPU, demand.cpu_milli))
    if demand.memory:
        keys.append((_MEMORY, demand.memory))
    return keys


def _amount_text(key: ResourceKey, amount: int) -> str:
    if key == _CPU:
        return f"{format_cpu(amount)} cpu"
    if key == _MEMORY:
        return f"{format_bytes(amount)} memory"
    return f"{amount} {key[1]} GPUs"


def _bare(key: ResourceKey, amount: int) -> str:
    if key == _CPU:
        return format_cpu(amount)
    if key == _MEMORY:
        return format_bytes(amount)
    return str(amount)


class QuotaLedger:
    """Usage of every queue during one cycle; see the module docstring for the rules.

    Scratch of one cycle (like nodefit's packing scratch): it changes as the
    cycle admits (`charge`), holds (`hold`) and evicts (`evict`), and never
    touches its inputs.
    """

    def __init__(
        self,
        queues: Mapping[str, QueueQuota],
        running: Iterable[RunningGang],
        *,
        models: Iterable[str] = (),
        lost_work_at: float | None = None,
    ) -> None:
        if not isinstance(queues, Mapping):
            raise TypeError("queues must map queue names to QueueQuota")
        for name, queue in queues.items():
            if not isinstance(queue, QueueQuota):
                raise TypeError(f"queue {name!r} is not a QueueQuota")
            if queue.name != name:
                raise ValueError(f"queue stored under {name!r} is named {queue.name!r}")
        self._queues: dict[str, QueueQuota] = dict(queues)
        self._models = tuple(sorted(set(models)))
        at = lost_work_at
        if at is not None and (isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at)):
            raise ValueError(f"lost_work_at must be a finite number or None, got {lost_work_at!r}")
        self._lost_work_at = lost_work_at
        # uid -> its eviction rank (`eviction_rank`), computed when first asked.
        self._ranks: dict[str, EvictionRank] = {}
        self._used: dict[str, Counter[ResourceKey]] = {}
        self._held: dict[str, Counter[ResourceKey]] = {}
        self._quota_holder: dict[str, str] = {}
        self._gangs: Counter[str] = Counter()
        self._cohort_nominal: dict[str, Counter[ResourceKey]] = {}
        # Per cohort: used + held by its queues (of what each limits).
        self._cohort_load: dict[str, Counter[ResourceKey]] = {}
        self._everyone: list[RunningGang] = []
        self._by_cluster_index: dict[str, list[RunningGang]] | None = None
        # cluster -> queue -> its running gangs there, by priority (built on first use).
        self._by_cluster_queue: dict[str, dict[str, list[RunningGang]]] = {}
        # (cluster, queue, below priority or -1 for borrowed ones, models) -> candidates there, not evicted.
        self._lower_cache: dict[tuple[str, str, int, tuple[str, ...]], list[RunningGang]] = {}
        # (cluster, queue, priority, models) -> `_sources` (cleared with the lists on an eviction there).
        self._source_cache: dict[
            tuple[str, str, int, tuple[str, ...]], list[tuple[list[RunningGang], VictimReason]]
        ] = {}
        # (id of a cached list, resource) -> (that list, what its gangs are charged of the resource).
        self._taken_memo: dict[tuple[int, ResourceKey], tuple[list[RunningGang], int]] = {}
        # cluster -> queue -> its gangs there admitted on borrowed quota (built with `_queues_in`).
        self._borrowed_in: dict[str, dict[str, list[RunningGang]]] = {}
        self._evicted: set[str] = set()
        # Queues whose share went down (evictions) since the fair order last looked.
        self.dirty: set[str] = set()
        # Bumped by every change of usage (charge, hold, evict): the key of `_room_memo`.
        self._version = 0
        self._room_memo: dict[tuple[int, str, Resources, str | None, bool], bool] = {}
        for queue in self._queues.values():
            if queue.cohort:
                total = self._cohort_nominal.setdefault(queue.cohort, Counter())
                for model, count in queue.nominal.gpus.items():
                    total[("gpu", model)] += count
                if queue.nominal.cpu_milli is not None:
                    total[_CPU] += queue.nominal.cpu_milli
                if queue.nominal.memory is not None:
                    total[_MEMORY] += queue.nominal.memory
                self._cohort_load.setdefault(queue.cohort, Counter())
        # One tight pass (a federation runs thousands of gangs, and a cycle builds this anew): one dict
        # update per gang; the per-cluster index is built only if preemption asks for it.
        everyone: list[RunningGang] = []
        uids: set[str] = set()
        sums: dict[tuple[str, str | None], list[int]] = {}
        # Clusters where some running gang of a queue has pods above its minimum (preemption may shrink it).
        self._shrinkable: set[str] = set()
        for gang in running:
            if type(gang) is not RunningGang:
                raise TypeError(f"{gang!r} is not a RunningGang")
            everyone.append(gang)
            uids.add(gang.uid)
            if gang.removable and gang.queue:
                self._shrinkable.add(gang.cluster)
            if gang.queue:
                slot = sums.get((gang.queue, gang.gpu_model))
                demand = gang.demand
                if slot is None:
                    sums[(gang.queue, gang.gpu_model)] = [demand.gpu, demand.cpu_milli, demand.memory, 1]
                else:
                    slot[0] += demand.gpu
                    slot[1] += demand.cpu_milli
                    slot[2] += demand.memory
                    slot[3] += 1
        if len(uids) != len(everyone):
            seen: set[str] = set()
            for gang in everyone:
                if gang.uid in seen:
                    raise ValueError(f"running gang uid {gang.uid!r} appears twice")
                seen.add(gang.uid)
        self._everyone = everyone
        used: dict[str, dict[ResourceKey, int]] = {}
        for (queue_name, charged), (gpus, cpu, memory, count) in sums.items():
            account = used.setdefault(queue_name, {})
            if gpus and charged is not None:
                account[("gpu", charged)] = account.get(("gpu", charged), 0) + gpus
            if cpu:
                account[_CPU] = account.get(_CPU, 0) + cpu
            if memory:
                account[_MEMORY] = account.get(_MEMORY, 0) + memory
            self._gangs[queue_name] += count
        for queue_name, account in used.items():
            self._used[queue_name] = Counter(account)
            quota = self._queues.get(queue_name)
            if quota is not None and quota.cohort:
                load = self._cohort_load[quota.cohort]
                for key, amount in account.items():
                    if quota.nominal_of(key) is not None:
                        load[key] += amount

    # ------------------------------------------------------------ eviction order

    def eviction_rank(self, gang: RunningGang) -> EvictionRank:
        """Where a candidate stands in the order preemption evicts in (smaller goes first).

        Borrowed first, then the lowest priority; among equal priority (with `lost_work_at`, the
        cycle's now) the fewest GPU-seconds its eviction loses (`RunningGang.lost_gpu_seconds`: work
        since its last checkpoint, or since its start if it has none); then the most recently started,
        then uid. Without `lost_work_at` every loss counts as 0: the order before checkpoints existed.
        Remembered per uid for the cycle (a shrink's part of a gang ranks as the gang).
        """
        rank = self._ranks.get(gang.uid)
        if rank is None:
            at = self._lost_work_at
            lost = gang.lost_gpu_seconds(at) if at is not None else 0.0
            rank = (0 if gang.borrowed else 1, gang.priority, lost, -float(gang.started_at), gang.uid)
            self._ranks[gang.uid] = rank
        return rank

    def _entry_rank(self, entry: tuple[RunningGang, VictimReason]) -> EvictionRank:
        return self.eviction_rank(entry[0])

    # ------------------------------------------------------------ bookkeeping

    def _add(
        self, table: dict[str, Counter[ResourceKey]], queue: str, model: str | None, demand: Resources, sign: int
    ) -> None:
        self._version += 1
        account = table.setdefault(queue, Counter())
        quota = self._queues.get(queue)
        cohort = self._cohort_load.get(quota.cohort) if quota is not None and quota.cohort else None
        for key, amount in _demand_keys(model, demand):
            account[key] += sign * amount
            # cpu/memory of a queue that does not limit them are neither lent nor counted against its cohort.
            if cohort is not None and quota is not None and quota.nominal_of(key) is not None:
                cohort[key] += sign * amount

    def charge(self, gang: GangRequest, model: str | None) -> None:
        """A gang of this cycle was admitted and placed (or made room for) on `model`."""
        if gang.queue:
            self._add(self._used, gang.queue, model, gang.total, +1)
            self._gangs[gang.queue] += 1

    def hold(self, gang: GangRequest, model: str | None, *, quota_hold: bool = False) -> None:
        """Hold the gang's demand in its queue's quota for the rest of the cycle (see "Holds and quota")."""
        if gang.queue:
            self._add(self._held, gang.queue, model, gang.total, +1)
            if quota_hold:
                self._quota_holder[gang.queue] = gang.key

    def holds_quota(self, queue: str) -> bool:
        return queue in self._quota_holder

    def hold_model(self, gang: GangRequest) -> str | None:
        """The GPU model a quota hold is charged to: of the models the gang accepts, its queue's largest quota."""
        if not gang.needs_gpu:
            return None
        quota = self._queues.get(gang.queue)
        models = gang.gpu_models or self._models
        if quota is None or not models:
            return None
        return min(enumerate(models), key=lambda entry: (-quota.nominal.gpus.get(entry[1], 0), entry[0]))[1]

    def evict(self, victim: RunningGang) -> None:
        """A running gang is being evicted in this cycle: its quota is free, and it is no victim again."""
        if victim.uid in self._evicted:
            return
        self._evicted.add(victim.uid)
        for key in [key for key in self._lower_cache if key[0] == victim.cluster]:
            del self._lower_cache[key]
        for source_key in [key for key in self._source_cache if key[0] == victim.cluster]:
            del self._source_cache[source_key]
        if victim.queue:
            self._add(self._used, victim.queue, victim.gpu_model, victim.demand, -1)
            self._gangs[victim.queue] -= 1
            self.dirty.add(victim.queue)

    def shrink(self, victim: RunningGang, removed: Sequence[RunningPod]) -> None:
        """A running elastic gang gives up these pods in this cycle: their quota is free, and it is no
        candidate again in this cycle (its pods are still in the snapshot until they are gone)."""
        if victim.uid in self._evicted:
            return
        freed = Resources()
        for pod in removed:
            freed = freed + pod.requests
        self.evict(victim)  # no candidate again: drops it from the cached lists, and its whole demand...
        if victim.queue:
            # ...of which all but the freed pods is charged again.
            self._add(self._used, victim.queue, victim.gpu_model, victim.demand.minus_clamped(freed), +1)
            self._gangs[victim.queue] += 1

    def has_shrinkable(self, cluster: str) -> bool:
        """Does some running gang of a queue in `cluster` have pods above its minimum?"""
        return cluster in self._shrinkable

    def queue(self, name: str) -> QueueQuota | None:
        return self._queues.get(name)

    def running_in(self, cluster: str) -> list[RunningGang]:
        """Running gangs of one cluster, not evicted in this cycle."""
        return [g for g in self._by_cluster.get(cluster, ()) if g.uid not in self._evicted]

    def _queues_in(self, cluster: str) -> dict[str, list[RunningGang]]:
        table = self._by_cluster_queue.get(cluster)
        if table is None:
            table = {}
            borrowed: dict[str, list[RunningGang]] = {}
            for gang in self._by_cluster.get(cluster, ()):
                if gang.queue:
                    table.setdefault(gang.queue, []).append(gang)
                    if gang.borrowed:
                        borrowed.setdefault(gang.queue, []).append(gang)
            for group in table.values():
                group.sort(key=_priority)
            self._by_cluster_queue[cluster] = table
            self._borrowed_in[cluster] = borrowed
        return table

    @property
    def _by_cluster(self) -> dict[str, list[RunningGang]]:
        if self._by_cluster_index is None:
            index: dict[str, list[RunningGang]] = {}
            for gang in self._everyone:
                group = index.get(gang.cluster)
                if group is None:
                    index[gang.cluster] = [gang]
                else:
                    group.append(gang)
            self._by_cluster_index = index
        return self._by_cluster_index

    # ------------------------------------------------------------ room

    def _term(self, quota: QueueQuota, key: ResourceKey, demand: int) -> RoomTerm | None:
        """The room rule's numbers for one resource of a gang of this queue; None if it is not limited."""
        nominal = quota.nominal_of(key)
        if nominal is None:
            return None
        cohort = quota.cohort
        return RoomTerm(
            key=key,
            demand=demand,
            nominal=nominal,
            used=self._used.get(quota.name, _NO_USAGE)[key],
            held=self._held.get(quota.name, _NO_USAGE)[key],
            limit=quota.limit_of(key),
            cohort_nominal=self._cohort_nominal[cohort][key] if cohort else None,
            cohort_load=self._cohort_load[cohort][key] if cohort else 0,
        )

    def room_terms(self, gang: GangRequest, model: str | None) -> list[RoomTerm]:
        """The limited resources the gang asks of its queue on `model`, as they stand now."""
        quota = self._queues.get(gang.queue)
        if quota is None:
            return []
        return [t for key, amount in _demand_keys(model, gang.total) if (t := self._term(quota, key, amount))]

    def removal(self, gang: GangRequest, victim: RunningGang, key: ResourceKey) -> tuple[int, int]:
        """What evicting `victim` frees of one resource for `gang`'s queue: (of the queue, of its cohort)."""
        quota = self._queues.get(gang.queue)
        return (0, 0) if quota is None else self._removal_for(quota, victim, key)

    def _refusal(
        self, quota: QueueQuota, term: RoomTerm, *, removed_queue: int, removed_cohort: int, own_only: bool
    ) -> _Verdict:
        """No room: say how much is used and what the cohort could lend."""
        key, demand, nominal, held, limit = term.key, term.demand, term.nominal, term.held, term.limit
        used = term.used - removed_queue
        cohort = quota.cohort
        at_most = nominal
        if term.cohort_nominal is not None:
            spare = term.cohort_nominal - nominal
            at_most = nominal + max(0, spare if limit is None else min(limit, spare))
        never = demand > at_most
        own_room = max(0, nominal - used - held)
        text = f"queue {quota.name} uses {_bare(key, used)} of {_amount_text(key, nominal)}"
        if held:
            holder = self._quota_holder.get(quota.name)
            text += f" and holds {_bare(key, held)} for {holder or 'a gang holding nodes'}"
        lends = 0
        if never:
            text += (
                f"; it can never have {_bare(key, demand)} (at most {_bare(key, at_most)}: nominal "
                f"{_bare(key, nominal)}"
                + (f" + what cohort {cohort} can lend" if cohort else ", no cohort to borrow from")
                + ")"
            )
        elif term.cohort_nominal is None:
            text += f" (no cohort to borrow from); waits for {_bare(key, demand)}"
        else:
            cohort_free = term.cohort_nominal - term.cohort_load + removed_cohort - own_room
            borrowed = max(0, used + held - nominal)
            left = None if limit is None else max(0, limit - borrowed)
            lends = max(0, cohort_free if left is None else min(cohort_free, left))
            if own_only:
                text += f" (reclaiming needs it within nominal); waits for {_bare(key, demand)}"
            else:
                limit_text = "" if limit is None else f", borrowing limit {_bare(key, limit)}"
                text += f" (cohort {cohort} lends {_bare(key, lends)}{limit_text}); waits for {_bare(key, demand)}"
        numbers: dict[str, int | float] = {
            "used": used,
            "nominal": nominal,
            "held": held,
            "lendable": lends,
            "demand": demand,
        }
        return _Verdict(False, never=never, text=text, numbers=Map(numbers))

    def _model_verdict(
        self,
        quota: QueueQuota,
        model: str | None,
        demand: Resources,
        *,
        removed: Sequence[RunningGang] = (),
        own_only: bool = False,
        explain: bool = True,
    ) -> _Verdict:
        borrowing = False
        for key, amount in _demand_keys(model, demand):
            term = self._term(quota, key, amount)
            if term is None:
                continue
            removed_queue = removed_cohort = 0
            for victim in removed:
                of_queue, of_cohort = self._removal_for(quota, victim, key)
                removed_queue += of_queue
                removed_cohort += of_cohort
            room = term.room(removed_queue, removed_cohort, own_only=own_only)
            if room == NO_ROOM:
                if not explain:
                    return _Verdict(False)
                return self._refusal(
                    quota, term, removed_queue=removed_queue, removed_cohort=removed_cohort, own_only=own_only
                )
            borrowing = borrowing or room == BORROWED_ROOM
        return _Verdict(True, borrowing=borrowing)

    def _removal_for(self, quota: QueueQuota, victim: RunningGang, key: ResourceKey) -> tuple[int, int]:
        taken = _taken(victim, key)
        if not taken:
            return 0, 0
        other = self._queues.get(victim.queue)
        in_cohort = (
            bool(quota.cohort)
            and other is not None
            and other.cohort == quota.cohort
            and other.nominal_of(key) is not None
        )
        return (taken if victim.queue == quota.name else 0), (taken if in_cohort else 0)

    def admit(self, gang: GangRequest) -> Admission:
        """Which models (if any) the gang's queue has room for now.

        An elastic gang is admitted at its minimum; `Admission.max_step` then says how far its queue lets
        it grow on each admitted model (within nominal quota where its minimum is; the size placed is what
        is charged).
        """
        if not gang.elastic:
            return self._admit(gang)
        admission = self._admit(gang.minimum)
        quota = self._queues.get(gang.queue)
        if not admission.admitted or quota is None:
            return admission
        tried: tuple[str | None, ...] = admission.models if gang.needs_gpu and admission.models else (None,)
        caps: dict[str, int] = {}
        for model in tried:
            own_only = model in admission.own if model is not None else not admission.borrowing
            low, high = 0, gang.steps  # step `low` is admitted (the minimum is); find the largest
            while low < high:
                middle = (low + high + 1) // 2
                total = gang.sized(middle).total
                if self._model_verdict(quota, model, total, own_only=own_only, explain=False).ok:
                    low = middle
                else:
                    high = middle - 1
            caps[model or ""] = low
        return replace(admission, max_step=Map(caps))

    def _admit(self, gang: GangRequest) -> Admission:
        quota = self._queues.get(gang.queue)
        if quota is None:
            block = QuotaBlock(
                gang.queue, QUEUE_NOT_FOUND, f"queue {gang.queue} does not exist; the gang waits until it does"
            )
            return Admission(gang.queue, False, block=block)
        if not gang.needs_gpu:
            verdict = self._model_verdict(quota, None, gang.total)
            if verdict.ok:
                return Admission(gang.queue, True, borrowing=verdict.borrowing)
            block = QuotaBlock(gang.queue, QUOTA_EXCEEDED, verdict.text, verdict.numbers)
            return Admission(gang.queue, False, block=block, never=verdict.never)
        models = gang.gpu_models or self._models
        own: list[str] = []
        borrowed: list[str] = []
        refused: list[tuple[str, _Verdict]] = []
        for model in models:
            verdict = self._model_verdict(quota, model, gang.total)
            if not verdict.ok:
                refused.append((model, verdict))
            elif verdict.borrowing:
                borrowed.append(model)
            else:
                own.append(model)
        if own or borrowed:
            return Admission(
                gang.queue, True, models=(*own, *borrowed), own=frozenset(own), narrowed=bool(refused)
            )
        if not refused:
            # No GPU model anywhere in the federation: the gpu-model filter says so, cluster by cluster.
            return Admission(gang.queue, True)
        _, first = refused[0]
        text = first.text if len(refused) == 1 else "; ".join(f"{m}: {v.text}" for m, v in refused[:3])
        block = QuotaBlock(gang.queue, QUOTA_EXCEEDED, text, first.numbers)
        return Admission(gang.queue, False, block=block, never=all(v.never for _, v in refused))

    def nominal_shortfall(self, gang: GangRequest, model: str | None) -> str | None:
        """None if the gang's queue holds it on `model` within its nominal quota now (used + held + its
        demand: the room rule, own quota only); else why not, with the numbers."""
        quota = self._queues.get(gang.queue)
        if quota is None:
            return f"queue {gang.queue} does not exist"
        for key, amount in _demand_keys(model, gang.total):
            term = self._term(quota, key, amount)
            if term is not None and term.room(own_only=True) == NO_ROOM:
                held = f" and holds {_bare(key, term.held)}" if term.held else ""
                return (
                    f"queue {quota.name} uses {_bare(key, term.used)}{held} of {_amount_text(key, term.nominal)}; "
                    f"{_bare(key, amount)} more would be beyond its nominal quota"
                )
        return None

    def fits_after(
        self, gang: GangRequest, model: str | None, removed: Sequence[RunningGang], *, own_only: bool
    ) -> bool:
        """Would the gang's queue admit it on `model` once `removed` are evicted? (`own_only`: within nominal.)"""
        quota = self._queues.get(gang.queue)
        if quota is None:
            return False
        if removed:
            return self._model_verdict(
                quota, model, gang.total, removed=removed, own_only=own_only, explain=False
            ).ok
        # Without removals the answer depends only on usage: asked again and again by the planner.
        key = (self._version, gang.queue, gang.total, model, own_only)
        known = self._room_memo.get(key)
        if known is None:
            if len(self._room_memo) > 4096:
                self._room_memo.clear()
            known = self._room_memo[key] = self._model_verdict(
                quota, model, gang.total, own_only=own_only, explain=False
            ).ok
        return known

    def borrowing(self, gang: RunningGang) -> bool:
        """Does the gang's queue use more than its nominal quota of something the gang is charged?"""
        quota = self._queues.get(gang.queue)
        if quota is None:
            return False
        used = self._used.get(gang.queue, _NO_USAGE)
        for key, _ in _demand_keys(gang.gpu_model, gang.demand):
            nominal = quota.nominal_of(key)
            if nominal is not None and used[key] > nominal:
                return True
        return False

    def _sources(
        self, gang: GangRequest, cluster: str, models: tuple[str, ...]
    ) -> list[tuple[list[RunningGang], VictimReason]]:
        """Lists (each in eviction order, not evicted, cached until an eviction in `cluster`) that hold
        this gang's candidates: its own queue's lower-priority gangs, other cohort queues' borrowed ones."""
        cache_key = (cluster, gang.queue, gang.priority, models)
        cached = self._source_cache.get(cache_key)
        if cached is not None:
            return cached
        out = self._find_sources(gang, cluster, models)
        self._source_cache[cache_key] = out
        return out

    def may_preempt(self, gang: GangRequest) -> bool:
        """Does the gang's queue let it evict anyone at all (withinQueue LowerPriority, or reclaimBorrowed)?"""
        quota = self._queues.get(gang.queue)
        if quota is None:
            return False
        return quota.within_queue is WithinQueue.LOWER_PRIORITY or (quota.reclaim_borrowed and bool(quota.cohort))

    def _find_sources(
        self, gang: GangRequest, cluster: str, models: tuple[str, ...]
    ) -> list[tuple[list[RunningGang], VictimReason]]:
        quota = self._queues.get(gang.queue)
        if quota is None:
            return []
        lower = quota.within_queue is WithinQueue.LOWER_PRIORITY
        reclaim = quota.reclaim_borrowed and bool(quota.cohort)
        if not (lower or reclaim):
            return []
        evicted = self._evicted
        out: list[tuple[list[RunningGang], VictimReason]] = []
        table = self._queues_in(cluster)
        for queue_name, group in table.items():
            if queue_name == gang.queue:
                if not lower:
                    continue
                source: Iterable[RunningGang] = group
                reason = VictimReason.LOWER_PRIORITY
                key = (cluster, queue_name, gang.priority, models)
            else:
                other = self._queues.get(queue_name)
                if not reclaim or other is None or other.cohort != quota.cohort:
                    continue
                source = self._borrowed_in[cluster].get(queue_name, ())
                reason = VictimReason.RECLAIM_BORROWED
                # Reclaim ignores priority: one cached list per queue (priority -1 marks it).
                key = (cluster, queue_name, -1, models)
            listed = self._lower_cache.get(key)
            if listed is None:
                listed = []
                for victim in source:
                    if reason is VictimReason.LOWER_PRIORITY and victim.priority >= gang.priority:
                        break  # by priority: the rest are of equal or higher priority
                    if victim.uid not in evicted and (
                        not models
                        or victim.gpu_model is None
                        or victim.gpu_model in models
                        or victim.has_gpu_free_pods
                    ):
                        listed.append(victim)
                listed.sort(key=self.eviction_rank)
                self._lower_cache[key] = listed
            if listed:
                out.append((listed, reason))
        return out

    def _reclaim_allowed(
        self,
        gang: GangRequest,
        sources: list[tuple[list[RunningGang], VictimReason]],
        models: tuple[str, ...],
    ) -> bool:
        """Could this gang be within its queue's nominal quota once its own candidates here are gone?

        Reclaiming is only for a gang its own nominal quota covers; when even evicting every
        lower-priority gang of its queue in this cluster leaves it borrowing, no borrowed gang here is
        a candidate (checked now, against the current usage).
        """
        if not any(reason is VictimReason.RECLAIM_BORROWED for _, reason in sources):
            return False
        if not gang.needs_gpu:
            tried: tuple[str | None, ...] = (None,)
        else:
            tried = models or gang.gpu_models or self._models
        if any(self.fits_after(gang, model, (), own_only=True) for model in tried):
            return True
        quota = self._queues.get(gang.queue)
        own = [listed for listed, reason in sources if reason is VictimReason.LOWER_PRIORITY]
        if quota is None or not own:
            return False
        for model in tried:
            terms = [t for key, amount in _demand_keys(model, gang.total) if (t := self._term(quota, key, amount))]
            if all(t.room(self._taken_by(own, t.key), own_only=True) for t in terms):
                return True
        return False

    def _taken_by(self, lists: list[list[RunningGang]], key: ResourceKey) -> int:
        """What the gangs of these (cached) lists are charged of one resource; memoised with the lists."""
        total = 0
        for listed in lists:
            memo = self._taken_memo.get((id(listed), key))
            if memo is None or memo[0] is not listed:
                memo = (listed, sum(_taken(victim, key) for victim in listed))
                self._taken_memo[(id(listed), key)] = memo
            total += memo[1]
        return total

    def _admissible(self, victim: RunningGang, reason: VictimReason, excluded: frozenset[str] | set[str]) -> bool:
        if victim.uid in excluded:
            return False
        # A borrowed gang is reclaimed only while its queue still uses more than its nominal quota.
        return reason is VictimReason.LOWER_PRIORITY or self.borrowing(victim)

    def iter_candidates(
        self,
        gang: GangRequest,
        cluster: str,
        *,
        excluded: frozenset[str] | set[str] = frozenset(),
        models: tuple[str, ...] = (),
    ) -> Iterator[tuple[RunningGang, VictimReason]]:
        """`victim_candidates(...)`, lazily, in eviction order (the first few cost little)."""
        sources = self._sources(gang, cluster, models)
        reclaim = self._reclaim_allowed(gang, sources, models)
        streams = [
            _tagged(listed, reason) for listed, reason in sources if reason is VictimReason.LOWER_PRIORITY or reclaim
        ]
        for victim, reason in heapq.merge(*streams, key=self._entry_rank):
            if self._admissible(victim, reason, excluded):
                yield victim, reason

    def victim_candidates(
        self,
        gang: GangRequest,
        cluster: str,
        *,
        excluded: frozenset[str] | set[str] = frozenset(),
        models: tuple[str, ...] = (),
    ) -> list[tuple[RunningGang, VictimReason]]:
        """Running gangs of `cluster` this gang's queue policy allows it to evict (whole), with the reason.

        Within its queue (withinQueue LowerPriority): gangs of strictly lower
        priority. Reclaim (reclaimBorrowed): gangs that other queues of its
        cohort admitted on borrowed quota while those queues still use more
        than their nominal quota of what the gang is charged, and only if
        the gang can be within its own nominal quota once its own queue's
        candidates here are gone. Never a gang
        without a queue, nor one in `excluded`. With `models`, only gangs
        that can free room on nodes of those models: charged to one of them,
        without GPUs, or with a pod that holds no GPU. In eviction order
        (`eviction_rank`).
        """
        sources = self._sources(gang, cluster, models)
        reclaim = self._reclaim_allowed(gang, sources, models)
        out = [
            (victim, reason)
            for listed, reason in sources
            if reason is VictimReason.LOWER_PRIORITY or reclaim
            for victim in listed
            if self._admissible(victim, reason, excluded)
        ]
        out.sort(key=self._entry_rank)
        return out

    # ------------------------------------------------------------ fair share and status

    def share(self, queue: str) -> float:
        """Weighted dominant share (see the module docstring); 0 for no queue or an unknown one."""
        quota = self._queues.get(queue)
        if quota is None:
            return 0.0
        dominant = 0.0
        for key, used in self._used.get(queue, _NO_USAGE).items():
            if used <= 0:
                continue
            nominal = quota.nominal_of(key)
            if nominal is None:
                continue
            dominant = max(dominant, math.inf if nominal == 0 else used / nominal)
        return dominant / quota.weight

    def usage(self) -> Map[str, QueueUsage]:
        """Every queue's usage now (running gangs, plus this cycle's admissions, minus its evictions)."""
        out: dict[str, QueueUsage] = {}
        for name, quota in sorted(self._queues.items()):
            used = self._used.get(name, Counter())
            gpus = {key[1]: amount for key, amount in sorted(used.items()) if key[0] == "gpu" and amount}
            borrowed_gpus = {
                model: amount - quota.nominal.gpus.get(model, 0)
                for model, amount in gpus.items()
                if amount > quota.nominal.gpus.get(model, 0)
            }
            cpu, memory = used[_CPU], used[_MEMORY]
            out[name] = QueueUsage(
                queue=name,
                used=QuotaAmounts(gpus=gpus, cpu_milli=cpu, memory=memory),
                borrowed=QuotaAmounts(
                    gpus=borrowed_gpus,
                    cpu_milli=max(0, cpu - quota.nominal.cpu_milli) if quota.nominal.cpu_milli is not None else 0,
                    memory=max(0, memory - quota.nominal.memory) if quota.nominal.memory is not None else 0,
                ),
                gangs=self._gangs[name],
            )
        return Map(out)


def _tagged(listed: list[RunningGang], reason: VictimReason) -> Iterator[tuple[RunningGang, VictimReason]]:
    for victim in listed:
        yield victim, reason


_priority = operator.attrgetter("priority")


def _taken(victim: RunningGang, key: ResourceKey) -> int:
    if key == _CPU:
        return victim.demand.cpu_milli
    if key == _MEMORY:
        return victim.demand.memory
    return victim.demand.gpu if victim.gpu_model == key[1] else 0


def _order_key(gang: GangRequest) -> tuple[int, float, str, str]:
    return (-gang.priority, gang.submitted_at, gang.key, gang.uid)


class FairQueue:
    """The cycle's order when queues exist: the lane (queue) with the lowest share gives the next gang.

    Iterate it; between two `next` calls the cycle charges or evicts in the
    ledger, and the lane that gave the last gang (and every lane whose queue
    lost gangs to eviction) is ranked again with its new share.
    """

    def __init__(self, gangs: Iterable[GangRequest], ledger: QuotaLedger) -> None:
        self._ledger = ledger
        lanes: dict[str, list[GangRequest]] = {}
        for gang in gangs:
            lanes.setdefault(gang.queue, []).append(gang)
        # Each lane is sorted worst first, so the head is popped from the end.
        self._lanes = {name: sorted(lane, key=_order_key, reverse=True) for name, lane in lanes.items()}
        self._version: Counter[str] = Counter()
        self._heap: list[tuple[float, int, float, str, str, str, int]] = []
        self._last: str | None = None
        for name in sorted(self._lanes):
            self._push(name)

    def _push(self, lane: str) -> None:
        entries = self._lanes[lane]
        self._version[lane] += 1
        if not entries:
            return
        head = entries[-1]
        share = self._ledger.share(lane) if lane else 0.0
        heapq.heappush(
            self._heap,
            (share, -head.priority, head.submitted_at, head.key, head.uid, lane, self._version[lane]),
        )

    def __iter__(self) -> Iterator[GangRequest]:
        return self

    def __next__(self) -> GangRequest:
        if self._last is not None:
            self._push(self._last)
            self._last = None
        for lane in sorted(self._ledger.dirty):
            if lane in self._lanes:
                self._push(lane)
        self._ledger.dirty.clear()
        while self._heap:
            *_, lane, version = heapq.heappop(self._heap)
            if version != self._version[lane]:
                continue
            self._last = lane
            return self._lanes[lane].pop()
        raise StopIteration
