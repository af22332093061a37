"""Elastic gangs in the replay: admission at the largest size that fits (at least the minimum), runtime
stretched by max/size, federator's grow pass (cooldown, pending gangs first), and the seeded rule."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from replay_builders import TINY_CLUSTERS, federation, job, replay, synthetic_trace

from federator.replay.attributes import RULE, assign_attributes, describe_rule
from federator.replay.engine import Engine
from federator.replay.federated import GROW_COOLDOWN_SECONDS, FederatorPolicy
from federator.replay.policies import ArmadaPolicy, KarmadaPolicy, MultiKueuePolicy, NonePolicy
from federator.replay.trace import load_trace


def one_cluster(nodes: int) -> str:
    return (
        "clusters:\n  - name: solo\n    traceClusters: [cluster01]\n"
        "    location: on-prem\n    fabric: rdma\n    bandwidthGbps: 10\n"
        f"    nodePools:\n      - {{gpuModel: A100, nodes: {nodes}, gpusPerNode: 8}}\n"
    )


def _fixed_then_elastic(fixed_seconds: float) -> list:  # type: ignore[type-arg]
    """A fixed one-node job from t=0 for `fixed_seconds`, then at t=1 an elastic gang of 4 pods (min 2), 1000 s."""
    return [
        job("fixed", index=0, home="solo", submitted=0, duration=fixed_seconds),
        job("elastic", index=1, home="solo", submitted=1, duration=1000, pods=4, min_pods=2),
    ]


def _policies() -> list:  # type: ignore[type-arg]
    return [FederatorPolicy(), NonePolicy(), ArmadaPolicy(), KarmadaPolicy(estimator=True),
            MultiKueuePolicy(incremental=False)]


# The policies whose hub sends an elastic gang before its whole gang fits (its member admits what fits):
# federator (placement's elastic sizing), none (straight to its home), armada (its gang minimum cardinality).
ADMIT_WHAT_FITS = (0, 1, 2)


@pytest.mark.parametrize("index", ADMIT_WHAT_FITS)
@pytest.mark.parametrize(("nodes", "size"), [(3, 2), (4, 3)])
def test_an_elastic_gang_starts_at_the_largest_size_that_fits_and_runs_max_over_size_times_longer(
    index: int, nodes: int, size: int
) -> None:
    # A fixed 1-node job holds one node until t=5000; the elastic gang (4 pods of 8 GPUs, min 2) gets what is left.
    fed = federation(one_cluster(nodes=nodes))
    jobs = _fixed_then_elastic(5000)
    engine, result = replay(jobs, fed, _policies()[index])
    assert engine.started_at[1] == 1.0, "admitted at once, not after the fixed job"
    assert engine.finished_at[1] - engine.started_at[1] == pytest.approx(1000 * 4 / size)
    assert result.extra["startedBelowMax"] == 1 and result.extra["elasticJobs"] == 1
    assert result.metrics["gpuUtilization"] > 0


@pytest.mark.parametrize("index", (3, 4))
def test_karmada_and_multikueue_send_an_elastic_gang_only_when_the_whole_gang_fits(index: int) -> None:
    fed = federation(one_cluster(nodes=4))
    jobs = _fixed_then_elastic(5000)
    engine, result = replay(jobs, fed, _policies()[index])
    assert engine.started_at[1] == 5000.0 and engine.finished_at[1] == 6000.0
    assert result.extra["startedBelowMax"] == 0


@pytest.mark.parametrize("index", range(5))
def test_an_elastic_gang_with_room_starts_at_its_max_and_runs_its_traced_duration(index: int) -> None:
    fed = federation(one_cluster(nodes=4))
    jobs = [job("elastic", index=0, home="solo", submitted=1, duration=1000, pods=4, min_pods=2)]
    engine, result = replay(jobs, fed, _policies()[index])
    assert engine.finished_at[0] - engine.started_at[0] == 1000.0
    assert result.extra["startedBelowMax"] == 0 and result.extra["resizes"] == 0


@pytest.mark.parametrize("index", ADMIT_WHAT_FITS)
def test_an_elastic_gang_whose_minimum_does_not_fit_waits_whole(index: int) -> None:
    fed = federation(one_cluster(nodes=2))
    jobs = _fixed_then_elastic(500)
    engine, _ = replay(jobs, fed, _policies()[index])
    # No part of it ran before its minimum fitted (t=500); then 2 of 4 pods: 2000 s.
    assert engine.started_at[1] == 500.0 and engine.finished_at[1] == 2500.0


@pytest.mark.parametrize(("frees_at", "grows_at"), [(100.0, 105.0), (30.0, 1.0 + GROW_COOLDOWN_SECONDS)])
def test_federator_grows_a_running_elastic_gang_into_freed_room_after_its_cooldown(
    frees_at: float, grows_at: float
) -> None:
    # 4 nodes; a fixed job holds one until `frees_at`; the elastic gang (4 pods, min 2) is placed at 3 at t=1.
    fed = federation(one_cluster(nodes=4))
    jobs = _fixed_then_elastic(frees_at)
    policy = FederatorPolicy()
    engine, result = replay(jobs, fed, policy)
    # At 3 of 4 pods: 1000 x 4/3 s of run from t=1; at `grows_at` (the tick after the room freed, or the
    # cooldown's end) the rest, recomputed at 4 of 4 pods.
    left = 1000 * 4 / 3 - (grows_at - 1)
    assert engine.finished_at[1] == pytest.approx(grows_at + left * 3 / 4)
    assert result.extra["resizes"] == 1 and policy.growths == 1 and result.extra["startedBelowMax"] == 1
    # A baseline never grows it: 1000 x 4/3 s from t=1.
    engine, result = replay(jobs, fed, NonePolicy())
    assert engine.finished_at[1] == pytest.approx(1 + 1000 * 4 / 3) and result.extra["resizes"] == 0


def test_federator_does_not_grow_into_room_a_pending_gang_takes() -> None:
    # The freed node goes to the waiting fixed job, not to the elastic gang.
    fed = federation(one_cluster(nodes=4))
    jobs = [
        job("fixed", index=0, home="solo", submitted=0, duration=100),
        job("elastic", index=1, home="solo", submitted=1, duration=1000, pods=4, min_pods=2),
        job("waiting", index=2, home="solo", submitted=2, duration=100),
    ]
    policy = FederatorPolicy()
    engine, result = replay(jobs, fed, policy)
    assert engine.started_at[2] == 100.0
    # The node frees again at 200: the gang grows at the tick after, 205.
    assert result.extra["resizes"] == 1
    left = 1000 * 4 / 3 - 204
    assert engine.finished_at[1] == pytest.approx(205 + left * 3 / 4)


def test_a_dispatch_outside_the_elastic_range_and_a_grow_of_a_fixed_gang_are_refused() -> None:
    fed = federation(one_cluster(nodes=4))
    elastic = job("elastic", index=0, home="solo", pods=4, min_pods=2)
    fixed = job("fixed", index=1, home="solo")
    engine = Engine(jobs=[elastic, fixed], federation=fed, policy=NonePolicy(), seed=1)
    with pytest.raises(ValueError, match="runs 2..4 pods, not 1"):
        engine.dispatch(elastic, "solo", pods=1)
    with pytest.raises(ValueError, match="runs 2..4 pods, not 5"):
        engine.dispatch(elastic, "solo", pods=5)
    copy = engine.dispatch(fixed, "solo")
    assert copy.state == "bound"
    with pytest.raises(ValueError, match="only a running elastic gang can grow"):
        engine.grow(copy, 1)


# ---------------------------------------------------------------- the seeded rule


def test_the_rule_makes_a_seeded_share_of_multi_gpu_jobs_one_gpu_workers_and_nothing_else_moves(
    tmp_path: Path,
) -> None:
    fed = federation(TINY_CLUSTERS)
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=200))
    plain = assign_attributes(trace, fed, seed=3)
    rule = dataclasses.replace(RULE, elastic_share=0.5)
    elastic = assign_attributes(trace, fed, seed=3, rule=rule)
    assert assign_attributes(trace, fed, seed=3, rule=rule) == elastic
    assert not any(j.elastic for j in plain)
    multi = [j for j in elastic if j.gpus > 1]
    marked = [j for j in multi if j.elastic]
    assert 0.3 < len(marked) / len(multi) < 0.7, (len(marked), len(multi))
    # Data-parallel: N one-GPU workers, min = N/2 rounded up; the rest of the job is as drawn without it.
    for j, p in zip(elastic, plain, strict=True):
        if j.elastic:
            assert (j.pods, j.gpus_per_pod, j.min_pods, j.low) == (p.gpus, 1, math.ceil(p.gpus / 2), j.min_pods)
            assert (j.cpu_milli_per_pod, j.memory_per_pod) == (p.cpu_milli_per_pod // p.gpus_per_pod,
                                                               p.memory_per_pod // p.gpus_per_pod)
            assert dataclasses.replace(j, pods=p.pods, gpus_per_pod=p.gpus_per_pod, min_pods=0,
                                       cpu_milli_per_pod=p.cpu_milli_per_pod, memory_per_pod=p.memory_per_pod) == p
        else:
            assert j == p
    # Jobs whose drawn gang is one pod (2 to 8 GPUs) are among them: the share is of the multi-GPU jobs.
    assert {p.pods for p, j in zip(plain, elastic, strict=True) if j.elastic} >= {1, 2}
    assert {j.gpus for j in marked} >= {2, 4, 8, 16}
    other_seed = {j.uid for j in assign_attributes(trace, fed, seed=4, rule=rule) if j.elastic}
    assert other_seed != {j.uid for j in marked}
    assert "Elastic" in describe_rule(rule) and "Elastic" not in describe_rule(RULE)
    with pytest.raises(ValueError, match="elastic_share must be from 0 to 1"):
        assign_attributes(trace, fed, seed=3, rule=dataclasses.replace(RULE, elastic_share=1.5))


def test_at_share_one_every_multi_gpu_job_is_elastic_and_no_one_gpu_job_is(tmp_path: Path) -> None:
    fed = federation(TINY_CLUSTERS)
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=40))
    jobs = assign_attributes(trace, fed, seed=1, rule=dataclasses.replace(RULE, elastic_share=1.0))
    assert all(j.elastic == (j.gpus > 1) for j in jobs)
    assert all((j.pods, j.gpus_per_pod) == (1, 1) for j in jobs if j.gpus == 1)


def test_without_elasticity_the_same_jobs_keep_the_same_workers_fixed(tmp_path: Path) -> None:
    fed = federation(TINY_CLUSTERS)
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=100))
    rule = dataclasses.replace(RULE, elastic_share=0.5)
    elastic = assign_attributes(trace, fed, seed=3, rule=rule)
    fixed = assign_attributes(trace, fed, seed=3, rule=dataclasses.replace(rule, elastic_fixed=True))
    assert any(j.elastic for j in elastic) and not any(j.elastic for j in fixed)
    assert [dataclasses.replace(j, min_pods=0) for j in elastic] == fixed
    assert all(f.low == f.pods for f in fixed)
    assert "fixed (minReplicas = maxReplicas = N)" in describe_rule(rule)


def test_a_one_pod_shaped_job_as_one_gpu_workers_starts_on_the_gpus_left_and_fixed_waits() -> None:
    # One 8-GPU node; a fixed 6-GPU pod holds it until t=5000. A 4-GPU job as 4 one-GPU workers (min 2)
    # starts at once on the 2 GPUs left and runs 2x as long; fixed (min = max = 4) it waits for the node.
    fed = federation(one_cluster(nodes=1))
    holder = job("holder", index=0, home="solo", submitted=0, duration=5000, gpus_per_pod=6)
    for min_pods, started, run in ((2, 1.0, 2000.0), (0, 5000.0, 1000.0)):
        workers = job("workers", index=1, home="solo", submitted=1, duration=1000, pods=4, gpus_per_pod=1,
                      min_pods=min_pods)
        for policy in _policies()[:3]:
            engine, result = replay([holder, workers], fed, policy)
            assert (engine.started_at[1], engine.finished_at[1] - engine.started_at[1]) == (started, run)
            assert result.extra["elasticJobs"] == (1 if min_pods else 0)


@pytest.mark.parametrize("index", range(5))
def test_an_elastic_replay_is_deterministic_for_a_seed(tmp_path: Path, index: int) -> None:
    fed = federation(TINY_CLUSTERS.replace("nodes: 3", "nodes: 2"))
    trace = load_trace(synthetic_trace(tmp_path / "trace", jobs_per_cluster=60))
    rule = dataclasses.replace(RULE, elastic_share=0.6)
    figures = []
    for _ in range(2):
        jobs = assign_attributes(trace, fed, seed=5, rule=rule)
        engine, result = replay(jobs, fed, _policies()[index], seed=5)
        figures.append(({k: v for k, v in result.metrics.items() if k != "wallSeconds"}, result.extra,
                        [None if math.isnan(t) else t for t in engine.finished_at]))
    assert figures[0] == figures[1]
    assert figures[0][1]["elasticJobs"] > 0
