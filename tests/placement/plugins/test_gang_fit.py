"""Filter "gang-fit": capacity, free totals, the free-GPU histogram and the node-by-node fit, each coded."""

from __future__ import annotations

from placement_builders import GI, cluster, context_for, gang, node, nodes, run_filter

from federator.placement import Resources, RoleRequest
from federator.placement.plugins.gang_fit import (
    DOES_NOT_FIT,
    EXCEEDS_CAPACITY,
    INSUFFICIENT_CPU,
    INSUFFICIENT_GPU,
    INSUFFICIENT_MEMORY,
    NO_MATCHING_NODES,
    GangFitFilter,
)

BIG = gang("big", pods=8, gpus=8, rdma=1, network="rdma", models=["A100"])


def test_fit_leaves_the_assignment_in_the_context() -> None:
    result, ctx = run_filter(GangFitFilter(), BIG, cluster("a", nodes("n", 10)))
    assert result.ok  # type: ignore[attr-defined]
    assert ctx.fit is not None and ctx.fit.ok and ctx.fit.nodes_used == 8  # type: ignore[attr-defined]


def test_fragmented_cluster_is_rejected_without_visiting_nodes() -> None:
    frag = cluster("frag", nodes("n", 64, used=7))
    result, ctx = run_filter(GangFitFilter(), BIG, frag)
    assert result.code == INSUFFICIENT_GPU  # type: ignore[attr-defined]
    assert result.message.startswith("needs 8 pods of 8 A100 GPUs with RDMA; at most 0 fit")  # type: ignore[attr-defined]
    assert "64 nodes with 1" in result.message  # type: ignore[attr-defined]
    assert ctx.fit is None  # type: ignore[attr-defined]


def test_message_gives_how_many_fit() -> None:
    five = cluster("five", nodes("n", 5) + nodes("busy", 5, used=4))
    result, _ = run_filter(GangFitFilter(), BIG, five)
    assert result.code == INSUFFICIENT_GPU  # type: ignore[attr-defined]
    assert result.message.startswith("needs 8 pods of 8 A100 GPUs with RDMA; at most 5 fit")  # type: ignore[attr-defined]
    assert (result.numbers["pods_needed"], result.numbers["pods_fit"]) == (8, 5)  # type: ignore[attr-defined]


def test_gang_larger_than_the_cluster_ever_is() -> None:
    small = cluster("small", nodes("n", 4, used=8))
    result, _ = run_filter(GangFitFilter(), BIG, small)
    assert result.code == EXCEEDS_CAPACITY  # type: ignore[attr-defined]
    assert "even with every schedulable node empty at most 4 fit" in result.message  # type: ignore[attr-defined]


def test_node_by_node_failure_after_the_histogram_passes() -> None:
    # GPUs are free on 8 nodes, and CPU in total, but six nodes have only 8 cores left.
    g = gang("g", pods=8, gpus=8, cpu=16, rdma=1, network="rdma", models=["A100"])
    snap = cluster("cpu-starved", nodes("ok", 2) + nodes("starved", 6, used_cpu=88))
    result, _ = run_filter(GangFitFilter(), g, snap)
    assert result.code == DOES_NOT_FIT  # type: ignore[attr-defined]
    assert "at most 2 fit node by node" in result.message  # type: ignore[attr-defined]


def test_cpu_and_memory_totals() -> None:
    g = gang("g", pods=2, gpus=0, cpu=40, mem_gi=16)
    result, _ = run_filter(GangFitFilter(), g, cluster("a", [node("n", gpus=0, rdma=0, cpu=96, used_cpu=40)]))
    assert result.code == INSUFFICIENT_CPU and "needs 80 cpu in all; 56 free" in result.message  # type: ignore[attr-defined]
    g = gang("g", pods=2, gpus=0, cpu=1, mem_gi=400)
    result, _ = run_filter(GangFitFilter(), g, cluster("a", [node("n", gpus=0, rdma=0, used_mem_gi=512)]))
    assert result.code == INSUFFICIENT_MEMORY and "800Gi" in result.message  # type: ignore[attr-defined]
    result, _ = run_filter(GangFitFilter(), gang("g", pods=2, gpus=0, cpu=64), cluster("a", [node("n", gpus=0)]))
    assert result.code == EXCEEDS_CAPACITY and "even when empty" in result.message  # type: ignore[attr-defined]


def test_cpu_only_gang_fits_node_by_node() -> None:
    g = gang("g", pods=2, gpus=0, cpu=50, mem_gi=16)
    snap = cluster("a", [node("c1", gpus=0, rdma=0), node("c2", gpus=0, rdma=0)])
    result, ctx = run_filter(GangFitFilter(), g, snap)
    assert result.ok and ctx.fit.nodes_used == 2  # type: ignore[attr-defined]
    result, _ = run_filter(GangFitFilter(), gang("g", pods=3, gpus=0, cpu=50, mem_gi=16), snap)
    assert result.code == DOES_NOT_FIT and "at most 2 fit" in result.message  # type: ignore[attr-defined]


def test_multi_role_message_names_the_role() -> None:
    g = gang(
        "g",
        roles=(
            RoleRequest("ps", 2, Resources(8000, 32 * GI)),
            RoleRequest("worker", 8, Resources(16000, 64 * GI, 4, 1)),
        ),
    )
    # Room for 8 workers by GPUs, but each needs one of the five HCAs.
    result, _ = run_filter(GangFitFilter(), g, cluster("a", nodes("n", 3) + nodes("busy", 2, used=4)))
    assert result.code == DOES_NOT_FIT  # type: ignore[attr-defined]
    assert result.message.startswith(  # type: ignore[attr-defined]
        "role 'worker' needs 8 pods of 16 cpu, 64Gi memory, 4 A100 GPUs, 1 rdma/hca each; at most 5 fit"
    )


def test_tries_each_accepted_model_and_reports_the_closest() -> None:
    snap = cluster("a", nodes("a", 3, model="A100") + nodes("abusy", 2, model="A100", used=8)
                   + nodes("h", 6, model="H100", used=4))
    g = gang("g", pods=4, gpus=8, models=["H100", "A100"])
    result, _ = run_filter(GangFitFilter(), g, snap)
    assert result.code == INSUFFICIENT_GPU and "4 pods of 8 A100 GPUs; at most 3 fit" in result.message  # type: ignore[attr-defined]
    fits = gang("g", pods=6, gpus=4, models=["A100", "H100"])
    result, ctx = run_filter(GangFitFilter(), fits, snap)
    assert result.ok and ctx.fit.gpu_model == "A100"  # type: ignore[attr-defined]
    h100_only = gang("g", pods=6, gpus=4, models=["H100"])
    result, ctx = run_filter(GangFitFilter(), h100_only, snap)
    assert result.ok and ctx.fit.gpu_model == "H100"  # type: ignore[attr-defined]


def test_exceeds_capacity_only_when_no_model_ever_could() -> None:
    snap = cluster("a", nodes("a", 2, model="A100") + nodes("h", 3, model="H100", used=8))
    result, _ = run_filter(GangFitFilter(), gang("g", pods=3, gpus=8, models=["A100", "H100"]), snap)
    assert result.code == INSUFFICIENT_GPU and "H100" in result.message  # type: ignore[attr-defined]
    result, _ = run_filter(GangFitFilter(), gang("g", pods=4, gpus=8, models=["A100", "H100"]), snap)
    assert result.code == EXCEEDS_CAPACITY and "at most 3 fit" in result.message  # type: ignore[attr-defined]


def test_node_selector_nobody_matches_is_rejected_without_visiting_nodes() -> None:
    snap = cluster("a", nodes("n", 3, labels={"pool": "serve"}) + [node("down", labels={"pool": "train"}, ready=False)])
    g = gang("g", node_selector={"pool": "train", "zone": "b"})
    for check in (GangFitFilter().precheck, GangFitFilter().filter):
        result = check(g, snap, context_for(snap))  # type: ignore[arg-type]
        assert result.code == NO_MATCHING_NODES  # not-ready nodes do not count
        assert result.message == "no schedulable node has label pool=train (the gang's node selector)"


def test_a_pod_larger_than_every_node_never_fits_and_no_node_is_visited() -> None:
    # 8 GPUs and 128 cores per pod on 96-core nodes: the GPU histogram and the CPU total both pass
    g = gang("g", pods=2, gpus=8, cpu=128, rdma=1, network="rdma", models=["A100"])
    snap = cluster("a", nodes("n", 10))
    result, ctx = run_filter(GangFitFilter(), g, snap)
    assert result.code == EXCEEDS_CAPACITY  # type: ignore[attr-defined]
    assert result.message == (  # type: ignore[attr-defined]
        "needs 2 pods of 8 GPUs with RDMA; no schedulable node could hold one (128 cpu, 512Gi memory, 8 GPUs, "
        "1 rdma/hca) even when empty: the most any node has is 96 cpu, 1Ti memory, 8 GPUs, 1 rdma/hca"
    )
    assert (result.numbers["pods_needed"], result.numbers["pods_fit"]) == (2, 0)  # type: ignore[attr-defined]
    assert ctx.fit is None  # type: ignore[attr-defined]
    # one node big enough is enough to pass this stage
    bigger = cluster("b", nodes("n", 10) + [node("huge", cpu=256)])
    result, _ = run_filter(GangFitFilter(), g, bigger)
    assert result.code == DOES_NOT_FIT and "at most 1 fit node by node" in result.message  # type: ignore[attr-defined]
