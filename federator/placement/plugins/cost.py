"""Score "cost": cheaper GPU-hours score higher.

Raw score: the cluster's price of a GPU-hour, of the cheapest GPU model the
gang may use there (`ClusterInfo.price`: per model, else per GPU-hour).
Normalised as cheapest in the federation / this x 100, so the cheapest
cluster scores 100 and one twice as dear scores 50; a free cluster (cost 0)
scores 100. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class CostScore:
    name = "cost"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        info = snapshot.info
        if not info.cost_per_model:
            return float(info.cost_per_gpu_hour)
        return min((info.price(model) for model in ctx.gpu_models or ()), default=info.price(None))

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        if raw <= 0:
            return 100.0
        return min(100.0, 100.0 * ctx.federation.min_cost_per_gpu_hour / raw)
