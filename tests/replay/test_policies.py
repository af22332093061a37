"""Each policy's distinctive behaviour, on hand-made federations and jobs small enough to check by hand."""

from __future__ import annotations

import math

from replay_builders import cluster, clusters_file, federation, job, replay

from federator.replay.federated import FederatorPolicy
from federator.replay.policies import (
    ArmadaPolicy,
    FirstFitPolicy,
    KarmadaPolicy,
    MultiKueuePolicy,
    NonePolicy,
    RandomPolicy,
)

TIB = 1 << 40


def _delay(engine, j) -> float:  # type: ignore[no-untyped-def]
    return engine.started_at[j.index] - j.submitted


def test_allatonce_writes_a_copy_to_every_cluster_and_deletes_the_losers() -> None:
    fed = federation(clusters_file(
        cluster("a", fabric="ethernet", pools=[("A100", 1)], home="cluster01"),
        cluster("b", fabric="ethernet", pools=[("A100", 1)], home="cluster02"),
        cluster("c", fabric="ethernet", pools=[("A100", 1)], home="cluster03"),
    ))
    jobs = [job("j0", index=0, home="a")]
    engine, result = replay(jobs, fed, MultiKueuePolicy(incremental=False))
    # 3 copies (PodGroup + 1 pod each), 2 losers deleted, the winner cleaned up when it finished.
    assert engine.writes == (3 + 2 + 1) * 2
    assert result.metrics["memberWritesPerJob"] == 12
    assert _delay(engine, jobs[0]) == 0
    fed_engine, fed_result = replay(jobs, fed, FederatorPolicy())
    assert fed_result.metrics["memberWritesPerJob"] == 4


def test_incremental_nominates_three_clusters_per_round_in_sorted_order() -> None:
    entries = [cluster(n, fabric="ethernet", pools=[("A100", 1)], home=f"cluster0{i + 1}") for i, n in enumerate("abcd")]
    entries.append(cluster("e", fabric="ethernet", pools=[("H100", 1)], home="cluster05"))
    fed = federation(clusters_file(*entries))
    jobs = [job("j0", index=0, home="a", gpu_model="H100", submitted=50)]
    engine, result = replay(jobs, fed, MultiKueuePolicy(incremental=True))
    # Round 1 (a, b, c) cannot admit an H100 gang; round 2 (d, e) starts 5 minutes later and e admits it.
    assert _delay(engine, jobs[0]) == 300
    assert engine.cluster_of[0] == "e"
    assert engine.writes == (5 + 4 + 1) * 2
    engine, _ = replay(jobs, fed, MultiKueuePolicy(incremental=False))
    assert _delay(engine, jobs[0]) == 0 and engine.writes == (5 + 4 + 1) * 2


def test_none_keeps_every_job_home_even_when_another_cluster_is_idle() -> None:
    fed = federation(clusters_file(
        cluster("home", fabric="ethernet", pools=[("A100", 1)], home="cluster01"),
        cluster("idle", fabric="ethernet", pools=[("A100", 4)], home="cluster02"),
    ))
    jobs = [job(f"j{i}", index=i, home="home", submitted=i, duration=1000) for i in range(3)]
    engine, result = replay(jobs, fed, NonePolicy())
    assert set(engine.cluster_of) == {"home"}
    assert [_delay(engine, j) for j in jobs] == [0, 999, 1998]
    engine, result = replay(jobs, fed, FederatorPolicy())
    assert [_delay(engine, j) for j in jobs] == [0, 0, 0]
    assert result.metrics["meanQueueDelaySeconds"] == 0


def test_armada_ignores_the_fabric_and_federator_does_not() -> None:
    fed = federation(clusters_file(
        cluster("r", fabric="rdma", pools=[("A100", 2)], home="cluster01"),
        cluster("e", fabric="ethernet", pools=[("A100", 2)], home="cluster02"),
    ))
    jobs = [
        job("busy", index=0, home="r", pods=2, network="rdma", duration=5000),
        job("late", index=1, home="r", pods=2, network="rdma", submitted=10, duration=1000),
    ]
    engine, result = replay(jobs, fed, ArmadaPolicy())
    assert engine.cluster_of == ["r", "e"]
    assert result.metrics["fabricMismatches"] == 1
    # The mismatched gang runs 1.3 times longer (the rule's slowdown).
    assert engine.finished_at[1] - engine.started_at[1] == 1300
    engine, result = replay(jobs, fed, FederatorPolicy())
    assert engine.cluster_of == ["r", "r"]
    assert result.metrics["fabricMismatches"] == 0
    assert _delay(engine, jobs[1]) == 4990


def test_karmada_general_estimator_is_fooled_by_fragmentation_and_the_node_level_one_is_not() -> None:
    fed = federation(clusters_file(
        cluster("big", fabric="ethernet", pools=[("A100", 4)], home="cluster01"),
        cluster("small", fabric="ethernet", pools=[("A100", 1)], home="cluster02"),
    ))
    # Four 5-GPU pods leave 3 GPUs free on each node of "big": 12 free in sum, no node with 8.
    jobs = [job(f"frag{i}", index=i, home="big", gpus_per_pod=5, duration=5000) for i in range(4)]
    jobs.append(job("whole-node", index=4, home="big", gpus_per_pod=8, submitted=10, duration=100))
    engine, _ = replay(jobs, fed, KarmadaPolicy(estimator=False))
    assert engine.cluster_of[:4] == ["big"] * 4
    assert engine.cluster_of[4] == "big" and _delay(engine, jobs[4]) == 4990
    engine, _ = replay(jobs, fed, KarmadaPolicy(estimator=True))
    assert engine.cluster_of[4] == "small" and _delay(engine, jobs[4]) == 0


def test_federator_runs_the_job_where_its_dataset_is_and_karmada_copies_it() -> None:
    fed = federation(clusters_file(
        cluster("nodata", fabric="ethernet", pools=[("A100", 1)], home="cluster01"),
        cluster("withdata", fabric="ethernet", pools=[("A100", 1)], home="cluster02", datasets="{big: 1Ti}"),
    ))
    jobs = [job("j", index=0, home="nodata", dataset="big", dataset_bytes=TIB)]
    engine, result = replay(jobs, fed, FederatorPolicy())
    assert engine.cluster_of == ["withdata"] and result.metrics["datasetBytesCopied"] == 0
    engine, result = replay(jobs, fed, KarmadaPolicy(estimator=False))
    assert engine.cluster_of == ["nodata"] and result.metrics["datasetBytesCopied"] == TIB
    # The copy (1 TiB at 10 Gbps) delays the start; the gang holds its GPUs meanwhile.
    assert math.isclose(_delay(engine, jobs[0]), TIB * 8 / 10e9)


def test_a_dispatch_that_can_never_run_is_a_failed_dispatch() -> None:
    fed = federation(clusters_file(
        cluster("tiny", fabric="ethernet", pools=[("A100", 1)], home="cluster01"),
        cluster("roomy", fabric="ethernet", pools=[("A100", 4)], home="cluster02"),
    ))
    jobs = [job("too-big-for-home", index=0, home="tiny", pods=2)]
    engine, result = replay(jobs, fed, NonePolicy())
    assert result.metrics["failedDispatches"] == 1 and result.never_started == 1
    for policy in (FederatorPolicy(), FirstFitPolicy(), KarmadaPolicy(estimator=False), ArmadaPolicy()):
        engine, result = replay(jobs, fed, policy)
        assert (result.metrics["failedDispatches"], engine.cluster_of) == (0, ["roomy"]), policy.name
    delays = set()
    for seed in range(8):
        engine, result = replay(jobs, fed, RandomPolicy(seed), seed=seed)
        assert engine.cluster_of == ["roomy"] and result.never_started == 0
        # Sent to "tiny" first, it is pulled back after the notice and sent on.
        delays.add(_delay(engine, jobs[0]))
        assert result.metrics["failedDispatches"] == (1 if _delay(engine, jobs[0]) else 0)
    assert delays == {0, 300}  # both draws happen among these seeds
