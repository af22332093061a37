"""Filter "budget": a gang whose queue is over its monthly budget goes only to already-paid capacity.

The hub's queue accounting sets `GangRequest.over_budget` (spent and limit this calendar month) for the gangs of
a Queue whose spend reached its spec.budget. Such a gang passes only a cluster whose GPU-hour price is 0 for the
GPU models it may use there (`ClusterInfo.price`: on-prem, already paid for); on a cluster where only some of
those models are free, the models to try are narrowed to the free ones (like "quota" narrows them). Elsewhere
the why-not cell says "queue team-a is over its budget (1,512.40 of 1,500.00 USD this month): only
already-paid clusters". A gang without GPUs costs nothing and passes; a gang under budget passes everywhere.
Runs after "gpu-model" (it reads `ctx.gpu_models`). Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

OVER_BUDGET = "QueueOverBudget"


class BudgetFilter:
    name = "budget"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        over = gang.over_budget
        if over is None or not gang.needs_gpu:
            return PASSED
        info = snapshot.info
        models = ctx.gpu_models
        if models is None:  # a profile without "gpu-model": the cluster is free only if every price is 0
            price = max((info.cost_per_gpu_hour, *info.cost_per_model.values()))
            if price == 0:
                return PASSED
        else:
            free = tuple(model for model in models if info.price(model) == 0)
            if free:
                ctx.gpu_models = free
                return PASSED
            price = min((info.price(model) for model in models), default=info.price(None))
        return FilterResult.reject(
            OVER_BUDGET,
            f"queue {gang.queue} is over its budget ({over.text()}): only already-paid clusters (GPU-hour price "
            f"0); this one charges {price:g} per GPU-hour",
            spent=round(over.spent, 6), limit=round(over.limit, 6), price=price,
        )
