"""What placement answers: a Decision (where, on which nodes, and why not elsewhere) or an Unplaced gang.

These are plain frozen values: the placement controller records them,
`explain` renders them, `federator describe job` shows them. "Why not
cluster X" is always answerable: every cluster that was not chosen appears
in `why_not` (a filter rejected it, with a code and numbers), in `scores`
(it passed but ranked lower), or in `outranked` (it passed the cheap
filters but even its best possible score was below the chosen one's, so it
was not fitted node by node).

With queues (see `admission`), a Decision also says which queue it charges
and whether it borrowed quota, and a Decision that needs room made for it
carries its `preemption`: the victim gangs the caller must evict first (all
in the decision's cluster) and why each was chosen, and the running
elastic gangs it shrinks instead (the pods the caller removes from each).
A Decision says how many pods of each role it placed (`replicas`: an
elastic gang's size; `ranges` the elastic roles' [min, max]). An Unplaced gang says
which quota it waits for (`quota`), and in the cycle's explain mode
(`run_cycle(..., preempt=False)`) where it would fit after preempting whom.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from immutables import Map

__all__ = [
    "Decision",
    "Hold",
    "PodAssignment",
    "Preemption",
    "QuotaBlock",
    "Rejection",
    "ScoreBreakdown",
    "ScorePart",
    "ScoreTable",
    "Shrink",
    "Unplaced",
    "Victim",
    "gpu_seconds_text",
    "VictimReason",
]


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one cluster cannot take a gang: the filter that said no, a stable code, a sentence, the numbers."""

    cluster: str
    filter: str
    code: str
    message: str
    numbers: Mapping[str, int | float] = field(default_factory=Map)


class ScorePart(NamedTuple):
    """One score plugin's contribution to a cluster's total (an immutable record; a tuple for speed)."""

    plugin: str
    raw: float
    normalized: float  # 0..100
    weight: float

    @property
    def weighted(self) -> float:
        return self.normalized * self.weight


@dataclass(frozen=True, slots=True)
class ScoreTable:
    """Raw and normalised scores of every passing cluster for one gang, one column per score plugin.

    Shared by the ScoreBreakdowns of one evaluation, so a decision does not
    build a record per (cluster, plugin) unless someone asks for it.
    """

    plugins: tuple[str, ...]
    weights: tuple[float, ...]
    raw: tuple[Mapping[str, float], ...]
    normalized: tuple[Mapping[str, float], ...]


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    cluster: str
    total: float
    gpu_model: str | None
    nodes_used: int
    table: ScoreTable = field(repr=False, compare=False)

    @property
    def parts(self) -> tuple[ScorePart, ...]:
        table = self.table
        cluster = self.cluster
        return tuple(
            ScorePart(plugin, table.raw[i][cluster], table.normalized[i][cluster], table.weights[i])
            for i, plugin in enumerate(table.plugins)
        )


@dataclass(frozen=True, slots=True)
class PodAssignment:
    """Pod `index` of role `role` goes to `node`."""

    role: str
    index: int
    node: str


class VictimReason(StrEnum):
    # A gang of the preemptor's own queue with a lower priority (the queue's withinQueue: LowerPriority).
    LOWER_PRIORITY = "LowerPriority"
    # A gang another queue of the cohort runs on borrowed quota (the preemptor's queue: reclaimBorrowed).
    RECLAIM_BORROWED = "ReclaimBorrowed"


@dataclass(frozen=True, slots=True)
class Victim:
    """A running gang a preemption evicts, whole.

    `lost_gpu_seconds`: the work its eviction loses when the plan was made (its GPUs times the seconds since
    its last checkpoint, `checkpointed` True, or since its copy started); None where not known.
    """

    uid: str
    key: str
    queue: str
    priority: int
    borrowed: bool
    reason: VictimReason
    lost_gpu_seconds: float | None = None
    checkpointed: bool = False

    def loss_text(self) -> str:
        """E.g. "loses 7,200 GPU-seconds since its last checkpoint"; "" when the loss is not known."""
        if self.lost_gpu_seconds is None:
            return ""
        since = "since its last checkpoint" if self.checkpointed else "since it started (no checkpoint)"
        return f"loses {gpu_seconds_text(self.lost_gpu_seconds)} GPU-seconds {since}"

    def describe(self) -> str:
        why = "lower priority" if self.reason is VictimReason.LOWER_PRIORITY else "borrowed quota"
        loss = self.loss_text()
        return f"{self.key} (queue {self.queue}, priority {self.priority}, {why}{', ' + loss if loss else ''})"


def gpu_seconds_text(value: float) -> str:
    """GPU-seconds as a whole number with thousands separators: 7200.4 -> "7,200"."""
    return f"{round(value):,}"


@dataclass(frozen=True, slots=True)
class Shrink:
    """A running elastic gang shrunk toward its minimum: `pods` (member pod names, newest first) are removed.

    Only pods above the gang's minimum, the newest first; the gang keeps running with the rest.
    """

    uid: str
    key: str
    queue: str
    priority: int
    borrowed: bool
    reason: VictimReason
    pods: tuple[str, ...]

    def describe(self) -> str:
        why = "lower priority" if self.reason is VictimReason.LOWER_PRIORITY else "borrowed quota"
        count = len(self.pods)
        return f"{self.key} by {count} pod{'s' if count != 1 else ''} (queue {self.queue}, priority {self.priority}, {why})"


@dataclass(frozen=True, slots=True)
class Preemption:
    """Room made for a gang: evict these whole gangs of `cluster` (and shrink these elastic ones), and the
    gang fits there node by node.

    `nodes` are the nodes where the victims and shrinks free room the gang's
    fit uses. `minimal` is True when no plan with fewer evicted gangs, or as
    few and fewer removed pods, was possible in any cluster (proven by
    search); False when the search was cut short and the plan is only
    irreducible (no victim can be spared, no shrink made smaller).
    """

    cluster: str
    gpu_model: str | None
    victims: tuple[Victim, ...]
    nodes: tuple[str, ...]
    minimal: bool = True
    shrinks: tuple[Shrink, ...] = ()

    @property
    def victim_uids(self) -> tuple[str, ...]:
        return tuple(victim.uid for victim in self.victims)

    @property
    def shrink_pods(self) -> Mapping[str, tuple[str, ...]]:
        """Gang uid -> the names of the pods to remove from it."""
        return Map({shrink.uid: shrink.pods for shrink in self.shrinks})

    def describe(self) -> str:
        """E.g. "would fit on dc-a after preempting ns/a (queue vision, priority 1, lower priority), ns/b (...)"
        or "... after shrinking ns/c by 2 pods (...)"."""
        parts = []
        if self.victims:
            parts.append(f"preempting {', '.join(v.describe() for v in self.victims)}")
        if self.shrinks:
            parts.append(f"shrinking {', '.join(s.describe() for s in self.shrinks)}")
        return f"would fit on {self.cluster} after {' and '.join(parts)}"


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why a gang's queue cannot admit it now: a stable code, a sentence with the numbers.

    code: QuotaExceeded (its queue, and what the cohort can lend, has no
    room for what it asks) or QueueNotFound. `holding` is True when this
    gang, aged, holds its queue's quota so that gangs of equal or lower
    priority of the same queue cannot take what frees up first.
    """

    queue: str
    code: str
    message: str
    numbers: Mapping[str, int | float] = field(default_factory=Map)
    holding: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """A gang placed: the cluster, the node of every pod, and the evidence."""

    gang_key: str
    gang_uid: str
    cluster: str
    gpu_model: str | None
    assignment: tuple[PodAssignment, ...]
    # resourceVersion of the member snapshot this decision was made on.
    resource_version: str
    decided_at: float
    # Clusters a filter rejected, by name; the chosen cluster is never here.
    why_not: Mapping[str, Rejection]
    # Every cluster fitted and scored, best first (the chosen one is first).
    scores: tuple[ScoreBreakdown, ...]
    # Clusters that could not beat the chosen one: name -> the most they could have scored.
    outranked: Mapping[str, float] = field(default_factory=Map)
    # The queue whose quota the gang is charged to ("" = none), and whether it runs on borrowed quota.
    queue: str = ""
    borrowed: bool = False
    # Set when room is made by evicting other gangs first (then `scores` is empty: the cluster was
    # chosen for needing the fewest victims, not by score).
    preemption: Preemption | None = None
    # Pods placed per role (`assignment` holds exactly these); for an elastic gang, the size chosen.
    replicas: Mapping[str, int] = field(default_factory=Map)
    # The elastic roles' (min_replicas, max_replicas); empty for a fixed-size gang.
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=Map)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(pod.node for pod in self.assignment)

    @property
    def preempts(self) -> tuple[str, ...]:
        """Uids of the gangs to evict before this gang's pods can run; () for most decisions."""
        return self.preemption.victim_uids if self.preemption is not None else ()

    @property
    def shrinks(self) -> Mapping[str, tuple[str, ...]]:
        """Gang uid -> pods to remove from it before this gang's pods can run; empty for most decisions."""
        return self.preemption.shrink_pods if self.preemption is not None else Map()


@dataclass(frozen=True, slots=True)
class Hold:
    """A head-of-line hold: nodes of one cluster kept for an aged gang that fits nowhere yet."""

    cluster: str
    nodes: tuple[str, ...]
    # Share (0..1) of what the gang needs on the held nodes that is already free.
    ready_fraction: float


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A gang no cluster can take in this cycle, with each cluster's reason."""

    gang_key: str
    gang_uid: str
    why_not: Mapping[str, Rejection]
    # Set when the gang has (or just got) a head-of-line hold.
    hold: Hold | None = None
    # True when every cluster that passes the other filters (health, selector, fabric, model...)
    # lacks the capacity for the gang even with every node free, or when its queue can never
    # have what it asks: waiting will not help.
    never_fits: bool = False
    # Set when the gang's queue has no room for it (then every cluster's row says so too).
    quota: QuotaBlock | None = None
    # Explain mode only (`run_cycle(preempt=False)`): where it would fit after preempting whom.
    preemption: Preemption | None = None
