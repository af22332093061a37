"""Filter and score "tier": a gang's spill-over order across clusters (its queue's spec.tiers).

The filter keeps a gang to the tiers open for it: the first tier at once, tier k+1 once the gang has waited
(since it last entered the placement queue) the spillAfterSeconds of tiers 1..k together with no room found.
A cluster in no tier never takes the gang. The message is the why-not table's cell: "tier 2 (cloud) not yet:
tier 1 (on-prem) full for 3m of 5m". A gang without tiers passes everywhere.

The score puts a lower tier ahead: raw 1 for the first tier down to 0 for the last; with its default weight
and at most 5 tiers (apis.queue.MAX_TIERS) one tier's step outweighs every other score together, so a gang
whose tier 2 opened still goes to tier 1 when room turns up there. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

NOT_IN_A_TIER = "ClusterInNoTier"
TIER_NOT_YET = "TierNotYetOpen"


def duration(seconds: float) -> str:
    """3m, 45s, 1h10m: short, as kubectl shows ages."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m" if not rest or minutes >= 10 else f"{minutes}m{rest}s"
    hours, rest = divmod(whole, 3600)
    return f"{hours}h" if rest < 60 else f"{hours}h{rest // 60}m"


class TierFilter:
    name = "tier"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        if not gang.tiers:
            return PASSED
        index = gang.tier_of(snapshot.info.labels)
        if index is None:
            names = ", ".join(t.name for t in gang.tiers)
            return FilterResult.reject(NOT_IN_A_TIER, f"cluster is in none of queue {gang.queue}'s tiers ({names})")
        opened, waited = gang.open_tiers(ctx.now)
        if index < opened:
            return PASSED
        last = opened - 1  # the last open tier: the one the gang waits on now
        spent = sum(t.spill_after_seconds for t in gang.tiers[:last])
        limit = gang.tiers[last].spill_after_seconds
        tier, waiting = gang.tiers[index], gang.tiers[last]
        return FilterResult.reject(
            TIER_NOT_YET,
            f"tier {index + 1} ({tier.name}) not yet: tier {last + 1} ({waiting.name}) full for "
            f"{duration(waited - spent)} of {duration(limit)}",
            tier=index + 1, waited_seconds=round(waited - spent, 3), spill_after_seconds=limit,
        )


class TierScore:
    name = "tier"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        if len(gang.tiers) < 2:
            return 0.0
        index = gang.tier_of(snapshot.info.labels)
        return 0.0 if index is None else (len(gang.tiers) - 1 - index) / (len(gang.tiers) - 1)

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        return 100.0 * raw
