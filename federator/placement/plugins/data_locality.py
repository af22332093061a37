"""Score "data-locality": the share of the gang's required dataset bytes already in the cluster.

A dataset counts if the cluster declares it on its own storage (its
declared size) or some node caches it (size from any cluster's
declaration, or 1 byte if no cluster declares it). More bytes present
means less copied across sites before the job can start. Normalised as
bytes present / bytes required x 100; a gang without datasets scores 0
everywhere. Does not need the node-level fit. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class DataLocalityScore:
    name = "data-locality"
    needs_fit = False

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        if not gang.datasets:
            return 0.0
        declared = snapshot.info.datasets
        cached = snapshot.index.node_datasets
        sizes = ctx.federation.dataset_sizes
        present = 0
        for dataset in gang.datasets:
            size = declared.get(dataset)
            if size is not None:
                present += size
            elif dataset in cached:
                present += sizes.get(dataset, 1)
        return float(present)

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        sizes = ctx.federation.dataset_sizes
        required = sum(sizes.get(dataset, 1) for dataset in gang.datasets)
        if required <= 0:
            return 0.0
        return min(100.0, 100.0 * raw / required)
