"""ClusterSnapshot: immutability, validation, structural sharing, and an index that stays exact."""

from __future__ import annotations

import random

import pytest
from placement_builders import GI, cluster, node, nodes

from federator.placement import ClusterInfo, ClusterSnapshot, NodeState, Resources, Taint
from federator.placement.snapshot import CPU_ONLY, UNKNOWN_GPU_MODEL


def rebuilt(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same nodes indexed from scratch."""
    return ClusterSnapshot(name=snapshot.name, info=snapshot.info, nodes=dict(snapshot.nodes))


def test_index_aggregates() -> None:
    snap = cluster(
        "a",
        [
            node("n1", used=0),
            node("n2", used=8, used_rdma=1),
            node("n3", used=3),
            node("n4", ready=False),
            node("n5", schedulable=False),
            node("cpu1", gpus=0, rdma=0, datasets=["imagenet"]),
            node("h1", model="H100", used=2, datasets=["imagenet"]),
        ],
    )
    index = snap.index
    assert index.eligible_nodes == 5
    assert index.not_ready_nodes == 1
    assert index.unschedulable_nodes == 1
    assert index.free_gpu_by_model["A100"] == 8 + 0 + 5
    assert index.free_gpu_by_model["H100"] == 6
    assert index.free_gpu_histogram("A100") == ((0, 1), (5, 1), (8, 1))
    assert index.buckets[("A100", 8, False)] == ("n1",)
    assert index.buckets[(CPU_ONLY, 0, False)] == ("cpu1",)
    assert index.gpu_models == ("A100", "H100")
    assert index.models_by_free == ("A100", "H100")
    assert index.free_rdma == 3  # n1, n3, h1 (n2 uses its HCA; cpu1 has none)
    assert index.rdma_nodes == 3
    assert index.node_datasets["imagenet"] == 2
    labelled = cluster("b", [node("x", labels={"pool": "train"}), node("y", labels={"pool": "train"}, ready=False)])
    assert dict(labelled.index.node_labels) == {("pool", "train"): 1}  # eligible nodes only
    relabelled = labelled.with_nodes([node("x", labels={"pool": "serve"})])
    assert dict(relabelled.index.node_labels) == {("pool", "serve"): 1}
    assert index.max_pods_by_free_gpus("A100", 4) == 2 + 1
    assert index.max_pods_by_capacity("A100", 8) == 3
    assert snap.datasets_present == {"imagenet"}


def test_nodes_with_blocking_taints_are_bucketed_apart() -> None:
    snap = cluster(
        "a",
        [
            node("clean"),
            node("hard", taints=[Taint("dedicated", "infra")]),
            node("soft", taints=[Taint("maintenance", "", "PreferNoSchedule")]),  # type: ignore[arg-type]
        ],
    )
    assert snap.index.buckets[("A100", 8, False)] == ("clean", "soft")
    assert snap.index.buckets[("A100", 8, True)] == ("hard",)
    assert snap.index.free_counts_of("A100", tolerant=False) == (8,)
    assert snap.index.free_gpu_histogram("A100") == ((8, 3),)
    untainted = snap.with_nodes([node("hard")])
    assert untainted.index.buckets[("A100", 8, False)] == ("clean", "hard", "soft")
    assert ("A100", 8, True) not in untainted.index.buckets


def test_gpu_node_without_model_is_indexed_as_unknown() -> None:
    snap = cluster("a", [NodeState(name="x", allocatable=Resources(gpu=4))])
    assert snap.nodes["x"].model_key == UNKNOWN_GPU_MODEL
    assert snap.index.gpu_models == (UNKNOWN_GPU_MODEL,)


def test_updates_share_structure_and_keep_the_index_exact() -> None:
    snap = cluster("a", nodes("n", 200, used=2))
    untouched = snap.nodes["n-100"]
    changed = snap.with_nodes([node("n-005", used=8)], resource_version="2")
    assert changed.nodes["n-100"] is untouched  # shared, not copied
    assert snap.nodes["n-005"].allocated.gpu == 2  # the old snapshot is unchanged
    assert changed.resource_version == "2" and snap.resource_version == "1"
    assert changed.index == rebuilt(changed).index
    assert snap.index == rebuilt(snap).index


def test_random_updates_keep_the_index_equal_to_a_rebuild() -> None:
    rng = random.Random(3)
    snap = cluster("a", nodes("n", 30))
    for step in range(300):
        name = f"n-{rng.randrange(40):03d}"
        action = rng.random()
        if action < 0.15:
            snap = snap.with_nodes(removed=[name])
        elif action < 0.6:
            snap = snap.with_nodes(
                [
                    node(
                        name,
                        gpus=rng.choice([0, 4, 8]),
                        used=0,
                        model=rng.choice(["A100", "H100"]),
                        ready=rng.random() > 0.1,
                        schedulable=rng.random() > 0.1,
                        datasets=rng.sample(["d1", "d2", "d3"], rng.randrange(3)),
                        labels={"pool": rng.choice(["train", "serve"])} if rng.random() < 0.7 else {},
                        taints=rng.choice([[], [Taint("dedicated", "infra")], [Taint("soft", "", "PreferNoSchedule")]]),  # type: ignore[list-item]
                    )
                ]
            )
        elif name in snap.nodes:
            current = snap.nodes[name]
            amount = Resources(1000, GI, min(1, current.free.gpu), 0)
            snap = snap.with_allocation_changes({name: amount})
        assert snap.index == rebuilt(snap).index, f"index drifted at step {step}"


def test_allocation_changes_round_trip_and_never_release_twice() -> None:
    snap = cluster("a", nodes("n", 4, used=1))
    amounts = {"n-000": Resources(8000, 64 * GI, 4, 1), "gone": Resources(gpu=1)}
    assumed = snap.with_allocation_changes(amounts)
    assert assumed.nodes["n-000"].free.gpu == 3
    back = assumed.with_allocation_changes(amounts, release=True)
    assert back.nodes == snap.nodes and back.index == snap.index
    with pytest.raises(ValueError):
        back.with_allocation_changes({"n-001": Resources(gpu=4)}, release=True)


def test_over_allocation_floors_free_at_zero() -> None:
    snap = cluster("a", [node("n", used=6)])
    held = snap.with_allocation_changes({"n": Resources(gpu=8)})
    assert held.nodes["n"].free.gpu == 0
    assert held.index.free_gpu_by_model["A100"] == 0


def test_validation() -> None:
    info = ClusterInfo(location="cloud", fabric="ethernet")
    with pytest.raises(ValueError, match="duplicate node"):
        ClusterSnapshot.build(name="a", info=info, nodes=[node("x"), node("x")])
    with pytest.raises(ValueError, match="named"):
        ClusterSnapshot(name="a", info=info, nodes={"y": node("x")})
    with pytest.raises(ValueError):
        ClusterSnapshot(name="", info=info, nodes={})
    with pytest.raises(ValueError):
        ClusterInfo(location="mars", fabric="ethernet")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rdma_kind"):
        ClusterInfo(location="cloud", fabric="ethernet", rdma_kind="roce")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ClusterInfo(location="cloud", fabric="ethernet", cost_per_gpu_hour=float("nan"))
    with pytest.raises(ValueError):
        ClusterInfo(location="cloud", fabric="ethernet", datasets={"d": -1})
    with pytest.raises(ValueError):
        Taint(key="")
    with pytest.raises(ValueError):
        Taint(key="k", effect="Sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bound_pods"):
        ClusterSnapshot(name="a", info=info, nodes={}, bound_pods={"g": -1})  # type: ignore[arg-type]


def test_inputs_are_copied_not_aliased() -> None:
    labels = {"zone": "a"}
    n = node("x", labels=labels)
    labels["zone"] = "b"
    assert n.labels["zone"] == "a"
    datasets = {"d": 10}
    snap = cluster("a", [n], datasets=datasets)
    datasets["d"] = 99
    assert snap.info.datasets["d"] == 10


def test_batches_of_many_changes_keep_the_index_equal_to_a_rebuild() -> None:
    """Many nodes entering, leaving and moving between the same buckets in one update (a re-list, a burst
    of pod events): the buckets stay sorted and equal to a rebuild, and a bucket emptied and filled again
    within one update is kept."""
    rng = random.Random(11)
    snap = cluster("a", nodes("n", 300, used=0))
    for step in range(40):
        names = rng.sample([f"n-{i:03d}" for i in range(360)], rng.randrange(1, 120))
        present = [n for n in names if n in snap.nodes]
        removed = [n for n in present if rng.random() < 0.2]
        updated = [node(n, used=rng.choice([0, 0, 2, 8]), model=rng.choice(["A100", "H100"]))
                   for n in names if n not in removed]
        snap = snap.with_nodes(updated, removed=removed)
        assert snap.index == rebuilt(snap).index, f"index drifted at step {step}"
        for bucket in snap.index.buckets.values():
            assert list(bucket) == sorted(set(bucket)) and bucket
    full = snap.with_nodes([node(n, used=8) for n in snap.nodes])  # every node leaves its bucket at once
    back = full.with_nodes([node(n, used=0) for n in full.nodes])  # and every node comes back
    assert full.index == rebuilt(full).index and back.index == rebuilt(back).index
