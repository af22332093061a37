"""Score "network-headroom": fabric capacity left beyond what the gang needs.

Raw score: the cluster's declared bandwidth (Gbps); for a gang that takes
RDMA devices, scaled by the share of the cluster's free rdma/hca devices
left after placing it, so a gang does not take the last devices of a
cluster when another has plenty. Normalised against the largest bandwidth
in the federation. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class NetworkHeadroomScore:
    name = "network-headroom"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        bandwidth = float(snapshot.info.bandwidth_gbps)
        needed = gang.total.rdma
        if not needed:
            return bandwidth
        free = snapshot.index.free_rdma
        if free <= 0:
            return 0.0
        return bandwidth * max(0, free - needed) / free

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        top = ctx.federation.max_bandwidth_gbps
        return min(100.0, 100.0 * raw / top) if top > 0 else 0.0
