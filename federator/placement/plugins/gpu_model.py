"""Filter "gpu-model": a gang that needs GPUs needs schedulable nodes of a GPU model it accepts.

Leaves the models to try (the gang's preference order, or every model of
the cluster, most free GPUs first) in the context for the gang-fit filter.
Pure.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.nodefit import candidate_gpu_models
from federator.placement.snapshot import ClusterSnapshot

GPU_MODEL_UNAVAILABLE = "GpuModelUnavailable"
NO_GPU_NODES = "NoGpuNodes"


def reject_for_models(gang: GangRequest, snapshot: ClusterSnapshot) -> FilterResult:
    present = snapshot.index.gpu_models
    if not present:
        return FilterResult.reject(NO_GPU_NODES, "gang needs GPUs; cluster has no schedulable GPU node")
    return FilterResult.reject(
        GPU_MODEL_UNAVAILABLE,
        f"gang accepts {' or '.join(gang.gpu_models)}; cluster has {', '.join(present)}",
    )


class GpuModelFilter:
    name = "gpu-model"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        if not gang.needs_gpu:
            ctx.gpu_models = ()
            return PASSED
        models = candidate_gpu_models(gang, snapshot.index)
        if not models:
            return reject_for_models(gang, snapshot)
        ctx.gpu_models = models
        return PASSED
