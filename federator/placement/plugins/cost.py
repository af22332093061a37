"""Score "cost": cheaper GPU-hours score higher.

Raw score: the cluster's declared cost per GPU-hour. Normalised as
cheapest / this x 100, so the cheapest passing cluster scores 100 and one
twice as dear scores 50; a free cluster (cost 0) scores 100. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class CostScore:
    name = "cost"

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        return float(snapshot.info.cost_per_gpu_hour)

    def normalize(self, raw: Mapping[str, float]) -> dict[str, float]:
        cheapest = min(raw.values(), default=0.0)
        return {cluster: 100.0 if value <= 0 else 100.0 * cheapest / value for cluster, value in raw.items()}
