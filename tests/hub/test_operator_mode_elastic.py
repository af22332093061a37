"""Elastic gangs in operator mode (issues 19 and 28): a PyTorchJob with an elasticPolicy (1 to 3 workers) whose member
copy the member's training operator (the simulator's emulation) runs is resized by the hub through that copy: it
grows when room frees (the copy's spec.pytorchReplicaSpecs.Worker.replicas patched, the operator makes the pod of
the new index, the hub's status.replicas says so) and shrinks for a higher-priority job (the copy patched down,
the operator deletes the highest-indexed worker). The hub never creates or deletes one of the operator's pods.

A simulated cluster of two GPU nodes (8 A100s each) whose pods run until deleted. The tests wait for the history
entries, member objects and pods they assert on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from federator.clusters.client import PODS
from federator.controllers.placement import PlacementController
from federator.delegation.adapter import LABEL_INDEX, LABEL_JOB_UID

from ..controllers.jobtest_support import wait_until
from ..controllers.lifecycle_support import Env, aimed_job, history, lifecycle_env
from ..controllers.test_queue_flow import create_queue, running, team_queue
from .test_job_kinds import write
from .test_operator_mode import CLUSTER, LIFECYCLE_WITH_TWINS, SOURCE_FINALIZER, OperatorFederation, member_copy

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]
TWO_NODES = {CLUSTER: {"gpu_nodes": 2, "cpu_nodes": 0}}


def elastic_pytorchjob(name: str) -> dict[str, Any]:
    """Workers of 4 A100s, elastic from 1 to 3 (starting at 1 if nothing more fits), in queue vision."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "vision"}},
            "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d"},
                     "pytorchReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                         "spec": {"containers": [{"name": "pytorch", "image": "trainer:1.4", "resources": {
                             "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 4},
                             "limits": {"nvidia.com/gpu": 4}}}]}}}}}}


async def operator_workers(env: Env, uid: str) -> list[str] | None:
    """The names of the job's live pods once each runs: the operator's, never the hub's (no hub index label)."""
    client = await env.member(CLUSTER)
    pods = [p for p in (await client.list_all(PODS, label_selector=f"{LABEL_JOB_UID}={uid}")).items
            if not p["metadata"].get("deletionTimestamp")]
    assert all(LABEL_INDEX not in p["metadata"]["labels"] for p in pods), "the hub made a pod of an operator's gang"
    if any((p.get("status") or {}).get("phase") != "Running" for p in pods):
        return None
    return sorted(p["metadata"]["name"] for p in pods)


async def test_an_elastic_pytorchjob_in_operator_mode_grows_and_shrinks_through_its_member_copy(
        tmp_path: Path) -> None:
    fed = OperatorFederation(tmp_path / "members", run_seconds=None)
    async with lifecycle_env(tmp_path, [CLUSTER], federation=fed, profile_overrides=TWO_NODES,
                             controllers=LIFECYCLE_WITH_TWINS, source_finalizers=(SOURCE_FINALIZER,),
                             elastic_tick_seconds=0.2, elastic_grow_cooldown_seconds=1.0,
                             stuck_timeout_seconds=60.0, cleanup_grace_seconds=60.0) as env:
        await create_queue(env, team_queue("vision", ["team-a"], gpus=64))
        blocker = aimed_job("blocker", CLUSTER, workers=2, gpus=4, ps=0)
        blocker["spec"].update(queue="vision", priority=1)
        await env.api.submit(blocker)
        await running(env, "blocker")

        source = elastic_pytorchjob("flex")
        code, _, err = await env.hub.kubectl("admin", "apply", "-f", write(tmp_path, source))
        assert code == 0, err
        flex = await running(env, "flex")
        uid = flex["metadata"]["uid"]
        assert flex["status"]["replicas"] == {"worker": 2}  # 8 of the 16 GPUs were free
        copy = await member_copy(env, source)
        assert copy is not None and copy["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2  # as placed
        await wait_until(lambda: workers_are(env, uid, ["flex-worker-0", "flex-worker-1"]), timeout=30,
                         what="the operator's 2 workers")

        # room frees: the grow pass grows flex to its maximum through the copy
        await env.api.delete("team-a", "blocker")
        grown = await env.api.wait_job("team-a", "flex", lambda j: bool(history(j, "Resized")), timeout=40,
                                       what="flex grown")
        [resized] = history(grown, "Resized")
        assert (resized["from"], resized["to"], resized["reason"]) == ({"worker": 2}, {"worker": 3}, "Grown")
        assert grown["status"]["replicas"] == {"worker": 3}
        await wait_until(lambda: copy_workers_are(env, source, 3), timeout=30, what="the copy patched to 3")
        await wait_until(lambda: workers_are(env, uid, ["flex-worker-0", "flex-worker-1", "flex-worker-2"]),
                         timeout=30, what="the operator's third worker")
        copy = await member_copy(env, source)
        assert copy is not None and copy["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 3,
                                                                      "rdzvBackend": "c10d"}

        # placement counts the operator's 3 pods (the growth's reservation released): 2 of them above the minimum
        await wait_until(lambda: removable(env, uid) == 2, timeout=30, what="flex's 3 pods counted by placement")
        # a higher-priority job needs 8 GPUs, 4 are free: flex gives up its newest worker instead of all of them
        urgent = aimed_job("urgent", CLUSTER, workers=2, gpus=4, ps=0)
        urgent["spec"].update(queue="vision", priority=10)
        await env.api.submit(urgent)
        await running(env, "urgent")
        shrunk = await env.api.wait_job("team-a", "flex", lambda j: len(history(j, "Resized")) == 2, timeout=40,
                                        what="flex shrunk")
        resized = history(shrunk, "Resized")[-1]
        assert (resized["from"], resized["to"], resized["reason"]) == ({"worker": 3}, {"worker": 2}, "Preempted")
        assert shrunk["status"]["replicas"] == {"worker": 2} and shrunk["status"]["phase"] == "Running"
        assert not history(shrunk, "Preempted")
        await wait_until(lambda: copy_workers_are(env, source, 2), timeout=30, what="the copy patched to 2")
        await wait_until(lambda: workers_are(env, uid, ["flex-worker-0", "flex-worker-1"]), timeout=30,
                         what="the operator deleted worker 2")


def removable(env: Env, uid: str) -> int:
    placement = env.hub.context.parts.running.placement
    assert isinstance(placement, PlacementController)
    gang = placement.accounting.running_gang(uid)
    return len(gang.removable) if gang is not None else -1


async def workers_are(env: Env, uid: str, names: list[str]) -> bool:
    return await operator_workers(env, uid) == names


async def copy_workers_are(env: Env, source: dict[str, Any], count: int) -> bool:
    copy = await member_copy(env, source)
    return copy is not None and copy["spec"]["pytorchReplicaSpecs"]["Worker"].get("replicas") == count
