"""Filter "network": the cluster's fabric must match the gang's network, with RDMA devices to spare.

- network rdma: the cluster fabric must be RDMA (InfiniBand or RoCE);
- network ethernet: the cluster fabric must be Ethernet (see `Network`);
- network any: either fabric.
Whatever the network, if pods ask for `rdma/hca`, the schedulable nodes
must have at least that many free devices in all: an O(1) check on the
snapshot index. Whether every such pod gets a node with a free device next
to its GPUs is decided node by node by the gang-fit filter. Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest, Network
from federator.placement.snapshot import ClusterSnapshot, Fabric

FABRIC_MISMATCH = "FabricMismatch"
INSUFFICIENT_RDMA = "InsufficientRdma"


class NetworkFilter:
    name = "network"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        info = snapshot.info
        if gang.network is Network.RDMA and info.fabric is not Fabric.RDMA:
            return FilterResult.reject(FABRIC_MISMATCH, "gang needs an RDMA fabric; cluster fabric is ethernet")
        if gang.network is Network.ETHERNET and info.fabric is not Fabric.ETHERNET:
            kind = f" ({info.rdma_kind.value})" if info.rdma_kind else ""
            return FilterResult.reject(
                FABRIC_MISMATCH, f"gang asks for an ethernet cluster; cluster fabric is rdma{kind}"
            )
        needed = gang.total.rdma
        if needed:
            index = snapshot.index
            if index.free_rdma < needed or index.rdma_nodes == 0:
                return FilterResult.reject(
                    INSUFFICIENT_RDMA,
                    f"needs {gang.rdma_pod_count} pods with rdma/hca ({needed} devices); "
                    f"{index.rdma_nodes} schedulable nodes have free rdma/hca ({index.free_rdma} devices free)",
                    pods=gang.rdma_pod_count,
                    devices_needed=needed,
                    devices_free=index.free_rdma,
                    nodes_with_free=index.rdma_nodes,
                )
        return PASSED
