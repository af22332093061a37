"""Score "data-locality": bytes of the gang's required datasets already in the cluster.

A dataset counts if the cluster declares it on its own storage (its
declared size) or some node caches it (size from any cluster's
declaration, or 1 byte if no cluster declares it). More bytes present
means less copied across sites before the job can start. Normalised by the
best cluster (raw / max). Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext, MaxNormalized
from federator.placement.gang import GangRequest
from federator.placement.snapshot import ClusterSnapshot


class DataLocalityScore(MaxNormalized):
    name = "data-locality"

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        if not gang.datasets:
            return 0.0
        declared = snapshot.info.datasets
        cached = snapshot.index.node_datasets
        present = 0
        for dataset in gang.datasets:
            size = declared.get(dataset)
            if size is not None:
                present += size
            elif dataset in cached:
                present += ctx.dataset_sizes.get(dataset, 1)
        return float(present)
