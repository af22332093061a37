"""Filter "quota": a gang is placed only on GPU models its queue has room for (own quota or borrowed).

The cycle decides admission once per gang, federation-wide (`admission`:
a queue's quota counts over all member clusters together) and passes it in
the evaluation context; this filter applies it to one cluster:
- no admission (no queues in this cycle, or the gang has none): passes;
- the queue has no room at all: QuotaExceeded (or QueueNotFound) with the
  queue's numbers, e.g. "queue vision uses 96 of 96 A100 GPUs (cohort
  research lends 0); waits for 8";
- otherwise it narrows the models left by the gpu-model filter to those the
  queue has room for, own-quota models first, and rejects the cluster with
  QuotaExceeded if none of its models is left.
It must run after "gpu-model" and before "gang-fit" (the default order).

Pure: reads the context, writes only its models.
"""

from __future__ import annotations

from federator.placement.admission import QUOTA_EXCEEDED
from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest
from federator.placement.nodefit import candidate_gpu_models
from federator.placement.snapshot import ClusterSnapshot


class QuotaFilter:
    name = "quota"

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        admission = ctx.admission
        if admission is None:
            return PASSED
        if not admission.admitted:
            block = admission.block
            if block is None:
                return FilterResult.reject(QUOTA_EXCEEDED, f"queue {admission.queue} has no room")
            return FilterResult(False, block.code, block.message, block.numbers)
        if not gang.needs_gpu or not admission.models:
            return PASSED
        here = ctx.gpu_models if ctx.gpu_models is not None else candidate_gpu_models(gang, snapshot.index)
        own = [model for model in here if model in admission.own]
        borrowed = [model for model in here if model not in admission.own and model in admission.models]
        if not own and not borrowed:
            return FilterResult.reject(
                QUOTA_EXCEEDED,
                f"queue {admission.queue} has room only for {' or '.join(admission.models)} GPUs; "
                f"this cluster offers the gang {' or '.join(here) or 'none'}",
            )
        ctx.gpu_models = (*own, *borrowed)
        return PASSED
