"""A gang of restarting pods (restartPolicy OnFailure) whose PodGroup is deleted in the member, not by the fence
agent (the fencing lease says so): its pods cannot be created again (their owner is gone), so the job fails as a
restartPolicy Never gang whose objects vanished does (reason MemberObjectsDeleted), instead of retrying the
restart forever on the PodGroup's 404. The agent's case (requeued, not failed) is
tests/controllers/test_partition_fencing.py. A real hub and a simulated volcano cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from federator.clusters.client import PODS, podgroup_resource

from .jobtest_support import condition, phase, placement_of
from .lifecycle_support import aimed_job, history, lifecycle_env

pytestmark = pytest.mark.slow
CLUSTER = "onprem-rdma-a100"


async def test_a_restarting_gang_whose_podgroup_an_admin_deleted_fails_instead_of_retrying_forever(
        tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        body = aimed_job("orphaned", CLUSTER, workers=2, gpus=4)
        for role in body["spec"]["roles"]:
            role["restartPolicy"] = "OnFailure"
        uid = (await env.api.submit(body))["metadata"]["uid"]
        running = await env.api.wait_job("team-a", "orphaned", lambda j: phase(j) == "Running", what="running")
        groups, pods = await env.fed.member_objects(CLUSTER, uid)
        assert len(groups) == 1 and len(pods) == 3
        client = await env.member(CLUSTER)
        kind = podgroup_resource("volcano")
        assert kind is not None
        # someone with the member's admin rights deletes the gang: its PodGroup first, then its pods
        await client.delete(kind, namespace="team-a", name=groups[0]["metadata"]["name"])
        for pod in pods:
            await client.delete(PODS, namespace="team-a", name=pod["metadata"]["name"], grace_period_seconds=0)
        job = await env.api.wait_job("team-a", "orphaned", lambda j: phase(j) == "Failed", timeout=60,
                                     what="failed: its objects were deleted")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "MemberObjectsDeleted", failed
        assert placement_of(job)["epoch"] == placement_of(running)["epoch"]
        assert not history(job, "PodRestarted") and not history(job, "Fenced"), job["status"]["history"]
