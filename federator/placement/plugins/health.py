"""Filter "health": a cluster must be healthy, not cordoned, and have a node that is ready and schedulable.

Health comes from the hub's view of the member (contact within the grace
period, API ready); cordon is the platform team's switch to stop new gangs
going to a cluster. Pure: reads the snapshot only.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot

UNHEALTHY = "ClusterUnhealthy"
CORDONED = "ClusterCordoned"
NO_SCHEDULABLE_NODES = "NoSchedulableNodes"


class HealthFilter:
    name = "health"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        info = snapshot.info
        if not info.healthy:
            return FilterResult.reject(UNHEALTHY, "cluster is not healthy (no contact, or its API is not ready)")
        if info.cordoned:
            return FilterResult.reject(CORDONED, "cluster is cordoned: it takes no new gangs")
        index = snapshot.index
        if index.eligible_nodes == 0:
            return FilterResult.reject(
                NO_SCHEDULABLE_NODES,
                f"no node is both ready and schedulable ({len(snapshot.nodes)} nodes: "
                f"{index.not_ready_nodes} not ready, {index.unschedulable_nodes} cordoned)",
                nodes=len(snapshot.nodes),
                not_ready=index.not_ready_nodes,
                unschedulable=index.unschedulable_nodes,
            )
        return PASSED
