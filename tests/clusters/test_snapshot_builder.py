"""SnapshotBuilder: what member Node/Pod/PodGroup objects mean for placement, incremental updates with
structural sharing, malformed objects, and the checkpoint shard round trip."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federator.clusters.snapshot_builder import (
    SnapshotBuilder,
    capacity_summary,
    gpu_model_name,
    node_state,
    pod_requests,
)
from federator.placement.resources import Resources
from federator.placement.snapshot import ClusterInfo, TaintEffect

GI = 2**30
INFO = ClusterInfo(location="on-prem", fabric="rdma", rdma_kind="infiniband")  # type: ignore[arg-type]
RESOURCES = ("nodes", "pods", "podgroups.scheduling.volcano.sh")


def node(name: str, *, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", ready: str = "True", rv: str = "1",
         unschedulable: bool = False, labels: dict[str, str] | None = None, taints: list[dict] | None = None,
         product: str = "NVIDIA-A100-SXM4-80GB", rdma: str | None = "1k") -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "1Ti"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if rdma:
        allocatable["rdma/hca"] = rdma
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpus:
        all_labels["nvidia.com/gpu.product"] = product
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": rv, "labels": all_labels},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable),
                       "conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": ready}]}}


def pod(name: str, *, node_name: str | None = "n1", phase: str = "Running", cpu: str = "1", memory: str = "1Gi",
        gpus: int = 0, rv: str = "1", job: str | None = None, epoch: str = "1", namespace: str = "ns",
        extra_spec: dict | None = None) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    labels = {"federator.dev/job-uid": job, "federator.dev/epoch": epoch} if job else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": labels},
            "spec": spec, "status": {"phase": phase}}


def builder() -> SnapshotBuilder:
    return SnapshotBuilder(cluster="c1", info=INFO, resources=RESOURCES)


@pytest.mark.parametrize(("product", "model"), [
    ("NVIDIA-A100-SXM4-80GB", "A100"), ("A100-SXM4-40GB", "A100"), ("H100-80GB-HBM3", "H100"),
    ("Tesla-V100-SXM2-32GB", "V100"), ("NVIDIA-L4", "L4"), ("NVIDIA-GeForce-RTX-4090", "RTX-4090"),
    ("A100-SXM4-40GB-MIG-1g.5gb", "A100-MIG-1g.5gb"), ("NVIDIA-A100-SXM4-40GB-SHARED", "A100-SHARED"),
    ("", ""), ("NVIDIA", ""), ("!!!", ""),
])
def test_gpu_model_names(product: str, model: str) -> None:
    assert gpu_model_name(product) == model


def test_node_state_reads_what_placement_needs() -> None:
    state, ok = node_state(node("n1", labels={"federator.dev/dataset.imagenet-22k": "100", "zone": "a"},
                                taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                        {"key": "bad-effect", "effect": "Sometimes"}, {"effect": "NoExecute"}]))
    assert ok
    assert state.allocatable == Resources(64000, 512 * GI, 8, 1000)
    assert state.gpu_model == "A100" and state.ready and state.schedulable
    assert [(t.key, t.value, t.effect) for t in state.taints] == [("nvidia.com/gpu", "present",
                                                                    TaintEffect.NO_SCHEDULE)]
    assert state.datasets == frozenset({"imagenet-22k"})
    assert state.labels["zone"] == "a"
    not_ready, _ = node_state(node("n2", ready="Unknown", unschedulable=True))
    assert not not_ready.ready and not not_ready.schedulable
    cpu_only, _ = node_state(node("n3", gpus=0, rdma=None))
    assert cpu_only.gpu_model == "" and cpu_only.allocatable.gpu == 0


def test_malformed_node_is_kept_not_ready_with_nothing_allocatable() -> None:
    bad = node("n1")
    bad["status"]["allocatable"]["cpu"] = "lots"
    state, ok = node_state(bad)
    assert not ok and not state.ready and state.allocatable == Resources()
    b = builder()
    result = b.apply("nodes", [("ADDED", bad), ("ADDED", {"metadata": {}}), ("ADDED", {"kind": "Node"})],
                     resource_version="5")
    assert b.malformed == 3 and result.ignored == 2
    assert list(result.snapshot.nodes) == ["n1"] and not result.snapshot.nodes["n1"].ready


def test_pod_requests_follow_kube_scheduler_rules() -> None:
    assert pod_requests(pod("p", cpu="500m", memory="1Gi", gpus=2)) == Resources(500, GI, 2, 0)
    # limits only: the request defaults to the limit
    only_limits = pod("p")
    only_limits["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]
    assert pod_requests(only_limits) == Resources(2000, 0, 1, 0)
    # a bigger init container dominates; sidecars add to the running total; overhead adds
    spec = {"initContainers": [{"name": "big-init", "resources": {"requests": {"cpu": "4"}}},
                               {"name": "sidecar", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "overhead": {"cpu": "100m"}}
    assert pod_requests(pod("p", cpu="2", memory="1Gi", extra_spec=spec)) == Resources(4100, 2 * GI, 0, 0)
    assert pod_requests({"spec": "nonsense"}) == Resources()


def test_pods_allocate_on_their_node_until_they_finish() -> None:
    b = builder()
    b.apply("nodes", [("ADDED", node("n1")), ("ADDED", node("n2"))], resource_version="10")
    snap = b.apply("pods", [("ADDED", pod("a", gpus=4, job="j")), ("ADDED", pod("b", gpus=2, job="j")),
                            ("ADDED", pod("pending", node_name=None, gpus=8)),
                            ("ADDED", pod("done", phase="Succeeded", gpus=8))], resource_version="11").snapshot
    assert snap.nodes["n1"].allocated == Resources(2000, 2 * GI, 6, 0)
    assert snap.nodes["n1"].free.gpu == 2 and snap.nodes["n2"].free.gpu == 8
    assert dict(snap.bound_pods) == {"j": 2}
    assert snap.resource_version == "10/11/"
    # a pod finishes, another is deleted, the pending one is bound to n2
    snap = b.apply("pods", [("MODIFIED", pod("a", gpus=4, phase="Failed", job="j", rv="12")),
                            ("DELETED", pod("b", gpus=2, job="j", rv="13")),
                            ("MODIFIED", pod("pending", node_name="n2", gpus=8, rv="14"))],
                   resource_version="14").snapshot
    assert snap.nodes["n1"].allocated == Resources()
    assert snap.nodes["n2"].allocated.gpu == 8
    assert dict(snap.bound_pods) == {}
    assert b.known("pods") == {"ns/pending": "14"}


def test_each_batch_shares_untouched_nodes() -> None:
    b = builder()
    b.apply("nodes", [("ADDED", node(f"n{i}")) for i in range(200)], resource_version="1")
    before = b.snapshot
    after = b.apply("pods", [("ADDED", pod("x", node_name="n7", gpus=1))], resource_version="2").snapshot
    assert after is not before
    assert after.nodes["n100"] is before.nodes["n100"]
    assert after.nodes["n7"].labels is before.nodes["n7"].labels  # the pod changed only the allocation
    assert before.nodes["n7"].allocated == Resources()  # the old snapshot never changes
    # a node heartbeat that changes nothing placement sees derives no new node
    again = b.apply("nodes", [("MODIFIED", node("n5", rv="3"))], resource_version="3").snapshot
    assert again.nodes["n5"] is after.nodes["n5"]


def test_node_removed_and_pods_before_their_node() -> None:
    b = builder()
    b.apply("pods", [("ADDED", pod("early", node_name="late-node", gpus=2))], resource_version="5")
    assert "late-node" not in b.snapshot.nodes
    snap = b.apply("nodes", [("ADDED", node("late-node"))], resource_version="6").snapshot
    assert snap.nodes["late-node"].allocated.gpu == 2
    snap = b.apply("nodes", [("DELETED", node("late-node"))], resource_version="7").snapshot
    assert "late-node" not in snap.nodes and snap.index.eligible_nodes == 0


def test_podgroups_and_jobs_seen() -> None:
    b = builder()
    pg = {"metadata": {"name": "g", "namespace": "ns", "resourceVersion": "3",
                       "labels": {"federator.dev/job-uid": "j9", "federator.dev/epoch": "2"}},
          "spec": {"minMember": 4}, "status": {"phase": "Inqueue"}}
    b.apply("podgroups.scheduling.volcano.sh", [("ADDED", pg)], resource_version="3")
    b.apply("pods", [("ADDED", pod("p", job="j1", epoch="1"))], resource_version="4")
    assert b.jobs_seen() == {"j9": frozenset({"2"}), "j1": frozenset({"1"})}
    assert b.podgroup_phases() == {"ns/g": "Inqueue"}
    b.apply("podgroups.scheduling.volcano.sh", [("DELETED", pg)], resource_version="5")
    assert b.podgroup_phases() == {}
    with pytest.raises(KeyError):
        b.apply("widgets", [], resource_version="1")


def test_capacity_summary() -> None:
    b = builder()
    b.apply("nodes", [("ADDED", node("g1")), ("ADDED", node("g2", ready="False")),
                      ("ADDED", node("h1", product="H100-80GB-HBM3", unschedulable=True)),
                      ("ADDED", node("c1", gpus=0, rdma=None))], resource_version="1")
    b.apply("pods", [("ADDED", pod("p", node_name="g1", gpus=3))], resource_version="2")
    assert capacity_summary(b.snapshot) == {
        "nodes": 4, "readyNodes": 3, "totalGPUs": 24, "freeGPUs": 5,
        "gpusByModel": {"A100": {"total": 16, "free": 5}, "H100": {"total": 8, "free": 0}},
        "nodesByFabric": {"rdma": 3, "ethernet": 1},
    }


events = st.lists(st.one_of(
    st.tuples(st.just("nodes"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.integers(0, 5),
              st.integers(0, 8), st.booleans(), st.booleans()),
    st.tuples(st.just("pods"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.integers(0, 12),
              st.integers(0, 5), st.integers(0, 4), st.sampled_from(["Running", "Pending", "Succeeded"])),
), max_size=60)


@settings(max_examples=60, deadline=None)
@given(batch_events=events, seed=st.integers(0, 2**16))
def test_incremental_equals_rebuilt_and_checkpoint_round_trips(batch_events: list[tuple], seed: int) -> None:
    """Any event sequence, in random batches: the snapshot and its index equal a from-scratch build,
    and restoring from the encoded shards gives the same snapshot."""
    rng = random.Random(seed)
    b = builder()
    b.apply("nodes", [], resource_version="1")
    b.apply("pods", [], resource_version="1")
    b.apply("podgroups.scheduling.volcano.sh", [], resource_version="1")
    shard_at = rng.randrange(len(batch_events) + 1)  # shards are fixed at some point of the sync
    rv = 1
    batch: list[tuple[str, dict]] = []
    resource = "nodes"
    for index, ev in enumerate(batch_events):
        if index == shard_at:
            b.ensure_shards()
        rv += 1
        if ev[0] != resource or rng.random() < 0.3:
            if batch:
                b.apply(resource, batch, resource_version=str(rv))
            batch, resource = [], ev[0]
        if ev[0] == "nodes":
            _, kind, i, gpus, ready, cordon = ev
            obj = node(f"n{i}", gpus=gpus, ready="True" if ready else "False", unschedulable=cordon, rv=str(rv))
        else:
            _, kind, i, n, gpus, phase = ev
            obj = pod(f"p{i}", node_name=f"n{n}" if n < 5 else None, gpus=gpus, phase=phase, rv=str(rv),
                      job=f"j{i % 3}")
        batch.append((kind, obj))
    if batch:
        b.apply(resource, batch, resource_version=str(rv + 1))
    b.ensure_shards()
    snap = b.snapshot
    rebuilt = b.rebuilt()
    assert dict(snap.nodes) == dict(rebuilt.nodes)
    assert dict(snap.bound_pods) == dict(rebuilt.bound_pods)
    assert snap.index == rebuilt.index
    restored = SnapshotBuilder.restore(
        cluster="c1", info=INFO, resources=RESOURCES, resource_versions=b.resource_versions,
        shard_count=b.shard_count, shards=[b.encode_shard(i) for i in range(b.shard_count)])
    assert dict(restored.snapshot.nodes) == dict(snap.nodes)
    assert dict(restored.snapshot.bound_pods) == dict(snap.bound_pods)
    assert restored.snapshot.resource_version == snap.resource_version
    for resource in RESOURCES:
        assert restored.known(resource) == b.known(resource)


def test_restore_rejects_malformed_shards() -> None:
    with pytest.raises(ValueError, match="malformed"):
        SnapshotBuilder.restore(cluster="c1", info=INFO, resources=RESOURCES, resource_versions={},
                                shard_count=1, shards=[{"nodes": [["only-a-name"]]}])


def test_nodes_share_label_values_and_allocatable_but_keep_their_own_labels() -> None:
    """Nodes of a pool share label value strings and one allocatable value; each node still shows exactly
    its own labels, also after they change, and after a checkpoint round trip."""
    pool = {"zone": "eu-1a", "pool": "a100", "feature.node.kubernetes.io/rdma.capable": "true"}
    b = builder()
    b.apply("nodes", [("ADDED", node(f"n{i}", labels=dict(pool))) for i in range(3)]
            + [("ADDED", node("big", cpu="128", labels={"zone": "eu-1b", "other": "x"}))], resource_version="1")
    nodes = b.snapshot.nodes
    for name in ("n0", "n1", "n2"):
        assert dict(nodes[name].labels) == {"kubernetes.io/hostname": name, **pool,
                                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert dict(nodes["big"].labels) == {"kubernetes.io/hostname": "big", "zone": "eu-1b", "other": "x",
                                         "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert nodes["n0"].labels["zone"] is nodes["n2"].labels["zone"]
    assert nodes["n0"].allocatable is nodes["n1"].allocatable
    assert nodes["big"].allocatable == Resources(128_000, 512 * GI, 8, 1000)
    assert nodes["n0"].allocatable == Resources(64_000, 512 * GI, 8, 1000)
    # a label removed, one changed, one added: the node shows exactly its new labels, the others keep theirs
    changed = {"pool": "h100", "new": "yes"}
    b.apply("nodes", [("MODIFIED", node("n1", rv="2", labels=changed))], resource_version="2")
    nodes = b.snapshot.nodes
    assert dict(nodes["n1"].labels) == {"kubernetes.io/hostname": "n1", **changed,
                                        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert dict(nodes["n0"].labels)["pool"] == "a100" and "new" not in nodes["n0"].labels
    assert b.snapshot.index.node_labels.get(("pool", "a100")) == 2
    assert b.snapshot.index.node_labels.get(("pool", "h100")) == 1
    assert b.snapshot.index.node_labels.get(("zone", "eu-1a")) == 2
    b.ensure_shards()
    restored = SnapshotBuilder.restore(
        cluster="c1", info=INFO, resources=RESOURCES, resource_versions=b.resource_versions,
        shard_count=b.shard_count, shards=[b.encode_shard(i) for i in range(b.shard_count)])
    assert {n: dict(s.labels) for n, s in restored.snapshot.nodes.items()} == \
        {n: dict(s.labels) for n, s in b.snapshot.nodes.items()}
    assert restored.snapshot.nodes["n0"].allocatable is restored.snapshot.nodes["n2"].allocatable
    assert restored.snapshot.index == b.snapshot.index


def test_restore_rejects_labels_that_are_not_a_map_of_strings() -> None:
    b = builder()
    b.apply("nodes", [("ADDED", node("n0"))], resource_version="1")
    b.ensure_shards()
    shards = [b.encode_shard(i) for i in range(b.shard_count)]
    row = next(r for s in shards for r in s["nodes"])
    for bad in (["not", "a", "map"], {"zone": 7}):
        row[-1] = bad
        with pytest.raises(ValueError, match="malformed"):
            SnapshotBuilder.restore(cluster="c1", info=INFO, resources=RESOURCES, resource_versions={},
                                    shard_count=b.shard_count, shards=shards)
