"""Score "packing": prefer the fit that leaves the largest free blocks, i.e. the least fragmentation.

Raw score: the share of the capacity of the nodes the gang uses that is
taken after placing it (GPUs for GPU gangs, CPU otherwise), in 0..1. A
gang that fills half-used nodes scores 1 and leaves whole free nodes
elsewhere for the next big gang; one that opens an empty node and uses half
of it scores 0.5. Normalised as raw x 100. Needs the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class PackingScore:
    name = "packing"
    needs_fit = True

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        fit = ctx.fit
        if fit is None or fit.capacity_on_used_nodes <= 0:
            return 0.0
        return 1.0 - fit.free_left_on_used_nodes / fit.capacity_on_used_nodes

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        return 100.0 * min(1.0, max(0.0, raw))
