"""Node-by-node packing: fragmentation, best fit, multi-role gangs, selectors, taints, one GPU model."""

from __future__ import annotations

from placement_builders import GI, cluster, gang, node, nodes

from federator.placement import Resources, RoleRequest, Taint, Toleration
from dataclasses import replace

from federator.placement.nodefit import fit_gang, fit_gang_on_capacity, node_accepts_gang


def test_sixty_four_free_gpus_one_per_node_do_not_hold_eight_by_eight() -> None:
    snap = cluster("frag", nodes("n", 64, used=7))
    assert snap.index.free_gpu_by_model["A100"] == 64
    fit = fit_gang(gang("big", pods=8, gpus=8), snap, gpu_model="A100")
    assert not fit.ok
    assert fit.failed_role == "worker" and fit.failed_role_fit == 0


def test_eight_free_nodes_hold_eight_by_eight_one_pod_each() -> None:
    snap = cluster("whole", nodes("n", 8))
    fit = fit_gang(gang("big", pods=8, gpus=8), snap, gpu_model="A100")
    assert fit.ok
    assert sorted(p.node for p in fit.placements) == [f"n-{i:03d}" for i in range(8)]
    assert fit.nodes_used == 8


def test_best_fit_prefers_the_tightest_node_and_keeps_whole_nodes_whole() -> None:
    snap = cluster("a", [node("empty", used=0), node("half", used=4), node("six", used=6)])
    fit = fit_gang(gang("small", gpus=2), snap, gpu_model="A100")
    assert [p.node for p in fit.placements] == ["six"]
    fit = fit_gang(gang("four", gpus=4), snap, gpu_model="A100")
    assert [p.node for p in fit.placements] == ["half"]
    assert fit.capacity_on_used_nodes == 8 and fit.free_left_on_used_nodes == 0


def test_several_pods_share_a_node_when_resources_allow() -> None:
    snap = cluster("a", [node("n", used=0)])
    fit = fit_gang(gang("g", pods=4, gpus=2), snap, gpu_model="A100")
    assert fit.ok and fit.placements == (fit.placements[0],) and fit.placements[0].pods == 4


def test_cpu_limits_pods_per_node() -> None:
    # 8 free GPUs but only 16 free cores: two pods of 8 cores fit, not four.
    snap = cluster("a", [node("n", used=0, cpu=16)])
    fit = fit_gang(gang("g", pods=4, gpus=2, cpu=8), snap, gpu_model="A100")
    assert not fit.ok and fit.failed_role_fit == 2


def test_rdma_devices_limit_pods_per_node() -> None:
    snap = cluster("a", [node("n1"), node("n2", used_rdma=1)])
    fit = fit_gang(gang("g", pods=2, gpus=4, rdma=1), snap, gpu_model="A100")
    assert not fit.ok and fit.failed_role_fit == 1


def test_multi_role_gang_packs_largest_first_and_tops_up_used_nodes() -> None:
    snap = cluster("a", nodes("n", 3))
    g = gang(
        "ps-worker",
        roles=(
            RoleRequest("ps", 2, Resources(8000, 32 * GI)),
            RoleRequest("worker", 4, Resources(16000, 64 * GI, 4, 0)),
        ),
    )
    fit = fit_gang(g, snap, gpu_model="A100")
    assert fit.ok
    assert [p.role for p in fit.placements][0] == "worker"
    worker_nodes = {p.node for p in fit.placements if p.role == "worker"}
    ps_nodes = {p.node for p in fit.placements if p.role == "ps"}
    assert worker_nodes == {"n-000", "n-001"}
    assert ps_nodes <= worker_nodes  # the PS pods ride along on nodes the gang already uses
    assert fit.nodes_used == 2
    amounts = fit.node_amounts(g)
    assert sum(a.gpu for a in amounts.values()) == 16
    assert sum(a.cpu_milli for a in amounts.values()) == 4 * 16000 + 2 * 8000


def test_gpu_pods_use_one_model_cpu_pods_any_node() -> None:
    snap = cluster("a", [node("a1", used=4), node("h1", model="H100", used=4), node("c1", gpus=0, rdma=0)])
    assert not fit_gang(gang("g", pods=2, gpus=4), snap, gpu_model="A100").ok
    cpu_only = gang("cpu", pods=3, gpus=0, cpu=8, mem_gi=32)
    fit = fit_gang(cpu_only, snap, gpu_model=None)
    assert fit.ok
    assert fit.placements[0].node == "c1"  # GPU-less pods go to GPU-less nodes first


def test_node_selector_and_taints() -> None:
    taint = Taint("dedicated", "infra")
    snap = cluster(
        "a",
        [
            node("tainted", taints=[taint], labels={"pool": "train"}),
            node("other-pool", labels={"pool": "serve"}),
            node("good", labels={"pool": "train"}, used=4),
        ],
    )
    g = gang("g", pods=2, gpus=4, node_selector={"pool": "train"})
    fit = fit_gang(g, snap, gpu_model="A100")
    # "tainted" is not tolerated and "other-pool" does not match: only "good" is left, with room for one.
    assert not fit.ok and fit.failed_role_fit == 1
    tolerate = [Toleration("dedicated", "Exists")]  # type: ignore[arg-type]
    one = gang("t1", pods=1, gpus=4, node_selector={"pool": "train"}, tolerations=tolerate)
    fit = fit_gang(one, snap, gpu_model="A100")
    assert fit.ok and [p.node for p in fit.placements] == ["good"]  # best fit keeps the whole node whole
    two = gang("t2", pods=2, gpus=4, node_selector={"pool": "train"}, tolerations=tolerate)
    fit = fit_gang(two, snap, gpu_model="A100")
    assert fit.ok and [p.node for p in fit.placements] == ["good", "tainted"]


def test_not_ready_and_cordoned_nodes_are_never_used() -> None:
    snap = cluster("a", [node("down", ready=False), node("cordoned", schedulable=False)])
    assert not fit_gang(gang("g"), snap, gpu_model="A100").ok


def test_capacity_fit_prefers_nodes_with_most_free_now() -> None:
    snap = cluster("a", [node("busy", used=8), node("half", used=4), node("idle-ish", used=1)])
    fit = fit_gang_on_capacity(gang("g", pods=2, gpus=8), snap, gpu_model="A100")
    assert fit.ok and [p.node for p in fit.placements] == ["idle-ish", "half"]
    assert not fit_gang_on_capacity(gang("g", pods=4, gpus=8), snap, gpu_model="A100").ok


def test_a_node_excluded_for_the_gang_in_this_cluster_is_never_used() -> None:
    snap = cluster("a", [node("six", used=6), node("half", used=4), node("empty", used=0)])
    small = gang("small", gpus=2)
    assert [p.node for p in fit_gang(small, snap, gpu_model="A100").placements] == ["six"]
    # a GPU fault on "six" (a failure policy's Requeue with exclude Node): the next tightest node takes it
    away = replace(small, excluded_nodes={"a": frozenset({"six"})})
    assert [p.node for p in fit_gang(away, snap, gpu_model="A100").placements] == ["half"]
    assert not node_accepts_gang(away, snap.nodes["six"], cluster="a")
    assert node_accepts_gang(away, snap.nodes["half"], cluster="a")
    assert "six" not in {p.node for p in fit_gang_on_capacity(away, snap, gpu_model="A100").placements}
    # the same node name in another cluster is another node: not excluded there
    elsewhere = replace(small, excluded_nodes={"b": frozenset({"six"})})
    assert [p.node for p in fit_gang(elsewhere, snap, gpu_model="A100").placements] == ["six"]
    assert node_accepts_gang(elsewhere, snap.nodes["six"], cluster="a")
    # excluding every node that could hold the gang leaves it no room in the cluster
    full = replace(gang("full", gpus=8), excluded_nodes={"a": frozenset({"empty"})})
    assert not fit_gang(full, snap, gpu_model="A100").ok
