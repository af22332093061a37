"""Benchmark of the pure placement engine: decisions per second and p99 decision latency.

Scenarios: 20 clusters x 500 nodes and 100 clusters x 1,000 nodes,
20x500-unplaceable: 20 x 500 where 20% of the gangs fit nowhere,
20x500-preemption: 20 x 500 with team queues where 30% of the gangs need preemption, and
20x500-elastic: 20 x 500 where 30% of the gangs are elastic, beside the same gangs all fixed.
Bars (issue 5): 20x500 >= 2,000 decisions/s with p99 <= 2 ms; 100x1000 >= 500 decisions/s;
(issue 15) 20x500-unplaceable >= 2,000 decisions/s, unplaceable gangs included;
(issue 17) 20x500-preemption >= 1,000 decisions/s, each preemption included.

Workload (seeded; stated here because the trace carries none of it):
- Gang sizes: `num_gpu` of the jobs in the Microsoft ITP traces (read from
  ../shared/traces/itp, or --trace DIR or FILE.csv; never copied into the project),
  sampled with replacement. A job of g <= 8 GPUs is one pod of g GPUs; a
  bigger one is g/8 pods of 8 GPUs (the multi-node jobs). Each pod asks
  8 cores and 64Gi per GPU. Multi-node jobs need RDMA (one rdma/hca per
  pod); single-node jobs take any network. 30% of gangs accept only one GPU
  model (drawn from the federation's models), 20% name one of 8 datasets.
- Clusters: 60% on-prem InfiniBand A100 (1 HCA per node), 20% on-prem RoCE
  H100, 20% cloud Ethernet H100 (higher cost); every node has 8 GPUs,
  96 cores, 1Ti; 5% of on-prem nodes are tainted, 1% not ready. Nodes
  start with a random load (30% empty, 30% full, the rest 1-7 GPUs used),
  which fragments the free GPUs the way a busy federation does.
- Unplaceable gangs (scenario 20x500-unplaceable): a seeded 20% of the
  gangs are replaced by gangs that fit in no cluster, a quarter of them of
  each kind, so that each kind of "no" is paid for: 600 pods of 8 GPUs with
  RDMA (more pods than any cluster has RDMA nodes: InsufficientRdma, or
  FabricMismatch on Ethernet);
  300 pods of 8 GPUs with RDMA (fits an empty cluster, never the free GPUs
  of a loaded one: InsufficientGpu); 1 pod of 8 B200 GPUs (a model no
  cluster has: GpuModelUnavailable); 2 pods of 8 GPUs and 128 cores with RDMA (the GPU and
  total-CPU bounds pass, but no 96-core node could hold a pod: ExceedsCapacity). Each
  must end unplaced with a why-not row for every cluster (the bench checks;
  it prints how many other gangs the load left unplaced). On the loaded
  2-core machine the last kind cost 2.1 ms per gang (8 times a placeable
  one) while gang-fit found its "no" by visiting every node with 8 free
  GPUs; gang-fit now compares each pod with the largest node first
  (0.2 ms), which took this scenario from 2,154 and 2,459 decisions/s to
  3,735 and 3,260 (medians of 3, run alternately at load 3.3).
- Elastic gangs (scenario 20x500-elastic): a seeded 30% of the gangs get an
  elastic role: min_replicas = half its pods (at least 1), replicas = its
  pods, max_replicas = twice its pods (a one-pod gang: 1..2), so that at the
  steady state's load many do not fit at their maximum and placement
  searches the size. The same gangs, all fixed, run beside them on the same
  clusters (runs alternate); both rates and the pods each placed are printed.
- Steady state: decisions reserve what they take; once the federation's
  GPU utilisation passes 80%, the oldest placed gangs finish (their amounts
  are released) until it is back under, so clusters neither fill up nor
  empty out during the run.

Preemption (scenario 20x500-preemption; measured in cycles of 64 only):
- Four team queues (team-0..3) in one cohort, each with a quarter of the
  federation's GPUs of each model as nominal quota, withinQueue
  LowerPriority and reclaimBorrowed; every gang names a team (round robin).
- 10% of each cluster's nodes are a scarce pool of H200 nodes, always full:
  each holds 1-4 running gangs (8, 4+4, 4+2+2 or 2x4 GPUs, priority 0-2,
  random start times), each of the team using the least of the pool so far
  (so each team uses about its nominal quota; the few gangs beyond it run on
  borrowed quota), passed to `run_cycle` as `running` with their per-node
  amounts, like every gang the bench places.
- A seeded 30% of the gangs are urgent: priority 10, H200 only, 1 pod of
  up to 8 GPUs or 2 pods of 8 (from the trace's sizes). The pool is full, so
  each needs preemption (nodes, and its queue's quota: a preemptor must end
  within its nominal quota, so its victims are its own team's lower-priority
  gangs in the cluster it lands in, or gangs other teams run there on
  borrowed quota). After each cycle the bench evicts the victims (their
  amounts leave the views) and gives what they freed beyond the preemptor's
  need to new low-priority gangs of the victims' teams (a busy member
  backfills), and once urgent gangs hold more than a quarter of the pool,
  the oldest finish and new low-priority gangs of their team take their
  place, so victims never run out and every urgent gang needs a preemption.
- The other 70% are the usual gangs (priority 0, steady state as below).
- "without preemption": the same world and gangs, the queues' policies
  withinQueue Never and no reclaim: the urgent gangs stay unplaced (the
  ratio is the cost of planning and doing preemption); "without queues":
  no queues at all (the cost of admission and fair share on top).

Two measurements per run:
- latency: one gang per `run_cycle` call (the cycle's fixed cost is
  included, so this is an upper bound of a decision inside a larger cycle);
  the p99 of the per-call times (the latency bar), and decisions/s;
- throughput: the same gangs in cycles of 64 (how the placement controller
  calls it); decisions/s (the throughput bar).
Every evaluated gang counts as a decision, placed or not.

Usage: .venv/bin/python bench/placement.py [--runs 3] [--gangs 2000] [--trace DIR] [--scenario 20x500]
           [--quick] [--json FILE] [--strict]
Prints one line per run and the medians; exits non-zero on a missed bar only
with --strict (the machine is shared, so a noisy run should not break
`make bench`). Never part of the test run.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from federator.placement import (
    ClusterInfo,
    ClusterSnapshot,
    GangRequest,
    NodeState,
    Profile,
    QueueQuota,
    QuotaAmounts,
    Resources,
    RoleRequest,
    RunningGang,
    Taint,
    Unplaced,
    WithinQueue,
    run_cycle,
)
from federator.placement.reservation import EMPTY_BOOK

from benchresult import BenchResult

GI = 2**30
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "itp"
DATASETS = [f"dataset-{i}" for i in range(8)]
# name -> (clusters, nodes per cluster, share of gangs that fit nowhere)
SCENARIOS = {
    "20x500": (20, 500, 0.0),
    "100x1000": (100, 1000, 0.0),
    "20x500-unplaceable": (20, 500, 0.2),
    "20x500-preemption": (20, 500, 0.0),
    "20x500-elastic": (20, 500, 0.0),
}
BARS = {
    "20x500": (2000.0, 2.0),
    "100x1000": (500.0, None),
    "20x500-unplaceable": (2000.0, None),
    "20x500-preemption": (1000.0, None),
    # No bar of its own in issue 19: the 20x500 bar, so that elasticity is seen not to cost it.
    "20x500-elastic": (2000.0, None),
}
DEFAULT_SCENARIOS = ("20x500", "100x1000", "20x500-unplaceable", "20x500-preemption", "20x500-elastic")
# Scenario -> share of gangs that are elastic.
ELASTIC = {"20x500-elastic": 0.3}
# Scenario -> share of gangs that need preemption.
PREEMPTION = {"20x500-preemption": 0.3}
TEAMS = 4
POOL_SHARE = 0.1
POOL_MODEL = "H200"
URGENT_PRIORITY = 10
# The kinds of gang that fit nowhere, in turn: (pods, GPUs per pod, cores per pod, RDMA, GPU models).
UNPLACEABLE_KINDS = {
    "exceeds-capacity": (600, 8, 8, 1, ()),
    "short-of-free-gpus": (300, 8, 8, 1, ()),
    "model-nowhere": (1, 8, 8, 0, ("B200",)),
    "pod-bigger-than-nodes": (2, 8, 128, 1, ()),
}


def read_gpu_counts(trace: Path) -> list[int]:
    """`num_gpu` of every job in a trace CSV, or in every cluster*.csv of a trace directory."""
    files = [trace] if trace.is_file() else sorted(trace.glob("cluster*.csv"))
    if not files:
        raise SystemExit(f"no cluster*.csv in {trace}: give the ITP trace directory or a CSV with --trace")
    counts: list[int] = []
    for path in files:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                try:
                    gpus = int(row["num_gpu"])
                except (KeyError, TypeError, ValueError) as error:
                    raise SystemExit(f"{path}: not an ITP trace (bad num_gpu in {row}): {error}") from None
                if gpus > 0:
                    counts.append(gpus)
    if not counts:
        raise SystemExit(f"{trace}: no job with GPUs")
    return counts


def make_clusters(count: int, nodes_per_cluster: int, rng: random.Random) -> dict[str, ClusterSnapshot]:
    clusters: dict[str, ClusterSnapshot] = {}
    for c in range(count):
        kind = c % 5
        if kind in (0, 1, 2):
            info = ClusterInfo(
                location="on-prem", fabric="rdma", rdma_kind="infiniband", bandwidth_gbps=200,
                cost_per_gpu_hour=1.8, datasets={DATASETS[c % 8]: (c + 1) * 100 * GI},
                labels={"tier": "research" if c % 2 else "prod"},
            )
            model, rdma = "A100", 1
        elif kind == 3:
            info = ClusterInfo(
                location="on-prem", fabric="rdma", rdma_kind="roce", bandwidth_gbps=100,
                cost_per_gpu_hour=2.2, datasets={DATASETS[(c + 3) % 8]: 500 * GI},
            )
            model, rdma = "H100", 1
        else:
            info = ClusterInfo(location="cloud", fabric="ethernet", bandwidth_gbps=50, cost_per_gpu_hour=4.0)
            model, rdma = "H100", 0
        nodes = []
        for n in range(nodes_per_cluster):
            draw = rng.random()
            used = 0 if draw < 0.3 else 8 if draw < 0.6 else rng.randint(1, 7)
            tainted = info.location == "on-prem" and rng.random() < 0.05
            nodes.append(
                NodeState(
                    name=f"c{c:03d}-node-{n:04d}",
                    allocatable=Resources(96_000, 1024 * GI, 8, rdma),
                    allocated=Resources(used * 8_000, used * 64 * GI, used, rdma if used == 8 else 0),
                    gpu_model=model,
                    ready=rng.random() >= 0.01,
                    taints=(Taint("dedicated", "infra"),) if tainted else (),
                )
            )
        name = f"cluster-{c:03d}"
        clusters[name] = ClusterSnapshot.build(name=name, info=info, nodes=nodes, resource_version="1")
    return clusters


def make_gangs(count: int, gpu_counts: Sequence[int], rng: random.Random) -> list[GangRequest]:
    gangs = []
    for i in range(count):
        gpus = rng.choice(gpu_counts)
        if gpus <= 8:
            pods, per_pod = 1, gpus
        else:
            pods, per_pod = gpus // 8, 8
        multi_node = pods > 1
        requests = Resources(per_pod * 8_000, per_pod * 64 * GI, per_pod, 1 if multi_node else 0)
        gangs.append(
            GangRequest(
                key=f"bench/job-{i}",
                uid=f"uid-{i}",
                roles=(RoleRequest("worker", pods, requests),),
                network="rdma" if multi_node else "any",
                gpu_models=(rng.choice(["A100", "H100"]),) if rng.random() < 0.3 else (),
                datasets=(rng.choice(DATASETS),) if rng.random() < 0.2 else (),
                submitted_at=float(i),
            )
        )
    return gangs


def plant_unplaceable(gangs: list[GangRequest], share: float, rng: random.Random) -> dict[str, str]:
    """Replace a seeded `share` of the gangs (in place) by gangs that fit nowhere; uid -> kind."""
    count = round(len(gangs) * share)
    kinds = list(UNPLACEABLE_KINDS)
    planted: dict[str, str] = {}
    for n, i in enumerate(sorted(rng.sample(range(len(gangs)), count))):
        kind = kinds[n % len(kinds)]
        pods, gpus, cores, rdma, models = UNPLACEABLE_KINDS[kind]
        old = gangs[i]
        gangs[i] = GangRequest(
            key=old.key, uid=old.uid,
            roles=(RoleRequest("worker", pods, Resources(cores * 1000, gpus * 64 * GI, gpus, rdma)),),
            network="rdma" if rdma else "any", gpu_models=models, submitted_at=old.submitted_at,
        )
        planted[old.uid] = kind
    return planted


def make_elastic(gangs: list[GangRequest], share: float, rng: random.Random) -> list[GangRequest]:
    """A copy of the gangs where a seeded `share` have an elastic role: min half its pods, max twice them."""
    out = list(gangs)
    for i in sorted(rng.sample(range(len(gangs)), round(len(gangs) * share))):
        old = gangs[i]
        (role,) = old.roles
        pods = role.replicas
        elastic_role = RoleRequest(role.name, pods, role.requests, max(1, pods // 2), 2 * pods)
        out[i] = replace(old, roles=(elastic_role,))
    return out


def _utilisation(views: dict[str, ClusterSnapshot], capacity: int) -> float:
    free = sum(sum(s.index.free_gpu_by_model.values()) for s in views.values())
    return 1.0 - free / capacity


@dataclass
class RunResult:
    latency_rate: float
    p99_ms: float
    batch_rate: float
    placed: int
    unplaced: int
    # Unplaced gangs that were not planted as unplaceable (the load left no room for them).
    unplaced_other: int
    # Pods of the gangs placed (one gang per cycle): what elastic sizes add up to.
    pods_placed: int = 0
    # Decisions per second of this process's CPU time in cycles of 64 (steadier than wall time on a shared machine).
    batch_cpu_rate: float = 0.0


def _check_unplaced(
    unplaced: Sequence[Unplaced], *, planted: dict[str, str], clusters: int
) -> int:
    """Count the unplaced gangs that were not planted; fail if a planted one lacks a full why-not table."""
    others = 0
    for gang in unplaced:
        if len(gang.why_not) != clusters:
            raise SystemExit(f"{gang.gang_key}: why-not table has {len(gang.why_not)} rows, not {clusters}")
        if gang.gang_uid not in planted:
            others += 1
    return others


def run_once(
    clusters: dict[str, ClusterSnapshot], gangs: list[GangRequest], profile: Profile, *, planted: dict[str, str]
) -> RunResult:
    capacity = sum(
        node.allocatable.gpu for s in clusters.values() for node in s.nodes.values() if node.eligible
    )
    # The hold rule needs aged gangs; the bench measures the steady decision path, so none age.
    now = 1.0
    latencies: list[float] = []
    placed = unplaced = others = pods = 0
    views = dict(clusters)
    running: deque[tuple[str, dict[str, Resources]]] = deque()
    for gang in gangs:
        start = time.perf_counter()
        result = run_cycle([gang], views, profile, now=now, reservations=EMPTY_BOOK)
        latencies.append(time.perf_counter() - start)
        views = dict(result.snapshots)
        for decision in result.decisions:
            if decision.gang_uid in planted:
                raise SystemExit(f"{decision.gang_key} ({planted[decision.gang_uid]}) was placed in {decision.cluster}")
            reservation = result.reservations.get(decision.gang_uid)
            assert reservation is not None
            running.append((decision.cluster, dict(reservation.amounts)))
            placed += 1
            pods += len(decision.assignment)
        unplaced += len(result.unplaced)
        others += _check_unplaced(result.unplaced, planted=planted, clusters=len(clusters))
        while running and _utilisation(views, capacity) > 0.8:
            cluster, amounts = running.popleft()
            views[cluster] = views[cluster].with_allocation_changes(amounts, release=True)
    total = sum(latencies)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]

    views = dict(clusters)
    running.clear()
    batch_time = batch_cpu = 0.0
    for start_index in range(0, len(gangs), 64):
        batch = gangs[start_index : start_index + 64]
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run_cycle(batch, views, profile, now=now, reservations=EMPTY_BOOK)
        batch_time += time.perf_counter() - start
        batch_cpu += time.process_time() - start_cpu
        views = dict(result.snapshots)
        _check_unplaced(result.unplaced, planted=planted, clusters=len(clusters))
        for decision in result.decisions:
            reservation = result.reservations.get(decision.gang_uid)
            assert reservation is not None
            running.append((decision.cluster, dict(reservation.amounts)))
        while running and _utilisation(views, capacity) > 0.8:
            cluster, amounts = running.popleft()
            views[cluster] = views[cluster].with_allocation_changes(amounts, release=True)
    return RunResult(
        latency_rate=len(gangs) / total,
        p99_ms=p99 * 1000,
        batch_rate=len(gangs) / batch_time,
        placed=placed,
        unplaced=unplaced,
        unplaced_other=others,
        pods_placed=pods,
        batch_cpu_rate=len(gangs) / batch_cpu if batch_cpu > 0 else 0.0,
    )


@dataclass
class PreemptionWorld:
    clusters: dict[str, ClusterSnapshot]
    running: dict[str, RunningGang]
    queues: dict[str, QueueQuota]
    gangs: list[GangRequest]
    urgent: set[str]
    pool_nodes: int


def _team(rng: random.Random) -> str:
    return f"team-{rng.randrange(TEAMS)}"


def make_preemption_world(
    count: int, nodes_per_cluster: int, gangs: list[GangRequest], gpu_counts: Sequence[int], *, share: float,
    rng: random.Random,
) -> PreemptionWorld:
    """The 20x500-preemption world (see the module docstring): a full H200 pool of running team gangs."""
    clusters = make_clusters(count, nodes_per_cluster, rng)
    running: dict[str, RunningGang] = {}
    pool_nodes = 0
    # Each pool gang goes to the team using the least of the pool so far, so that every team uses its
    # share (its nominal quota of H200s); the cohort's other gangs are all the other queues' own.
    team_use = [0] * TEAMS
    for name, snapshot in list(clusters.items()):
        pool = sorted(rng.sample(sorted(snapshot.nodes), round(len(snapshot.nodes) * POOL_SHARE)))
        pool_nodes += len(pool)
        updated = []
        for node_name in pool:
            old = snapshot.nodes[node_name]
            load = Resources()
            for gpus in rng.choice([[8], [4, 4], [4, 2, 2], [2, 2, 2, 2]]):
                amount = Resources(gpus * 8_000, gpus * 64 * GI, gpus, 0)
                uid = f"bg-{len(running)}"
                team = min(range(TEAMS), key=lambda t: (team_use[t], t))
                team_use[team] += gpus
                running[uid] = RunningGang(
                    uid=uid, key=f"bench/{uid}", cluster=name, queue=f"team-{team}", priority=rng.randint(0, 2),
                    started_at=-1000.0 * rng.random(), demand=amount, gpu_model=POOL_MODEL,
                    amounts={node_name: amount},
                )
                load = load + amount
            updated.append(NodeState(name=node_name, allocatable=old.allocatable, allocated=load, gpu_model=POOL_MODEL))
        clusters[name] = snapshot.with_nodes(updated)
    capacity: dict[str, int] = {}
    for snapshot in clusters.values():
        for node in snapshot.nodes.values():
            if node.eligible:
                capacity[node.gpu_model] = capacity.get(node.gpu_model, 0) + node.allocatable.gpu
    queues = {
        f"team-{t}": QueueQuota(
            f"team-{t}", QuotaAmounts({model: total // TEAMS for model, total in capacity.items()}),
            cohort="research", within_queue=WithinQueue.LOWER_PRIORITY, reclaim_borrowed=True,
        )
        for t in range(TEAMS)
    }
    # A team's pool gangs beyond its nominal quota (the last started) run on quota borrowed from the cohort.
    for t in range(TEAMS):
        nominal = queues[f"team-{t}"].nominal.gpus.get(POOL_MODEL, 0)
        used = 0
        for gang in sorted((g for g in running.values() if g.queue == f"team-{t}"), key=lambda g: g.started_at):
            used += gang.demand.gpu
            if used > nominal:
                running[gang.uid] = replace(gang, borrowed=True)
    queued = [
        GangRequest(
            key=g.key, uid=g.uid, roles=g.roles, network=g.network, gpu_models=g.gpu_models, datasets=g.datasets,
            submitted_at=g.submitted_at, queue=f"team-{i % TEAMS}",
        )
        for i, g in enumerate(gangs)
    ]
    urgent: set[str] = set()
    for i in sorted(rng.sample(range(len(queued)), round(len(queued) * share))):
        old = queued[i]
        gpus = rng.choice(gpu_counts)
        pods, per_pod = (1, gpus) if gpus <= 8 else (2, 8)
        queued[i] = GangRequest(
            key=old.key, uid=old.uid,
            roles=(RoleRequest("worker", pods, Resources(per_pod * 8_000, per_pod * 64 * GI, per_pod, 0)),),
            gpu_models=(POOL_MODEL,), priority=URGENT_PRIORITY, submitted_at=old.submitted_at, queue=old.queue,
        )
        urgent.add(old.uid)
    return PreemptionWorld(clusters, running, queues, queued, urgent, pool_nodes)


@dataclass
class PreemptionRun:
    rate: float
    placed: int
    preempting: int
    victims: int
    unplaced: int
    urgent_unplaced: int


def run_preemption_once(world: PreemptionWorld, profile: Profile, *, queues: dict[str, QueueQuota] | None) -> PreemptionRun:
    """Cycles of 64 over the world; only `run_cycle` is timed (the bench's bookkeeping is not)."""
    views = dict(world.clusters)
    running = dict(world.running)
    by_uid = {g.uid: g for g in world.gangs}
    capacity = sum(n.allocatable.gpu for s in views.values() for n in s.nodes.values() if n.eligible)
    normal: deque[str] = deque()
    urgent: deque[str] = deque()
    rng = random.Random(11)
    elapsed = 0.0
    placed = preempting = victims = unplaced = urgent_unplaced = 0
    for start_index in range(0, len(world.gangs), 64):
        batch = world.gangs[start_index : start_index + 64]
        current = list(running.values()) if queues is not None else ()
        start = time.perf_counter()
        result = run_cycle(batch, views, profile, now=1.0, queues=queues, running=current)
        elapsed += time.perf_counter() - start
        views = dict(result.snapshots)
        freed: dict[str, set[str]] = {}
        freed_by: dict[tuple[str, str], str] = {}
        for uid in result.evictions:
            gone = running.pop(uid)
            views[gone.cluster] = views[gone.cluster].with_allocation_changes(gone.amounts, release=True)
            freed.setdefault(gone.cluster, set()).update(gone.amounts)
            for node_name in gone.amounts:
                freed_by.setdefault((gone.cluster, node_name), gone.queue)
        victims += len(result.evictions)
        # What the victims freed beyond the preemptor's need goes to new low-priority gangs of the victims'
        # teams at once (a busy member backfills it), so that every urgent gang needs a preemption of its own.
        for cluster, names in freed.items():
            refills: dict[str, Resources] = {}
            for node_name in sorted(names):
                gpus = views[cluster].nodes[node_name].free.gpu
                if gpus:
                    amount = Resources(gpus * 8_000, gpus * 64 * GI, gpus, 0)
                    uid = f"refill-{len(running)}-{start_index}-{node_name}"
                    running[uid] = RunningGang(
                        uid=uid, key=f"bench/{uid}", cluster=cluster, queue=freed_by[(cluster, node_name)],
                        priority=rng.randint(0, 2),
                        started_at=float(start_index), demand=amount, gpu_model=POOL_MODEL,
                        amounts={node_name: amount},
                    )
                    refills[node_name] = amount
            views[cluster] = views[cluster].with_allocation_changes(refills)
        for decision in result.decisions:
            reservation = result.reservations.get(decision.gang_uid)
            assert reservation is not None
            gang = by_uid[decision.gang_uid]
            running[gang.uid] = RunningGang(
                uid=gang.uid, key=gang.key, cluster=decision.cluster, queue=decision.queue, priority=gang.priority,
                started_at=float(start_index), demand=gang.total, gpu_model=decision.gpu_model,
                amounts=dict(reservation.amounts), borrowed=decision.borrowed,
            )
            (urgent if gang.uid in world.urgent else normal).append(gang.uid)
            placed += 1
            preempting += decision.preemption is not None
        unplaced += len(result.unplaced)
        urgent_unplaced += sum(1 for u in result.unplaced if u.gang_uid in world.urgent)
        # Urgent gangs finish; new low-priority gangs take their pool nodes (the views do not change).
        # (A gang evicted by a later preemption, reclaim included, has already left `running`.)
        for uid in [uid for uid in urgent if uid not in running]:
            urgent.remove(uid)
        while len(urgent) > world.pool_nodes // 4:
            done = running.pop(urgent.popleft())
            for node_name, amount in done.amounts.items():
                uid = f"refill-{done.uid}-{node_name}"
                running[uid] = RunningGang(
                    uid=uid, key=f"bench/{uid}", cluster=done.cluster, queue=done.queue, priority=rng.randint(0, 2),
                    started_at=float(start_index), demand=amount, gpu_model=POOL_MODEL, amounts={node_name: amount},
                )
        while normal and _utilisation(views, capacity) > 0.8:
            finished = running.pop(normal.popleft(), None)
            if finished is not None:
                views[finished.cluster] = views[finished.cluster].with_allocation_changes(
                    finished.amounts, release=True
                )
    return PreemptionRun(
        rate=len(world.gangs) / elapsed, placed=placed, preempting=preempting, victims=victims, unplaced=unplaced,
        urgent_unplaced=urgent_unplaced,
    )


def _without_preemption(queues: dict[str, QueueQuota]) -> dict[str, QueueQuota]:
    return {
        name: QueueQuota(q.name, q.nominal, cohort=q.cohort, borrowing_limit=q.borrowing_limit, weight=q.weight)
        for name, q in queues.items()
    }


def bench_preemption(
    scenario: str, *, args: argparse.Namespace, gangs_given: int, gpu_counts: Sequence[int], profile: Profile,
    out: BenchResult,
) -> bool:
    count, nodes, _ = SCENARIOS[scenario]
    rng = random.Random(args.seed)
    base = make_gangs(gangs_given, gpu_counts, rng)
    world = make_preemption_world(count, nodes, base, gpu_counts, share=PREEMPTION[scenario], rng=rng)
    min_rate, _ = BARS[scenario]
    variants = {
        "": world.queues,
        "WithoutPreemption": _without_preemption(world.queues),
        "WithoutQueues": None,
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for run in range(args.runs):
        parts = []
        for variant, queues in variants.items():
            result = run_preemption_once(world, profile, queues=queues)
            rates[variant].append(result.rate)
            bar = (">=", min_rate) if not variant else None
            out.add(f"{scenario}.decisionsPerSecond{variant}", result.rate, unit="decisions/s", bar=bar)
            label = variant or "with preemption"
            parts.append(
                f"{label}: {result.rate:,.0f} decisions/s (placed {result.placed}, {result.preempting} by preempting "
                f"{result.victims} gangs; unplaced {result.unplaced}, {result.urgent_unplaced} of them urgent)"
            )
        print(f"{scenario} run {run + 1}: " + "; ".join(parts), flush=True)
    median = {name: statistics.median(values) for name, values in rates.items()}
    met = median[""] >= min_rate
    line = (
        f"{scenario} median of {args.runs}: {median['']:,.0f} decisions/s in cycles of 64 with {len(world.urgent)} of "
        f"{len(world.gangs)} gangs needing preemption; {median['WithoutPreemption']:,.0f} without preemption "
        f"(ratio {median[''] / median['WithoutPreemption']:.2f}), {median['WithoutQueues']:,.0f} without queues; "
        f"bar >= {min_rate:,.0f}/s: {'met' if met else 'MISSED'}"
    )
    print(line, flush=True)
    out.notes.append(line)
    return met


def bench_elastic(
    scenario: str, *, args: argparse.Namespace, gangs_given: int, gpu_counts: Sequence[int], profile: Profile,
    out: BenchResult,
) -> bool:
    count, nodes, _ = SCENARIOS[scenario]
    rng = random.Random(args.seed)
    clusters = make_clusters(count, nodes, rng)
    fixed = make_gangs(gangs_given, gpu_counts, rng)
    elastic = make_elastic(fixed, ELASTIC[scenario], random.Random(args.seed + 2))
    min_rate, _ = BARS[scenario]
    runs: dict[str, list[RunResult]] = {"": [], "Fixed": []}
    for run in range(args.runs):
        # Alternate which goes first, so that a load change on the shared machine hits both alike.
        order = [("", elastic), ("Fixed", fixed)] if run % 2 == 0 else [("Fixed", fixed), ("", elastic)]
        for variant, gangs in order:
            result = run_once(clusters, gangs, profile, planted={})
            runs[variant].append(result)
            bar = (">=", min_rate) if variant == "" else None
            out.add(f"{scenario}.decisionsPerSecond{variant}", result.batch_rate, unit="decisions/s", bar=bar)
            out.add(f"{scenario}.decisionsPerSecondOnePerCycle{variant}", result.latency_rate, unit="decisions/s")
            out.add(f"{scenario}.decisionsPerCpuSecond{variant}", result.batch_cpu_rate, unit="decisions/s")
        parts = [
            f"{'fixed' if variant else 'elastic'}: {r.batch_rate:,.0f} decisions/s in cycles of 64 "
            f"({r.batch_cpu_rate:,.0f} per CPU second), "
            f"{r.latency_rate:,.0f} one per cycle (p99 {r.p99_ms:.2f} ms), placed {r.placed} gangs, {r.pods_placed} pods"
            for variant, r in ((v, runs[v][-1]) for v in ("", "Fixed"))
        ]
        print(f"{scenario} run {run + 1}: " + "; ".join(parts), flush=True)
    median = {variant: statistics.median(r.batch_rate for r in results) for variant, results in runs.items()}
    cpu = {variant: statistics.median(r.batch_cpu_rate for r in results) for variant, results in runs.items()}
    pods = {variant: statistics.median(r.pods_placed for r in results) for variant, results in runs.items()}
    elastic_count = sum(1 for g in elastic if g.elastic)
    met = median[""] >= min_rate
    line = (
        f"{scenario} median of {args.runs}: {median['']:,.0f} decisions/s in cycles of 64 with {elastic_count} of "
        f"{len(elastic)} gangs elastic, {median['Fixed']:,.0f} with all fixed (ratio {median[''] / median['Fixed']:.2f}; "
        f"per CPU second {cpu['']:,.0f} vs {cpu['Fixed']:,.0f}, ratio {cpu[''] / cpu['Fixed']:.2f}); "
        f"pods placed one per cycle {pods['']:,.0f} vs {pods['Fixed']:,.0f}; bar >= {min_rate:,.0f}/s: "
        f"{'met' if met else 'MISSED'}"
    )
    print(line, flush=True)
    out.notes.append(line)
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gangs", type=int, default=2000)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true",
                        help="the 20x500 scenarios only, 500 gangs (unless --gangs is given)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run's figures to FILE (bench/benchresult.py)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a bar is missed")
    args = parser.parse_args(argv)
    gangs_given = args.gangs
    if args.quick and "--gangs" not in (argv if argv is not None else sys.argv[1:]):
        gangs_given = 500
    if args.runs < 1 or gangs_given < 1:
        parser.error("--runs and --gangs must be positive")
    gpu_counts = read_gpu_counts(args.trace)
    profile = Profile()
    ok = True
    out = BenchResult("placement")
    default = ("20x500", "20x500-unplaceable") if args.quick else DEFAULT_SCENARIOS
    for scenario in args.scenario or default:
        if scenario in PREEMPTION:
            ok = bench_preemption(
                scenario, args=args, gangs_given=gangs_given, gpu_counts=gpu_counts, profile=profile, out=out
            ) and ok
            continue
        if scenario in ELASTIC:
            ok = bench_elastic(
                scenario, args=args, gangs_given=gangs_given, gpu_counts=gpu_counts, profile=profile, out=out
            ) and ok
            continue
        count, nodes, share = SCENARIOS[scenario]
        rng = random.Random(args.seed)
        clusters = make_clusters(count, nodes, rng)
        gangs = make_gangs(gangs_given, gpu_counts, rng)
        planted = plant_unplaceable(gangs, share, random.Random(args.seed + 1)) if share else {}
        min_rate, max_p99 = BARS[scenario]
        results = []
        for run in range(args.runs):
            result = run_once(clusters, gangs, profile, planted=planted)
            results.append(result)
            out.add(f"{scenario}.decisionsPerSecond", result.batch_rate, unit="decisions/s", bar=(">=", min_rate))
            out.add(f"{scenario}.p99DecisionMs", result.p99_ms, unit="ms",
                    bar=("<=", max_p99) if max_p99 is not None else None)
            out.add(f"{scenario}.decisionsPerSecondOnePerCycle", result.latency_rate, unit="decisions/s")
            print(
                f"{scenario} run {run + 1}: {result.latency_rate:,.0f} decisions/s one per cycle, "
                f"p99 {result.p99_ms:.2f} ms; {result.batch_rate:,.0f} decisions/s in cycles of 64; "
                f"placed {result.placed}, unplaced {result.unplaced}"
                + (f" ({len(planted)} planted unplaceable, {result.unplaced_other} others)" if planted else ""),
                flush=True,
            )
        rate = statistics.median(r.latency_rate for r in results)
        p99 = statistics.median(r.p99_ms for r in results)
        batch = statistics.median(r.batch_rate for r in results)
        met = batch >= min_rate and (max_p99 is None or p99 <= max_p99)
        ok = ok and met
        bar = f">= {min_rate:,.0f}/s" + (f", p99 <= {max_p99} ms" if max_p99 else "")
        line = (
            f"{scenario} median of {args.runs}: {batch:,.0f} decisions/s in cycles of 64, "
            f"p99 {p99:.2f} ms one per cycle ({rate:,.0f} decisions/s that way); bar {bar}: {'met' if met else 'MISSED'}"
        )
        print(line, flush=True)
        out.notes.append(line)
        if planted:
            kinds = ", ".join(f"{k} {list(planted.values()).count(k)}" for k in UNPLACEABLE_KINDS)
            out.notes.append(f"{scenario}: {len(planted)} of {gangs_given} gangs fit nowhere ({kinds}); "
                             "each ended unplaced with a why-not row for every cluster")
    print(f"machine: {os.cpu_count()} cores, shared; medians of {args.runs} runs of {gangs_given} gangs", flush=True)
    out.write(args.json)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
