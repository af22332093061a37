"""Team queues of a replay with `--queues`: each trace cluster a queue, its quota its share of the GPUs.

The ITP trace has no teams or queues, but every job comes from one of ten
clusters, each run for its own users: a replay with queues makes each
trace cluster a team queue (`trace_queues`):
- name and namespace: the trace cluster (`cluster04`; a job's gang key is
  `cluster04/<uid>`, so the namespace is its trace cluster);
- nominal quota, per GPU model of the federation: the model's GPUs in the
  whole federation (every cluster of the clusters file) shared out in
  proportion to the GPU-hours the queue's replayed jobs submit (GPUs x
  traced duration), by largest remainder (ties by queue name), so the
  queues' nominal quotas add up to exactly the federation's GPUs of each
  model. GPU-hours, not the home cluster's size: the trace says what each
  team asked for, while the clusters file's sizes are our assumption. A
  queue with no replayed jobs gets 0 (it can still borrow);
- all queues in one cohort (`itp`), no borrowing limit (any idle quota of
  the cohort may be borrowed), weight 1, `withinQueue: LowerPriority`,
  `reclaimBorrowed: true`; cpu and memory are not limited.

`describe_queues` says it in words for the report. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from federator.placement import QueueQuota, QuotaAmounts, WithinQueue
from federator.replay.attributes import ReplayJob
from federator.replay.clusters import Federation

__all__ = [
    "QUEUE_COHORT",
    "QUEUE_POLICY",
    "QUEUE_POLICY_BY_START",
    "apportion",
    "describe_queues",
    "federation_gpus",
    "queue_gpu_hours",
    "trace_queues",
]

QUEUE_COHORT = "itp"
# The policy that replays with these queues: federator's, given them (`FederatorPolicy(queues=...)`).
QUEUE_POLICY = "federator-queues"
# The same with the victim order before checkpoints (`--compare-victims`): among victims of equal priority the
# most recently started first, whatever each loses (`Profile(victims_by_lost_work=False)`).
QUEUE_POLICY_BY_START = "federator-queues-by-start"


def federation_gpus(federation: Federation) -> dict[str, int]:
    """GPUs of each model over every cluster of the federation (sorted by model)."""
    totals: dict[str, int] = {}
    for spec in federation.clusters:
        for pool in spec.pools:
            totals[pool.gpu_model] = totals.get(pool.gpu_model, 0) + pool.nodes * pool.gpus_per_node
    return dict(sorted(totals.items()))


def queue_gpu_hours(jobs: Iterable[ReplayJob], names: Iterable[str]) -> dict[str, float]:
    """GPU-hours (GPUs x traced duration / 3600) the jobs of each queue (trace cluster) submit."""
    hours = dict.fromkeys(sorted(names), 0.0)
    for job in jobs:
        if job.trace_cluster not in hours:
            raise ValueError(f"job {job.uid} comes from {job.trace_cluster!r}, which is no queue")
        hours[job.trace_cluster] += job.gpus * job.duration / 3600.0
    return hours


def apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`total` shared in proportion to `weights` by largest remainder (ties by name); equal weights if all 0."""
    if total < 0:
        raise ValueError(f"total must not be negative, got {total}")
    if not weights:
        return {}
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError("weights must be finite and non-negative")
    names = sorted(weights)
    whole = sum(weights.values())
    shares = {n: (weights[n] / whole if whole > 0 else 1 / len(names)) * total for n in names}
    out = {n: math.floor(shares[n]) for n in names}
    left = total - sum(out.values())
    for name in sorted(names, key=lambda n: (-(shares[n] - out[n]), n))[:left]:
        out[name] += 1
    return out


def trace_queues(jobs: Sequence[ReplayJob], federation: Federation) -> dict[str, QueueQuota]:
    """One queue per trace cluster of the federation, with the quota rule of the module docstring."""
    hours = queue_gpu_hours(jobs, federation.home_of)
    quotas: dict[str, dict[str, int]] = {name: {} for name in hours}
    for model, total in federation_gpus(federation).items():
        for name, count in apportion(total, hours).items():
            quotas[name][model] = count
    return {
        name: QueueQuota(
            name=name,
            nominal=QuotaAmounts(gpus=quotas[name]),
            cohort=QUEUE_COHORT,
            borrowing_limit=None,
            weight=1.0,
            within_queue=WithinQueue.LOWER_PRIORITY,
            reclaim_borrowed=True,
        )
        for name in hours
    }


def describe_queues(queues: Mapping[str, QueueQuota]) -> str:
    """The queue rule in words, for report.json's `queues.rule` and report.md."""
    return (
        f"{len(queues)} queues, one per trace cluster (namespace = queue = the trace cluster). Nominal quota per "
        "GPU model: the federation's GPUs of that model shared in proportion to the GPU-hours (GPUs x traced "
        "duration) the queue's replayed jobs submit, by largest remainder, so the nominal quotas add up to the "
        f"federation's GPUs. All in one cohort ({QUEUE_COHORT}) with no borrowing limit, weight 1, withinQueue "
        "LowerPriority, reclaimBorrowed true; cpu and memory not limited."
    )
