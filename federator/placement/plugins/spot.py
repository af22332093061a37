"""Filter and score "spot": spot capacity (cheap, but its nodes can vanish) only for gangs that allow it.

A gang's spec.placement.spot is never (the default: the gang is kept off spot clusters), allowed (spot is a
cluster like any other) or preferred (spot clusters score 100, the others 0). Losing a spot cluster's nodes
is a failover like any other; a job with checkpoints loses little. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest, SpotPolicy
from federator.placement.snapshot import ClusterSnapshot

SPOT_NOT_ALLOWED = "SpotNotAllowed"


class SpotFilter:
    name = "spot"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        info = snapshot.info
        if not info.spot or gang.spot is not SpotPolicy.NEVER:
            return PASSED
        rate = info.interruption_rate_per_hour
        expected = f" (about {rate:.0%} of its nodes lost per hour)" if rate else ""
        return FilterResult.reject(SPOT_NOT_ALLOWED, f"spot capacity{expected}; the job does not allow spot "
                                                     "(spec.placement.spot: allowed or preferred)")


class SpotScore:
    name = "spot"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        return 1.0 if gang.spot is SpotPolicy.PREFERRED and snapshot.info.spot else 0.0

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        return 100.0 * raw
