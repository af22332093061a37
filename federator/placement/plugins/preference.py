"""Score "preference": on-prem before cloud, unless the profile prefers another location (or none).

Raw score 1 for a cluster at the profile's `prefer_location`, else 0;
normalised as raw x 100. Its default weight outweighs packing, topology,
headroom and cost together, so it decides between otherwise similar fits;
data locality still outweighs it. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class PreferenceScore:
    name = "preference"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        preferred = ctx.profile.prefer_location
        return 1.0 if preferred is not None and snapshot.info.location is preferred else 0.0

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        return 100.0 * raw
