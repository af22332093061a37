"""The attribute rule: what the trace does not say about a job, drawn by a stated, seeded rule.

The ITP trace gives each job a submission time, a duration and a GPU
count; a federation also needs its gang shape, dataset, network need,
GPU-model constraint and team, and a replay with queues (`--queues`) a
priority: the trace has no notion of one, so it is drawn too (a stated
mix; without queues every job has priority 0), and a checkpoint interval
(`checkpoint_draw`: a share of the jobs never checkpoint, the others
checkpoint every 10 min, 30 min, 1 h or 2 h of their run, uniform; drawn
from BLAKE2b of "<seed>/checkpoint/<job uid>", so no other draw moves; only
an eviction reads it, and evictions happen only with queues). `RULE` fixes how they are drawn and
`describe_rule()` says it in words (printed in every report). Each job's
draws come from BLAKE2b of "<seed>/<job uid>", so a job's attributes depend
only on the seed, the job and the clusters file (for its home's models and
datasets), never on which other jobs are replayed or in what order: every
figure is reproducible from (trace, clusters file, seed, rule).

Pure: no I/O, no global random state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from federator.replay.clusters import Federation
from federator.replay.trace import TraceJob

__all__ = [
    "RULE",
    "AttributeRule",
    "ReplayJob",
    "assign_attributes",
    "checkpoint_draw",
    "describe_rule",
    "elastic_draw",
]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class AttributeRule:
    """The parameters of the rule (changing one changes the rule's text, and so the report)."""

    max_single_pod_gpus: int = 8
    # Jobs above max_single_pod_gpus: workers of 8 GPUs, or of 4 with this probability.
    four_gpu_worker_share: float = 0.25
    cpu_cores_per_gpu: int = 8
    memory_gib_per_gpu: int = 64
    # Multi-pod gangs: network need rdma / ethernet (the rest: any).
    rdma_share: float = 0.6
    ethernet_share: float = 0.1
    # Share of jobs pinned to one GPU model of their home cluster.
    pinned_model_share: float = 0.3
    # Dataset: none / one of the home's cached datasets / one of all datasets.
    no_dataset_share: float = 0.1
    home_dataset_share: float = 0.7
    teams_per_trace_cluster: int = 4
    # A multi-pod gang that needs RDMA but runs on Ethernet runs this much longer.
    fabric_mismatch_slowdown: float = 1.3
    # With queues: (priority, share) of the jobs, drawn per job; the shares sum to 1.
    priority_mix: tuple[tuple[int, float], ...] = ((0, 0.25), (100, 0.65), (1000, 0.10))
    # Share of the multi-GPU jobs made elastic (`--elastic-share`): data-parallel, one worker per GPU,
    # min = half the workers (rounded up), max = all.
    elastic_share: float = 0.0
    # The replay without elasticity: the same jobs drawn elastic keep their one-GPU workers, fixed (min = max).
    elastic_fixed: bool = False
    # With queues: the share of jobs that never checkpoint; the others checkpoint every one of these many
    # seconds of their run (uniform), from a draw of their own (`checkpoint_draw`).
    no_checkpoint_share: float = 0.25
    checkpoint_intervals: tuple[float, ...] = (600.0, 1800.0, 3600.0, 7200.0)


RULE = AttributeRule()


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """One trace job with every attribute the replay needs."""

    uid: str
    index: int
    trace_cluster: str
    home: str
    team: str
    submitted: float
    duration: float
    gpus: int
    pods: int
    gpus_per_pod: int
    cpu_milli_per_pod: int
    memory_per_pod: int
    network: str  # rdma | ethernet | any
    gpu_model: str | None
    dataset: str | None
    dataset_bytes: int
    # 0 unless priorities were drawn (a replay with queues).
    priority: int = 0
    # An elastic gang's minimum pods (its max is `pods`); 0 for a fixed-size gang.
    min_pods: int = 0
    # With queues: seconds of its run between two checkpoints (0: it never checkpoints); see `checkpoint_draw`.
    checkpoint_seconds: float = 0.0

    @property
    def multi_pod(self) -> bool:
        return self.pods > 1

    @property
    def elastic(self) -> bool:
        return 0 < self.min_pods < self.pods

    @property
    def low(self) -> int:
        """Pods at the gang's minimum: `min_pods` for an elastic gang, else every pod."""
        return self.min_pods if self.elastic else self.pods


def describe_rule(rule: AttributeRule = RULE, *, priorities: bool = False) -> str:
    """The rule in words, for report.json's `rule` and report.md."""
    r = rule
    other_dataset = 1 - r.no_dataset_share - r.home_dataset_share
    if priorities:
        mix = ", ".join(f"{value} with probability {share:g}" for value, share in r.priority_mix)
        intervals = ", ".join(f"{seconds / 60:g} min" for seconds in r.checkpoint_intervals)
        priority_text = (
            f"Priority (the trace has none; drawn because queues are replayed): {mix}, from the digest's eighth "
            "draw, so every other attribute is the same as without queues. "
            "Checkpoints (the trace has none; drawn because queues are replayed, and only an eviction reads "
            "them): from BLAKE2b('<seed>/checkpoint/<job uid>'), u uniform in [0, 1): the job never "
            f"checkpoints if u < {r.no_checkpoint_share:g}, else it checkpoints every I seconds of its run, I "
            f"one of {intervals} (uniform over the rest of u). Its first checkpoint comes I seconds after "
            "its training starts (after any dataset copy), then every I seconds, at no cost. An evicted job "
            "keeps the work up to its last checkpoint: its next copy resumes from there (it still copies its "
            "dataset if its new cluster lacks it), and GPU-hours lost to preemption are its GPUs times the "
            "time since that checkpoint (or, without one in that run, since the run was bound). "
        )
    else:
        priority_text = "All jobs have priority 0. "
    return (
        "Per job, uniform draws from BLAKE2b('<seed>/<job uid>') (uid = '<trace cluster>-<row>'). "
        f"Gang shape: a job of at most {r.max_single_pod_gpus} GPUs is one pod with all its GPUs; a larger job is "
        f"workers of 8 GPUs (or of 4 GPUs with probability {r.four_gpu_worker_share:g}); each pod asks "
        f"{r.cpu_cores_per_gpu} CPU cores and {r.memory_gib_per_gpu}Gi memory per GPU. "
        f"Network need: multi-pod gangs ask rdma with probability {r.rdma_share:g}, ethernet with "
        f"{r.ethernet_share:g}, else any; one-pod jobs ask any. "
        f"GPU model: with probability {r.pinned_model_share:g} the job is pinned (placement.gpuModels and a "
        "nodeSelector nvidia.com/gpu.product) to one model of its home cluster, drawn in proportion to that "
        "model's GPUs there among the models whose home pool could hold the gang; otherwise any model. "
        f"Dataset: none with probability {r.no_dataset_share:g}, one of the home cluster's cached datasets "
        f"(uniform) with {r.home_dataset_share:g}, one of all datasets in the clusters file (uniform) with "
        f"{other_dataset:g}; its size is the largest size any cluster declares for it. A dataset missing in "
        "the cluster that runs the job is copied in before the job starts, taking size / that cluster's "
        "bandwidthGbps while the gang holds its GPUs. "
        f"Team: one of {r.teams_per_trace_cluster} teams per trace cluster (uniform). {priority_text}"
        f"A multi-pod gang that asked for rdma and runs on an Ethernet cluster runs "
        f"{r.fabric_mismatch_slowdown:g} times its traced duration."
        + (_elastic_text(r) if r.elastic_share > 0 else "")
    )


def _elastic_text(r: AttributeRule) -> str:
    fixed = (
        " This replay is the one without elasticity: the same jobs keep that shape, fixed (minReplicas = "
        "maxReplicas = N)."
        if r.elastic_fixed
        else " The replay without elasticity keeps the same jobs in that shape, fixed (minReplicas = maxReplicas "
        "= N), so the two differ only in elasticity."
    )
    return (
        f" Elastic: a multi-GPU job (N >= 2 GPUs) is elastic with probability {r.elastic_share:g}, drawn from "
        "BLAKE2b('<seed>/elastic/<job uid>') (so the other draws, and which jobs are elastic, are the same for "
        "every policy). An elastic job is data-parallel: its gang is N workers of 1 GPU each (each asking "
        f"{r.cpu_cores_per_gpu} CPU cores and {r.memory_gib_per_gpu}Gi memory), maxReplicas = replicas = N, "
        "minReplicas = N/2 rounded up; its network need, GPU model and dataset are those drawn above for its "
        f"gang shape (a job of at most {r.max_single_pod_gpus} GPUs asks any network), and the rule draws no "
        f"parameter-server pods.{fixed} Work: the trace fixes its GPU-seconds, so at s of its N workers it runs "
        "N/s times its traced duration (linear scaling); a resize recomputes what is left. Members admit an "
        "elastic gang when its minimum fits node by node (all or nothing at the minimum) at the largest size up "
        "to what was written that fits then, as "
        "Volcano does with minMember and extra pods; pods that did not fit are not placed later by the member. "
        "federator places it at the largest size that fits (placement's elastic sizing) and its grow pass "
        "(every 5 s after a gang left its cluster, 60 s cooldown from placement or resize, pending gangs "
        "first: placement.plan_growth) grows it toward max. The baselines get only their members' admission, "
        "and never grow a gang: Armada asks its fit for the minimum (its gangMinimumCardinality); first-fit, "
        "random, none, Karmada and MultiKueue decide on the whole gang as before."
    )


def checkpoint_draw(seed: int, uid: str, rule: AttributeRule = RULE) -> float:
    """Seconds of its run between two checkpoints for a job (0: it never checkpoints); see `describe_rule`."""
    digest = hashlib.blake2b(f"{seed}/checkpoint/{uid}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2.0**64
    share = rule.no_checkpoint_share
    intervals = rule.checkpoint_intervals
    if u < share or not intervals:
        return 0.0
    return intervals[min(len(intervals) - 1, int((u - share) / (1 - share) * len(intervals)))]


def elastic_draw(seed: int, uid: str) -> float:
    """The job's uniform draw in [0, 1) for elasticity (a digest of its own: the other draws do not move)."""
    digest = hashlib.blake2b(f"{seed}/elastic/{uid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class _Draws:
    """Uniform numbers in [0, 1) from one BLAKE2b digest (8 per job; one per attribute, the 8th the priority)."""

    __slots__ = ("_digest", "_next")

    def __init__(self, seed: int, uid: str) -> None:
        self._digest = hashlib.blake2b(f"{seed}/{uid}".encode(), digest_size=64).digest()
        self._next = 0

    def uniform(self) -> float:
        start = self._next * 8
        self._next += 1
        return int.from_bytes(self._digest[start:start + 8], "big") / 2.0**64


def _pick(items: Sequence[str], u: float) -> str:
    return items[min(len(items) - 1, int(u * len(items)))]


def _weighted(items: Sequence[tuple[str, int]], u: float) -> str:
    total = sum(w for _, w in items)
    acc = 0.0
    for name, weight in items:
        acc += weight / total
        if u < acc:
            return name
    return items[-1][0]


def _priority(mix: Sequence[tuple[int, float]], u: float) -> int:
    acc = 0.0
    for value, share in mix:
        acc += share
        if u < acc:
            return value
    return mix[-1][0]


def assign_attributes(
    jobs: Sequence[TraceJob],
    federation: Federation,
    *,
    seed: int,
    rule: AttributeRule = RULE,
    priorities: bool = False,
) -> list[ReplayJob]:
    """Every trace job with its drawn attributes (in the given order); `priorities`: draw each job's too."""
    if not 0 <= rule.elastic_share <= 1:
        raise ValueError(f"elastic_share must be from 0 to 1, got {rule.elastic_share!r}")
    if priorities and (not rule.priority_mix or abs(sum(s for _, s in rule.priority_mix) - 1) > 1e-9):
        raise ValueError(f"priority_mix must be (priority, share) pairs whose shares sum to 1: {rule.priority_mix}")
    if not 0 <= rule.no_checkpoint_share < 1 or not all(i > 0 for i in rule.checkpoint_intervals):
        raise ValueError("no_checkpoint_share must be in [0, 1) and every checkpoint interval positive")
    sizes = federation.dataset_sizes
    catalogue = tuple(sizes)
    specs = {c.name: c for c in federation.clusters}
    out: list[ReplayJob] = []
    for index, job in enumerate(jobs):
        draws = _Draws(seed, job.uid)
        home = federation.home_of[job.cluster]
        spec = specs[home]
        u_shape, u_net, u_pin, u_model, u_ds_kind, u_ds, u_team, u_priority = (draws.uniform() for _ in range(8))
        if job.gpus <= rule.max_single_pod_gpus:
            pods, per_pod = 1, job.gpus
        else:
            per_pod = 4 if u_shape < rule.four_gpu_worker_share else 8
            pods = -(-job.gpus // per_pod)
        network = "any"
        if pods > 1:
            if u_net < rule.rdma_share:
                network = "rdma"
            elif u_net < rule.rdma_share + rule.ethernet_share:
                network = "ethernet"
        model: str | None = None
        if u_pin < rule.pinned_model_share:
            # Models of the home whose pools could hold the whole gang node by node.
            able: dict[str, int] = {}
            for pool in spec.pools:
                if pool.gpus_per_node >= per_pod:
                    able[pool.gpu_model] = able.get(pool.gpu_model, 0) + pool.nodes * (pool.gpus_per_node // per_pod)
            choices = sorted((m, n * per_pod) for m, n in able.items() if n >= pods)
            if choices:
                model = _weighted(choices, u_model)
        dataset: str | None = None
        if catalogue and u_ds_kind >= rule.no_dataset_share:
            home_sets = tuple(sorted(spec.datasets))
            if home_sets and u_ds_kind < rule.no_dataset_share + rule.home_dataset_share:
                dataset = _pick(home_sets, u_ds)
            else:
                dataset = _pick(catalogue, u_ds)
        min_pods = 0
        if job.gpus > 1 and rule.elastic_share and elastic_draw(seed, job.uid) < rule.elastic_share:
            # Data-parallel: one worker per GPU; every attribute above stays as drawn for the gang shape.
            pods, per_pod = job.gpus, 1
            min_pods = 0 if rule.elastic_fixed else -(-pods // 2)
        out.append(
            ReplayJob(
                uid=job.uid,
                index=index,
                trace_cluster=job.cluster,
                home=home,
                team=f"{job.cluster}/team-{int(u_team * rule.teams_per_trace_cluster)}",
                submitted=job.submitted,
                duration=job.duration,
                gpus=job.gpus,
                pods=pods,
                gpus_per_pod=per_pod,
                cpu_milli_per_pod=per_pod * rule.cpu_cores_per_gpu * 1000,
                memory_per_pod=per_pod * rule.memory_gib_per_gpu * GIB,
                network=network,
                gpu_model=model,
                dataset=dataset,
                dataset_bytes=sizes.get(dataset, 0) if dataset else 0,
                priority=_priority(rule.priority_mix, u_priority) if priorities else 0,
                min_pods=min_pods,
                checkpoint_seconds=checkpoint_draw(seed, job.uid, rule) if priorities else 0.0,
            )
        )
    return out
