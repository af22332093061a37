"""What placement answers: a Decision (where, on which nodes, and why not elsewhere) or an Unplaced gang.

These are plain frozen values: the placement controller records them,
`explain` renders them, `federator describe job` shows them. "Why not
cluster X" is always answerable: every cluster that was not chosen appears
in `why_not` (a filter rejected it, with a code and numbers), in `scores`
(it passed but ranked lower), or in `outranked` (it passed the cheap
filters but even its best possible score was below the chosen one's, so it
was not fitted node by node).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from immutables import Map

__all__ = [
    "Decision",
    "Hold",
    "PodAssignment",
    "Rejection",
    "ScoreBreakdown",
    "ScorePart",
    "ScoreTable",
    "Unplaced",
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

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(pod.node for pod in self.assignment)


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
    # lacks the capacity for the gang even with every node free: waiting will not help.
    never_fits: bool = False
