"""Filter "gang-fit": every pod of the gang must land on a node, node by node; leaves the fit for scores.

Three stages, cheapest first, each with its own reason code (after
NoMatchingNodes: a node-selector label no schedulable node carries):
1. ExceedsCapacity: even with every schedulable node empty, the cluster
   could not hold the gang: CPU or memory totals, or, for every accepted
   GPU model, the allocatable-GPU histogram (O(models x distinct GPU
   counts)), or one pod asks more of some resource than any schedulable
   node has (the componentwise maximum of the nodes' allocatable: O(roles);
   without it, such a gang was found out only by visiting every node with
   room for its GPUs). Such a gang never fits there.
2. InsufficientGpu, then InsufficientCpu / InsufficientMemory: the free
   GPUs counted node by node (free-GPU histogram), the free GPU total, or
   the free CPU or memory totals are short. 64 free GPUs spread one per node
   hold no pod of 8 GPUs: this stage says "at most 0 fit" without visiting a
   node. GPUs are checked before CPU and memory because they are what a
   training gang is usually short of, and so the most useful reason.
3. GangDoesNotFit: the packing of `nodefit.fit_gang` (CPU, memory, GPUs,
   RDMA devices, node selector, taints) cannot place every pod.
With several acceptable GPU models, each is tried in order; the reason
reported is the one that came closest.

It is a deferred filter: `precheck` runs stages 1 and 2 in the filter
chain, and the cycle calls `filter` (all three stages) only for clusters
that could still win the gang.

Elastic gangs: the stages above judge the gang at its minimum (the cycle
passes `gang.minimum`, the request in `ctx.elastic`), so a cluster's reason
is the one at the minimum. Once the minimum fits (on the first model that
holds it, in the usual order), `filter` finds the largest size step up to
what the queue admits (`ctx.max_step`): the node-fit bound of stage 2
(free GPUs per node, free totals) caps the step (`step_bound`: a binary
search over steps, no node visited), the packing tries that step, and if
it fails, a binary search between the minimum and it (for a one-role
gang, the count the failed packing reports is exact, so one more packing
confirms it). `ctx.sized` is the gang at the step found, `ctx.fit` its fit.

Pure: reads the snapshot; writes only the evaluation context.
"""

from __future__ import annotations

from federator.placement.framework import PASSED, EvalContext, FilterResult
from federator.placement.gang import GangRequest, RoleRequest
from federator.placement.nodefit import GangFit, candidate_gpu_models, fit_gang
from federator.placement.plugins.gpu_model import reject_for_models
from federator.apis.quantity import format_bytes, format_cpu
from federator.placement.snapshot import ClusterIndex, ClusterSnapshot

EXCEEDS_CAPACITY = "ExceedsCapacity"
INSUFFICIENT_CPU = "InsufficientCpu"
INSUFFICIENT_MEMORY = "InsufficientMemory"
INSUFFICIENT_GPU = "InsufficientGpu"
DOES_NOT_FIT = "GangDoesNotFit"
NO_MATCHING_NODES = "NoMatchingNodes"

_STAGE = {EXCEEDS_CAPACITY: 0, INSUFFICIENT_GPU: 1, INSUFFICIENT_CPU: 2, INSUFFICIENT_MEMORY: 2, DOES_NOT_FIT: 3}


def _needs(gang: GangRequest, role: RoleRequest, *, model: str | None) -> str:
    if len(gang.roles) == 1:
        return f"needs {gang.describe_size(model)}"
    return f"role {role.name!r} needs {role.replicas} pods of {role.requests.describe(gpu_model=model)} each"


def _gpu_shortfall(
    gang: GangRequest, index: ClusterIndex, *, model: str, capacity: bool
) -> tuple[RoleRequest, int] | None:
    """First GPU role that the histogram bound says cannot fit, with the bound; None if all may fit."""
    for role in gang.fit_order:
        gpus = role.requests.gpu
        if not gpus:
            break  # fit_order puts GPU roles first
        if capacity:
            bound = index.max_pods_by_capacity(model, gpus)
        else:
            bound = index.max_pods_by_free_gpus(model, gpus)
        if bound < role.replicas:
            return role, bound
    return None


def _selector_unmatched(gang: GangRequest, index: ClusterIndex) -> FilterResult | None:
    """A node selector term that no schedulable node carries: O(selector size), no node visited."""
    if not gang.node_selector:
        return None
    labels = index.node_labels
    for key in sorted(gang.node_selector):
        value = gang.node_selector[key]
        if labels.get((key, value), 0) == 0:
            return FilterResult.reject(
                NO_MATCHING_NODES,
                f"no schedulable node has label {key}={value} (the gang's node selector)",
                schedulable_nodes=index.eligible_nodes,
            )
    return None


def _free_totals_short(gang: GangRequest, index: ClusterIndex) -> FilterResult | None:
    total = gang.total
    if total.cpu_milli > index.free_cpu_milli:
        return FilterResult.reject(
            INSUFFICIENT_CPU,
            f"needs {format_cpu(total.cpu_milli)} cpu in all; {format_cpu(index.free_cpu_milli)} free on schedulable nodes",
            needed_millicores=total.cpu_milli,
            free_millicores=index.free_cpu_milli,
        )
    if total.memory > index.free_memory:
        return FilterResult.reject(
            INSUFFICIENT_MEMORY,
            f"needs {format_bytes(total.memory)} memory in all; "
            f"{format_bytes(index.free_memory)} free on schedulable nodes",
            needed_bytes=total.memory,
            free_bytes=index.free_memory,
        )
    return None


def _pod_larger_than_every_node(gang: GangRequest, index: ClusterIndex) -> FilterResult | None:
    """A role whose pods ask more of some resource than any schedulable node has, even empty: O(roles)."""
    largest = index.max_node_allocatable
    for role in gang.fit_order:
        if not role.requests.fits_in(largest):
            return FilterResult.reject(
                EXCEEDS_CAPACITY,
                f"{_needs(gang, role, model=None)}; no schedulable node could hold one "
                f"({role.requests.describe()}) even when empty: the most any node has is {largest.describe()}",
                pods_needed=role.replicas,
                pods_fit=0,
            )
    return None


def _histogram_text(index: ClusterIndex, model: str) -> str:
    parts = [f"{count} nodes with {k}" for k, count in reversed(index.free_gpu_histogram(model)) if k]
    return ", ".join(parts[:4]) if parts else "none"


class GangFitFilter:
    name = "gang-fit"

    def precheck(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        """Stages 1 and 2: O(models x distinct GPU counts), no node visited.

        The answer depends only on the snapshot index, the gang's shape and the
        models to try, so it is memoised on the (immutable) index: the next gang
        of the same shape is answered by one lookup while the cluster is unchanged.
        """
        unmatched = _selector_unmatched(gang, snapshot.index)
        if unmatched is not None:
            return unmatched
        models = ctx.gpu_models
        if models is None and gang.needs_gpu:
            models = candidate_gpu_models(gang, snapshot.index)
        key = ("gang-fit", gang.shape, gang.gpu_models, models)
        known = snapshot.index.recall(key)
        if isinstance(known, FilterResult):
            return known
        result = self._check(gang, snapshot, ctx, node_fit=False)
        snapshot.index.remember(key, result)
        return result

    def filter(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> FilterResult:
        """All three stages; on success `ctx.fit` holds the node-level fit (of the largest size, if elastic)."""
        result = self._check(gang, snapshot, ctx, node_fit=True)
        if result.ok and ctx.elastic is not None and ctx.fit is not None:
            ctx.sized, ctx.fit = largest_fit(ctx.elastic, snapshot, ctx.fit, cap=ctx.max_step(ctx.fit.gpu_model))
        return result

    def _check(self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext, *, node_fit: bool) -> FilterResult:
        index = snapshot.index
        unmatched = _selector_unmatched(gang, index)
        if unmatched is not None:
            return unmatched
        total = gang.total
        models: tuple[str, ...] = ()
        if gang.needs_gpu:
            models = ctx.gpu_models if ctx.gpu_models is not None else candidate_gpu_models(gang, index)
            if not models:
                return reject_for_models(gang, snapshot)
            never = self._exceeds_capacity(gang, index, models=models)
            if never is not None:
                return never
        if total.cpu_milli > index.capacity_cpu_milli or total.memory > index.capacity_memory:
            return FilterResult.reject(
                EXCEEDS_CAPACITY,
                f"needs {format_cpu(total.cpu_milli)} cpu and {format_bytes(total.memory)} memory in all; "
                f"the schedulable nodes have {format_cpu(index.capacity_cpu_milli)} cpu and "
                f"{format_bytes(index.capacity_memory)} memory even when empty",
                needed_millicores=total.cpu_milli,
                capacity_millicores=index.capacity_cpu_milli,
                needed_bytes=total.memory,
                capacity_bytes=index.capacity_memory,
            )
        too_big = _pod_larger_than_every_node(gang, index)
        if too_big is not None:
            return too_big
        if not gang.needs_gpu:
            short = _free_totals_short(gang, index)
            if short is not None:
                return short
            if not node_fit:
                return PASSED
            fit = fit_gang(gang, snapshot, gpu_model=None)
            if fit.ok:
                ctx.fit = fit
                return PASSED
            role = next(r for r in gang.roles if r.name == fit.failed_role)
            return FilterResult.reject(
                DOES_NOT_FIT,
                f"{_needs(gang, role, model=None)}; at most {fit.failed_role_fit} fit node by node",
                pods_needed=role.replicas,
                pods_fit=fit.failed_role_fit,
            )
        best: tuple[int, int, FilterResult] | None = None
        for model in models:
            result = self._try_model(gang, snapshot, ctx, model=model, node_fit=node_fit)
            if result is None:
                return PASSED
            rank = (_STAGE[result.code], int(result.numbers.get("pods_fit", 0)))
            if best is None or rank > best[:2]:
                best = (rank[0], rank[1], result)
        assert best is not None
        return best[2]

    @staticmethod
    def _exceeds_capacity(gang: GangRequest, index: ClusterIndex, *, models: tuple[str, ...]) -> FilterResult | None:
        """The closest ExceedsCapacity if no model could ever hold the gang; None if one could."""
        closest: tuple[RoleRequest, int, str] | None = None
        for model in models:
            short = _gpu_shortfall(gang, index, model=model, capacity=True)
            if short is None:
                return None
            if closest is None or short[1] > closest[1]:
                closest = (short[0], short[1], model)
        assert closest is not None
        role, bound, model = closest
        return FilterResult.reject(
            EXCEEDS_CAPACITY,
            f"{_needs(gang, role, model=model)}; even with every schedulable node empty at most {bound} fit",
            pods_needed=role.replicas,
            pods_fit=bound,
        )

    def _try_model(
        self, gang: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext, *, model: str, node_fit: bool
    ) -> FilterResult | None:
        index = snapshot.index
        short = _gpu_shortfall(gang, index, model=model, capacity=False)
        if short is not None:
            never = _gpu_shortfall(gang, index, model=model, capacity=True)
            if never is not None:
                # Another accepted model could hold the gang some day; this one never can.
                role, bound = never
                return FilterResult.reject(
                    EXCEEDS_CAPACITY,
                    f"{_needs(gang, role, model=model)}; even with every schedulable node empty at most {bound} fit",
                    pods_needed=role.replicas,
                    pods_fit=bound,
                )
            role, bound = short
            return FilterResult.reject(
                INSUFFICIENT_GPU,
                f"{_needs(gang, role, model=model)}; at most {bound} fit "
                f"(free {model} GPUs per node: {_histogram_text(index, model)})",
                pods_needed=role.replicas,
                pods_fit=bound,
                free_gpus=index.free_gpu_by_model.get(model, 0),
            )
        free_gpus = index.free_gpu_by_model.get(model, 0)
        if gang.total.gpu > free_gpus:
            return FilterResult.reject(
                INSUFFICIENT_GPU,
                f"needs {gang.total.gpu} {model} GPUs in all; {free_gpus} free",
                pods_needed=gang.pod_count,
                pods_fit=0,
                gpus_needed=gang.total.gpu,
                free_gpus=free_gpus,
            )
        short_totals = _free_totals_short(gang, index)
        if short_totals is not None:
            return short_totals
        if not node_fit:
            return None
        fit = fit_gang(gang, snapshot, gpu_model=model)
        if fit.ok:
            ctx.fit = fit
            return None
        role = next(r for r in gang.roles if r.name == fit.failed_role)
        return FilterResult.reject(
            DOES_NOT_FIT,
            f"{_needs(gang, role, model=model)}; at most {fit.failed_role_fit} fit node by node "
            "(free cpu, memory, GPUs, rdma/hca, node selector and taints)",
            pods_needed=role.replicas,
            pods_fit=fit.failed_role_fit,
        )


def _within_free_bounds(gang: GangRequest, index: ClusterIndex, model: str | None) -> bool:
    """Stage 2 for one model: the free-GPU histogram, the free GPU total and the free cpu/memory totals."""
    if model is not None and gang.needs_gpu:
        if _gpu_shortfall(gang, index, model=model, capacity=False) is not None:
            return False
        if gang.total.gpu > index.free_gpu_by_model.get(model, 0):
            return False
    return _free_totals_short(gang, index) is None


def step_bound(elastic: GangRequest, index: ClusterIndex, *, model: str | None, cap: int) -> int:
    """The largest step <= `cap` whose size passes stage 2 on `model` (0 if only the minimum may)."""
    low, high = 0, cap
    while low < high:
        middle = (low + high + 1) // 2
        if _within_free_bounds(elastic.sized(middle), index, model):
            low = middle
        else:
            high = middle - 1
    return low


def largest_fit(elastic: GangRequest, snapshot: ClusterSnapshot, fit: GangFit, *, cap: int) -> tuple[GangRequest, GangFit]:
    """The elastic gang at the largest step <= `cap` that fits node by node, and its fit.

    `fit` is the fit of its minimum (step 0) on `snapshot`. Packings: one when the step the
    node-fit bound allows fits, two for a one-role gang, else a binary search.
    """
    model = fit.gpu_model
    top = step_bound(elastic, snapshot.index, model=model, cap=cap)
    if top == 0:
        return elastic.minimum, fit
    tried = fit_gang(elastic.sized(top), snapshot, gpu_model=model)
    if tried.ok:
        return elastic.sized(top), tried
    low, high, best = 0, top, fit  # step `low` fits (`best`), step `high` does not
    if len(elastic.roles) == 1:
        # The greedy count is exact for one role: the pods that fit, minus the minimum, is the step.
        guess = min(top - 1, max(0, tried.failed_role_fit - elastic.roles[0].low))
        if guess == 0:
            return elastic.minimum, fit
        again = fit_gang(elastic.sized(guess), snapshot, gpu_model=model)
        if again.ok:
            return elastic.sized(guess), again
        high = guess  # not expected (the count is exact); searched below all the same
    while high - low > 1:
        middle = (low + high) // 2
        attempt = fit_gang(elastic.sized(middle), snapshot, gpu_model=model)
        if attempt.ok:
            low, best = middle, attempt
        else:
            high = middle
    return elastic.sized(low), best


def largest_step_bound(elastic: GangRequest, snapshot: ClusterSnapshot, ctx: EvalContext) -> int:
    """An upper bound on the step gang-fit can find on this cluster, before any packing (for scores)."""
    if not elastic.needs_gpu:
        return step_bound(elastic, snapshot.index, model=None, cap=ctx.max_step(None))
    models = ctx.gpu_models if ctx.gpu_models is not None else candidate_gpu_models(elastic, snapshot.index)
    best = 0
    for model in models:
        best = max(best, step_bound(elastic, snapshot.index, model=model, cap=ctx.max_step(model)))
        if best >= elastic.steps:
            break
    return best
