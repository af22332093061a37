"""Score "packing": prefer the fit that leaves the largest free blocks, i.e. the least fragmentation.

Raw score: the share of the capacity of the nodes the gang uses that is
taken after placing it (GPUs for GPU gangs, CPU otherwise), in 0..1. A
gang that fills half-used nodes scores 1 and leaves whole free nodes
elsewhere for the next big gang; one that opens an empty node and uses half
of it scores 0.5. Normalised as raw x 100. Needs the node-level fit.

Bound before the fit (for gangs of one GPU pod, most of a real trace): the
pod lands on a node with at least the smallest free-GPU count k >= its g
GPUs, of capacity at most the model's largest node c, so the score is at
most 1 - (k - g) / c, best over the models the gang may use. Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.nodefit import candidate_gpu_models
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

    def bound(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        if gang.pod_count != 1 or not gang.needs_gpu:
            return 100.0
        index = snapshot.index
        gpus = gang.total.gpu
        models = ctx.gpu_models if ctx.gpu_models is not None else candidate_gpu_models(gang, index)
        tolerant = bool(gang.tolerations)
        # A function of the (immutable) index and these three values only: memoised on the index.
        key = ("packing-bound", gpus, models, tolerant)
        known = index.recall(key)
        if isinstance(known, float):
            return known
        best = 0.0
        for model in models:
            capacity = max(index.capacity_by_model.get(model, {0: 0}), default=0)
            counts = index.free_counts_of(model, tolerant=tolerant)
            smallest = next((k for k in counts if k >= gpus), None)
            if smallest is None or capacity <= 0:
                continue
            best = max(best, 1.0 - (smallest - gpus) / capacity)
            if best >= 1.0:
                break
        bound = 100.0 * min(1.0, best) if models else 100.0
        index.remember(key, bound)
        return bound
