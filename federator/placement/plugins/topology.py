"""Score "topology": fewer nodes for the gang means fewer hops between its pods.

Raw score: the number of nodes the fit uses. Normalised as
fewest possible / this x 100, where "fewest possible" is a lower bound
from the gang alone: for each role, its pods over how many of them the
largest node in the federation could hold. A gang packed as tightly as any
node shape allows scores 100. Needs the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterSnapshot


def fewest_nodes_possible(gang: GangRequest, largest: Resources) -> int:
    """No fit can use fewer nodes: a node holds at most this many pods of each role."""
    fewest = 1
    for role in gang.roles:
        r = role.requests
        per_node = role.replicas
        for need, have in ((r.cpu_milli, largest.cpu_milli), (r.memory, largest.memory),
                           (r.gpu, largest.gpu), (r.rdma, largest.rdma)):
            if need:
                per_node = min(per_node, have // need)
        if per_node > 0:
            fewest = max(fewest, -(-role.replicas // per_node))
    return fewest


class TopologyScore:
    name = "topology"
    needs_fit = True

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        fit = ctx.fit
        return float(fit.nodes_used) if fit is not None else 0.0

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        if raw <= 0:
            return 0.0
        return min(100.0, 100.0 * fewest_nodes_possible(gang, ctx.federation.max_node_allocatable) / raw)
