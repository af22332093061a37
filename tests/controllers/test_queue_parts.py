"""The parts the placement loop's queue handling is made of, without a hub: a stored Queue as placement's
QueueQuota (defaults, quantities, malformed objects refused with the field named), the Queue status it
writes (valid for the API's QueueStatus model), and what a job's member pods hold per node (the room its
eviction frees) as the snapshot builder tracks it, through a checkpoint round trip."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from federator.apis.queue import QueueStatus
from federator.clusters.snapshot_builder import SnapshotBuilder
from federator.controllers.queues import queue_quota, queue_status
from federator.placement import QueueUsage, QuotaAmounts, Resources, WithinQueue

from ..clusters.test_snapshot_builder import INFO, RESOURCES, node, pod

GI = 2**30
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()


def stored(spec: Any, name: str = "vision") -> dict[str, Any]:
    return {"apiVersion": "federator.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def test_a_queue_with_defaults_and_quantities() -> None:
    quota = queue_quota(stored({"namespaces": {"names": ["a"]}}))
    assert quota.nominal == QuotaAmounts() and quota.borrowing_limit is None and quota.cohort == ""
    assert (quota.weight, quota.within_queue, quota.reclaim_borrowed) == (1.0, WithinQueue.LOWER_PRIORITY, True)
    full = queue_quota(stored({
        "namespaces": {"selector": {}}, "quota": {"gpus": {"A100": 64, "H100": 0}, "cpu": "512", "memory": "4Ti"},
        "cohort": "research", "borrowingLimit": {"gpus": {"A100": 8}, "cpu": "1500m"}, "weight": 2.5,
        "preemption": {"withinQueue": "Never", "reclaimBorrowed": False}}))
    assert full.nominal == QuotaAmounts(gpus={"A100": 64, "H100": 0}, cpu_milli=512_000, memory=4 * 1024 * GI)
    assert full.borrowing_limit == QuotaAmounts(gpus={"A100": 8}, cpu_milli=1500)
    assert (full.cohort, full.weight, full.within_queue, full.reclaim_borrowed) == \
        ("research", 2.5, WithinQueue.NEVER, False)


@pytest.mark.parametrize(("spec", "field"), [
    (None, "spec"),
    ({"quota": {"cpu": "lots"}}, "spec.quota"),
    ({"quota": {"memory": "-1Gi"}}, "spec.quota"),
    ({"quota": {"gpus": ["A100"]}}, "spec.quota.gpus"),
    ({"quota": "A100=8"}, "spec.quota"),
    ({"borrowingLimit": {"cpu": "1e400"}}, "spec.borrowingLimit"),
    ({"preemption": "Never"}, "spec.preemption"),
    ({"weight": "heavy"}, "spec.weight"),
    ({"weight": True}, "spec.weight"),
])
def test_a_malformed_queue_is_refused_naming_the_field(spec: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        queue_quota(stored(spec))


@pytest.mark.parametrize("spec", [
    {"quota": {"gpus": {"A100": -1}}},
    {"quota": {"gpus": {"": 8}}},
    {"weight": 0},
    {"preemption": {"withinQueue": "Always"}},
])
def test_values_placement_refuses_raise_too(spec: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        queue_quota(stored(spec))


def test_queue_status_is_what_the_api_accepts_and_keeps_the_transition_time() -> None:
    usage = QueueUsage(queue="vision", used=QuotaAmounts(gpus={"A100": 16, "H100": 0}, cpu_milli=8000, memory=32 * GI),
                       borrowed=QuotaAmounts(gpus={"A100": 8}, cpu_milli=0, memory=0), gangs=2)
    blocked = queue_status(None, usage=usage, pending=3, waiting_for_quota=2, head_block="ns/a: queue vision uses 16",
                           generation=4, now=NOW)
    assert blocked["used"] == {"gpus": {"A100": 16}, "cpu": "8", "memory": "32Gi"}
    assert blocked["borrowed"] == {"gpus": {"A100": 8}}
    assert (blocked["pendingJobs"], blocked["admittedJobs"], blocked["observedGeneration"]) == (3, 2, 4)
    [condition] = blocked["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Admitting", "False", "QuotaExceeded")
    assert condition["message"] == "2 jobs wait for quota: ns/a: queue vision uses 16"
    QueueStatus.model_validate(blocked)
    again = queue_status(blocked, usage=usage, pending=3, waiting_for_quota=1, head_block="x" * 10_000,
                         generation=4, now=NOW + 60)
    assert again["conditions"][0]["lastTransitionTime"] == condition["lastTransitionTime"]
    assert len(again["conditions"][0]["message"]) == 4096
    idle = queue_status(again, usage=None, pending=0, waiting_for_quota=0, head_block="", generation=None,
                        now=NOW + 120)
    assert "used" not in idle and "borrowed" not in idle and "observedGeneration" not in idle
    assert idle["conditions"][0]["status"] == "True" and idle["conditions"][0]["lastTransitionTime"] != \
        condition["lastTransitionTime"]
    QueueStatus.model_validate(idle)


def test_job_amounts_are_what_its_bound_pods_hold_per_node_and_epoch() -> None:
    b = SnapshotBuilder(cluster="c1", info=INFO, resources=RESOURCES)
    b.apply("nodes", [("ADDED", node("n1")), ("ADDED", node("n2"))], resource_version="1")
    b.apply("pods", [
        ("ADDED", pod("w0", node_name="n1", gpus=4, cpu="2", job="u1", epoch="3")),
        ("ADDED", pod("w1", node_name="n1", gpus=4, cpu="2", job="u1", epoch="3")),
        ("ADDED", pod("w2", node_name="n2", gpus=8, cpu="4", job="u1", epoch="3")),
        ("ADDED", pod("old", node_name="n2", gpus=1, job="u1", epoch="2")),
        ("ADDED", pod("odd", node_name="n2", gpus=1, job="u1", epoch="x")),
        ("ADDED", pod("pending", node_name=None, gpus=8, job="u1", epoch="3")),
        ("ADDED", pod("other", node_name="n2", gpus=8, job="u2")),
    ], resource_version="2")
    four = Resources(cpu_milli=2000, memory=GI, gpu=4)
    assert b.job_amounts("u1", epoch=3) == {"n1": four + four, "n2": Resources(cpu_milli=4000, memory=GI, gpu=8)}
    assert b.job_amounts("u1", epoch=3, up_to=True)["n2"] == Resources(cpu_milli=5000, memory=2 * GI, gpu=9)
    assert b.job_amounts("u1")["n2"] == Resources(cpu_milli=6000, memory=3 * GI, gpu=10)
    assert b.job_amounts("nobody") == {} and b.job_amounts("u1", epoch=9) == {}
    b.ensure_shards()
    restored = SnapshotBuilder.restore(cluster="c1", info=INFO, resources=RESOURCES,
                                       resource_versions=b.resource_versions, shard_count=b.shard_count,
                                       shards=[b.encode_shard(i) for i in range(b.shard_count)])
    assert restored.job_amounts("u1", epoch=3) == b.job_amounts("u1", epoch=3)
    b.apply("pods", [("DELETED", pod("w0")), ("MODIFIED", pod("w1", node_name="n1", phase="Succeeded", job="u1"))],
            resource_version="3")
    assert b.job_amounts("u1", epoch=3) == {"n2": Resources(cpu_milli=4000, memory=GI, gpu=8)}
    b.apply("pods", [("DELETED", pod(name)) for name in ("w2", "old", "odd", "pending")], resource_version="4")
    assert b.job_amounts("u1") == {}
