"""Score "packing": prefer the fit that leaves the largest free blocks, i.e. the least fragmentation.

Raw score: the share of the capacity of the nodes the gang uses that is
taken after placing it (GPUs for GPU gangs, CPU otherwise), in 0..1. A
gang that fills half-used nodes scores 1 and leaves whole free nodes
elsewhere for the next big gang; one that opens an empty node and uses half
of it scores 0.5. Absolute scale: normalised as raw x 100. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class PackingScore:
    name = "packing"

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        fit = ctx.fit
        if fit is None or fit.capacity_on_used_nodes <= 0:
            return 0.0
        return 1.0 - fit.free_left_on_used_nodes / fit.capacity_on_used_nodes

    def normalize(self, raw: Mapping[str, float]) -> dict[str, float]:
        return {cluster: 100.0 * min(1.0, max(0.0, value)) for cluster, value in raw.items()}
