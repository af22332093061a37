"""Filter "exclusion": keep a gang away from a cluster it was pulled back from, until a given time.

When the hub pulls a stuck gang back from a cluster (it was delegated but
never started there), it marks that cluster excluded for the gang for a
while so the next decision does not send it straight back. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

EXCLUDED = "ClusterExcluded"


class ExclusionFilter:
    name = "exclusion"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        until = gang.excluded_clusters.get(snapshot.name)
        if until is not None and until > ctx.now:
            remaining = until - ctx.now
            return FilterResult.reject(
                EXCLUDED,
                f"gang was pulled back from this cluster; excluded for another {remaining:.0f}s",
                until=until,
                seconds_left=remaining,
            )
        return PASSED
