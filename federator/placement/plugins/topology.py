"""Score "topology": fewer nodes for the gang means fewer hops between its pods.

Raw score: the number of nodes the fit uses. Normalised as
fewest / this x 100 across the passing clusters. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class TopologyScore:
    name = "topology"

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        fit = ctx.fit
        return float(fit.nodes_used) if fit is not None else 0.0

    def normalize(self, raw: Mapping[str, float]) -> dict[str, float]:
        used = [value for value in raw.values() if value > 0]
        fewest = min(used, default=0.0)
        return {cluster: 100.0 * fewest / value if value > 0 else 0.0 for cluster, value in raw.items()}
