"""Filter and score "affinity": a gang's spec.placement.affinity, as node affinity is for nodes.

The filter keeps the gang to its pinned clusters (clusterNames) and to clusters that match at least one of
its required terms (ORed, each a label selector over the cluster's labels). The score gives a cluster the
share of the preferred terms' weight it matches (raw 0..1, x 100). A gang without affinity passes
everywhere and scores 0 everywhere. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

NOT_PINNED = "ClusterNotPinned"
AFFINITY_MISMATCH = "ClusterAffinityMismatch"
_SHOWN = 5


class AffinityFilter:
    name = "affinity"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        if gang.cluster_names and snapshot.name not in gang.cluster_names:
            names = sorted(gang.cluster_names)
            shown = ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
            return FilterResult.reject(NOT_PINNED, f"the job is pinned to {shown}")
        labels = snapshot.info.labels
        if gang.required_terms and not any(term.matches(labels) for term in gang.required_terms):
            misses = "; ".join(str(term.first_mismatch(labels)) for term in gang.required_terms[:_SHOWN])
            return FilterResult.reject(AFFINITY_MISMATCH, f"cluster labels match no required affinity term: {misses}")
        return PASSED


class AffinityScore:
    name = "affinity"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        total = sum(weight for weight, _ in gang.preferred_terms)
        if not total:
            return 0.0
        labels = snapshot.info.labels
        return sum(weight for weight, term in gang.preferred_terms if term.matches(labels)) / total

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        return 100.0 * raw
