"""Score "elastic-size": for an elastic gang, prefer the cluster that fits more of it.

Raw score: the pods of the gang at the size gang-fit found on the cluster
(the largest in [min, max] that fits there node by node, within what its
queue admits). Normalised as the share of the gang's elastic range that
size reaches: (pods - pods at minimum) / (pods at maximum - pods at
minimum) x 100, so a cluster that fits the whole maximum scores 100 and one
that fits only the minimum 0. A fixed-size gang has no range and scores 0
everywhere (its ranking is as it was without this plugin). Needs the
node-level fit.

Bound before the fit: the largest step the node-fit bound of gang-fit
allows on any of the cluster's models (`gang_fit.largest_step_bound`: free
GPUs per node, free totals, the queue's cap), which no packing can exceed.
Pure.
"""

from __future__ import annotations

from federator.placement.framework import EvalContext
from federator.placement.gang import GangRequest
from federator.placement.plugins.gang_fit import largest_step_bound
from federator.placement.snapshot import ClusterSnapshot


def _share(elastic: GangRequest, pods: float) -> float:
    low, high = elastic.range_pods()
    return min(100.0, max(0.0, 100.0 * (pods - low) / (high - low)))


class ElasticSizeScore:
    name = "elastic-size"
    needs_fit = True

    def score(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        """Pods at the size found (`gang` is that size: the cycle passes the sized gang to post-fit scores)."""
        sized = ctx.sized if ctx.sized is not None else gang
        return float(sized.pod_count)

    def normalize(self, raw: float, gang: GangRequest, ctx: EvalContext) -> float:
        elastic = ctx.elastic
        if elastic is None:
            return 0.0
        return _share(elastic, raw)

    def bound(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> float:
        elastic = ctx.elastic
        if elastic is None:
            return 0.0
        # A function of the (immutable) index, the gang's shape and ranges, and the models and caps tried.
        models = ctx.gpu_models if elastic.needs_gpu else None
        caps = tuple(ctx.max_step(model) for model in models) if models is not None else (ctx.max_step(None),)
        key = ("elastic-size-bound", elastic.shape, elastic.ranges, elastic.gpu_models, models, caps)
        known = snapshot.index.recall(key)
        if isinstance(known, float):
            return known
        step = largest_step_bound(elastic, snapshot, ctx)
        bound = _share(elastic, float(elastic.sized(step).pod_count))
        snapshot.index.remember(key, bound)
        return bound
