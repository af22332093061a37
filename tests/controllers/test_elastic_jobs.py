"""Elastic jobs in the hub's controllers (issue 19): the GangRequest carries each role's min and max
replicas; the placement decision's size is recorded in status.replicas (dropped by a requeue) and charged
to the queue at that size; status sync expects that size; end to end, an elastic job is placed at the
largest size that fits, dispatched at that size with the PodGroup's minimum at its minimum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from immutables import Map

from federator.controllers.jobpods import job_roles
from federator.controllers.jobs import (
    gang_request,
    placed_gang,
    placed_pods,
    record_placed_size,
    requeue,
)
from federator.controllers.status_sync import expected_roles
from federator.delegation import GangPhase, adapter_for
from federator.placement import Decision

from .jobtest_support import phase
from .lifecycle_support import CLUSTER_LABEL, history, lifecycle_env

NOW = 1_700_000_000.0


def elastic_job(placed: dict[str, int] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "bert", "namespace": "nlp", "uid": "0b6c3f1e-5d7a-4a53-9b8e-1f0c2d3e4a5b",
                     "creationTimestamp": "2024-05-01T12:00:00Z"},
        "spec": {"roles": [
            {"name": "ps", "replicas": 1, "template": {"image": "trainer:1.4", "resources": {"cpu": "2"}}},
            {"name": "worker", "replicas": 8, "minReplicas": 4, "maxReplicas": 16,
             "template": {"image": "trainer:1.4", "resources": {"cpu": "2", "nvidia.com/gpu": 1}}}]},
        "status": {"phase": "Placed", "placement": {"cluster": "dc-a", "epoch": 1}},
    }
    if placed is not None:
        job["status"]["replicas"] = placed
    return job


def test_gang_request_carries_the_bounds() -> None:
    gang = gang_request(elastic_job(), now=NOW)
    ps, worker = gang.roles
    assert (ps.low, ps.replicas, ps.high, ps.elastic) == (1, 1, 1, False)
    assert (worker.low, worker.replicas, worker.high, worker.elastic) == (4, 8, 16, True)
    assert gang.elastic and gang.range_pods() == (5, 17)
    fixed = elastic_job()
    for key in ("minReplicas", "maxReplicas"):
        del fixed["spec"]["roles"][1][key]
    assert not gang_request(fixed, now=NOW).elastic


def _decision(**sizes: Any) -> Decision:
    return Decision(gang_key="nlp/bert", gang_uid="u", cluster="dc-a", gpu_model=None, assignment=(),
                    resource_version="7", decided_at=NOW, why_not=Map(), scores=(), **sizes)


def test_the_placed_size_is_recorded_charged_and_dropped_by_a_requeue() -> None:
    decision = _decision(replicas=Map({"ps": 1, "worker": 12}), ranges=Map({"worker": (4, 16)}))
    status: dict[str, Any] = {}
    assert record_placed_size(status, decision) == "; size worker 12 (4..16)"
    assert status["replicas"] == {"ps": 1, "worker": 12}
    job = elastic_job(status["replicas"])
    assert expected_roles(job) == {"ps": 1, "worker": 12} and placed_pods(job) == 13
    gang = gang_request(job, now=NOW)
    assert placed_gang(job, gang).total.gpu == 12 and gang.total.gpu == 8  # charged as placed, not preferred
    # a fixed-size decision: recorded, no size words
    fixed = _decision(replicas=Map({"ps": 1, "worker": 8}))
    assert record_placed_size(status, fixed) == "" and status["replicas"] == {"ps": 1, "worker": 8}
    assert job_roles(job) == [("ps", 1), ("worker", 12)]  # the pods and logs subresources read 12 workers
    requeue(job["status"], reason="ClusterLost", message="lost", now=NOW, job="nlp/bert")
    assert "replicas" not in job["status"] and expected_roles(job) == {"ps": 1, "worker": 8}
    assert job_roles(job) == [("ps", 1), ("worker", 8)]


def _running_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    objects = adapter_for("volcano").render(job, cluster_scheduler_name="volcano", epoch=1, hub_id="hub",
                                            namespace="nlp")
    pods = [o.body for o in objects if o.kind == "Pod"]
    for pod in pods:
        pod["spec"]["nodeName"] = "gpu-0"
        pod["status"] = {"phase": "Running"}
    return pods


def test_status_sync_expects_the_placed_size() -> None:
    for workers in (4, 11, 16):
        job = elastic_job({"ps": 1, "worker": workers})
        gang = adapter_for("volcano").read_status(None, _running_pods(job), expected=expected_roles(job))
        assert gang.phase is GangPhase.RUNNING and gang.expected == 1 + workers, gang
    # placed at 5, the spec's 8 would have read as three pods missing
    job = elastic_job({"ps": 1, "worker": 5})
    gang = adapter_for("volcano").read_status(None, _running_pods(job), expected={"ps": 1, "worker": 8})
    assert gang.phase is GangPhase.PLACED and gang.reason == "PodsMissing"


CLUSTER = "onprem-rdma-a100"  # volcano, 4 GPU nodes of 8 A100s


async def test_an_elastic_job_runs_at_the_largest_size_that_fits(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        body = {
            "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "elastic", "namespace": "team-a"},
            "spec": {"roles": [{"name": "worker", "replicas": 2, "minReplicas": 1, "maxReplicas": 6,
                                "template": {"image": "trainer:1.4",
                                             "resources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8}}}],
                     "placement": {"clusterSelector": {"matchLabels": {CLUSTER_LABEL: CLUSTER}}}},
        }
        await env.api.submit(body)
        job = await env.api.wait_job("team-a", "elastic", lambda j: phase(j) == "Running", timeout=60,
                                     what="Running")
        # four whole GPU nodes: 4 workers, not the preferred 2 nor the maximum 6
        assert job["status"]["replicas"] == {"worker": 4}
        placed = history(job, "Placed")  # (more than one if a loaded member timed out a dispatch)
        assert placed and all(p["message"].endswith("size worker 4 (1..6)") for p in placed), placed
        assert job["status"]["podCounts"]["worker"]["running"] == 4
        groups, pods = await env.fed.member_objects(CLUSTER, job["metadata"]["uid"])
        assert sorted(p["metadata"]["labels"]["federator.dev/index"] for p in pods) == ["0", "1", "2", "3"]
        (group,) = groups
        assert group["spec"]["minMember"] == 1
        assert group["metadata"]["annotations"]["federator.dev/gang"] == "worker=4"
