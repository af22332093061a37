"""Failed workers (issue 19 item 5): a role with restartPolicy OnFailure has a failed pod deleted and
created again in the same cluster under the same name with the next attempt index; failures the
infrastructure caused (a lost node: DisruptionTarget) do not count toward spec.backoffLimit, a crashed
container's (reason Error) do, and past the limit the job fails with the pods' reasons. Against a real hub
and a simulated volcano cluster (4 nodes of 8 A100s), faults through the simulator's fault API.
restartPolicy Never is tests/controllers/test_status_sync.py's lost-node test (a rule counts it: the gang fails)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from federator.controllers.jobs import DispatchError, job_ref, requeue, update_job_status
from federator.controllers.status_sync import ANNOTATION_ATTEMPT, ANNOTATION_FAILURES, restart_plan
from federator.delegation import adapter_for
from federator.delegation.adapter import LABEL_ROLE

from .jobtest_support import condition, phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, history, lifecycle_env

CLUSTER = "onprem-rdma-a100"


def restartable_job(name: str, *, backoff_limit: int, count_gpu_faults: bool = False) -> dict[str, Any]:
    """`count_gpu_faults`: a rule counts the simulator's GPU fault (exit code 134) as a plain crash, restarted in
    place, instead of its default (Requeue: the gang moves, tests/controllers/test_failure_policy.py)."""
    body = aimed_job(name, CLUSTER, workers=2, gpus=8)
    body["spec"]["backoffLimit"] = backoff_limit
    if count_gpu_faults:
        body["spec"]["failurePolicy"] = {"rules": [{"action": "Count",
                                                    "onExitCodes": {"operator": "In", "values": [134]}}]}
    for role in body["spec"]["roles"]:
        role["restartPolicy"] = "OnFailure"
    return body


async def _worker(env: Env, uid: str, *, index: str = "0") -> dict[str, Any]:
    pods = await env.live_pods(CLUSTER, uid)
    return next(p for p in pods if p["metadata"]["labels"][LABEL_ROLE] == "worker"
                and p["metadata"]["labels"]["federator.dev/index"] == index)


async def _restarted(env: Env, uid: str, old: dict[str, Any], attempt: str) -> dict[str, Any]:
    """Wait for the worker `old` to be back (a new pod under its name) at `attempt`, Running."""
    name = old["metadata"]["name"]

    async def probe() -> dict[str, Any] | None:
        for pod in await env.live_pods(CLUSTER, uid):
            if pod["metadata"]["name"] == name and pod["metadata"]["uid"] != old["metadata"]["uid"] \
                    and (pod.get("status") or {}).get("phase") == "Running":
                return pod
        return None

    pod = await wait_until(probe, what=f"{name} running again", timeout=30)
    assert pod["metadata"]["annotations"][ANNOTATION_ATTEMPT] == attempt
    env_vars = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env_vars["FEDERATOR_ATTEMPT"] == attempt
    return pod


async def test_failed_workers_restart_in_place_until_the_backoff_limit(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        uid = (await env.api.submit(restartable_job("retry", backoff_limit=1, count_gpu_faults=True)))["metadata"]["uid"]
        await env.api.wait_job("team-a", "retry", lambda j: phase(j) == "Running", what="running")
        first = await _worker(env, uid)
        # a GPU of its node goes bad: the container crashes (exit 134, reason Error), counted
        await env.fed.fault(CLUSTER, "gpu-unhealthy", {"node": first["spec"]["nodeName"], "count": 1})
        second = await _restarted(env, uid, first, "1")
        assert second["metadata"]["annotations"][ANNOTATION_FAILURES] == "1"
        assert second["spec"]["nodeName"] != first["spec"]["nodeName"]  # 7 healthy GPUs left there
        job = await env.api.wait_job("team-a", "retry", lambda j: bool(history(j, "PodRestarted")),
                                     what="PodRestarted")
        assert phase(job) == "Running" and placement_of(job)["cluster"] == CLUSTER
        (entry,) = history(job, "PodRestarted")
        assert first["metadata"]["name"] in entry["message"] and "1 of spec.backoffLimit 1" in entry["message"]
        assert "exit code 134" in entry["message"] and "counted" in entry["message"]
        assert set(await env.fed.where(uid)) == {CLUSTER}  # never moved nor split
        # a second crash: 2 counted failures > backoffLimit 1, the job fails with the pods' reasons
        await env.fed.fault(CLUSTER, "gpu-unhealthy", {"node": second["spec"]["nodeName"], "count": 1})
        job = await env.api.wait_job("team-a", "retry", lambda j: phase(j) == "Failed", what="failed")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "BackoffLimitExceeded", failed
        assert "more than spec.backoffLimit 1" in failed["message"] and "exit code 134" in failed["message"]
        assert second["metadata"]["name"] in failed["message"]
        assert len(history(job, "PodRestarted")) == 1


async def test_a_lost_node_restarts_the_worker_without_counting(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        # backoffLimit 0: a single counted failure would fail the job
        uid = (await env.api.submit(restartable_job("lost", backoff_limit=0)))["metadata"]["uid"]
        await env.api.wait_job("team-a", "lost", lambda j: phase(j) == "Running", what="running")
        first = await _worker(env, uid, index="1")
        await env.fed.fault(CLUSTER, "node-failure", {"node": first["spec"]["nodeName"]})
        second = await _restarted(env, uid, first, "1")
        assert second["metadata"]["annotations"][ANNOTATION_FAILURES] == "0"
        job = await env.api.wait_job("team-a", "lost", lambda j: bool(history(j, "PodRestarted")),
                                     what="PodRestarted")
        (entry,) = history(job, "PodRestarted")
        assert "NodeLost" in entry["message"] and "not counted" in entry["message"], entry
        assert "0 of spec.backoffLimit 0" in entry["message"]
        job = await env.api.wait_job("team-a", "lost", lambda j: j["status"]["podCounts"]["worker"]["running"] == 2,
                                     what="both workers running")
        assert phase(job) == "Running" and placement_of(job)["cluster"] == CLUSTER


async def test_a_lost_worker_shrinks_an_elastic_gang_above_its_minimum(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        body = {
            "apiVersion": "federator.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "elastic", "namespace": "team-a"},
            "spec": {"backoffLimit": 0, "roles": [{
                "name": "worker", "replicas": 2, "minReplicas": 1, "maxReplicas": 6, "restartPolicy": "OnFailure",
                "onWorkerLoss": "shrink",
                "template": {"image": "trainer:1.4", "resources": {"cpu": "4", "memory": "16Gi",
                                                                   "nvidia.com/gpu": 8}}}],
                     "placement": {"clusterSelector": {"matchLabels": {"federator.test/cluster": CLUSTER}}}},
        }
        uid = (await env.api.submit(body))["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "elastic", lambda j: phase(j) == "Running", timeout=60,
                                     what="running")
        assert job["status"]["replicas"] == {"worker": 4}  # four whole GPU nodes
        lost = await _worker(env, uid, index="1")
        await env.fed.fault(CLUSTER, "node-failure", {"node": lost["spec"]["nodeName"]})
        job = await env.api.wait_job("team-a", "elastic", lambda j: bool(history(j, "Resized")), what="Resized")
        (entry,) = history(job, "Resized")
        assert (entry["from"], entry["to"], entry["reason"]) == ({"worker": 4}, {"worker": 3}, "WorkerLost")
        assert lost["metadata"]["name"] in entry["message"] and "NodeLost" in entry["message"]
        assert job["status"]["replicas"] == {"worker": 3} and phase(job) == "Running"
        assert not history(job, "PodRestarted")

        # the role keeps indices 0..2: worker 3 goes, index 1 is created again (on worker 3's node)
        again = await _restarted(env, uid, lost, "1")
        assert again["metadata"]["labels"]["federator.dev/index"] == "1"
        assert {e["name"]: e.get("value") for e in again["spec"]["containers"][0]["env"]}[
            "FEDERATOR_ROLE_REPLICAS"] == "3"

        async def three_left() -> list[str] | None:
            pods = await env.live_pods(CLUSTER, uid)
            return sorted(p["metadata"]["labels"]["federator.dev/index"] for p in pods) if len(pods) == 3 else None

        assert await wait_until(three_left, what="the top worker deleted") == ["0", "1", "2"]
        job = await env.api.wait_job("team-a", "elastic", lambda j: j["status"]["podCounts"]["worker"] ==
                                     {"pending": 0, "running": 3, "succeeded": 0, "failed": 0}, what="3 running")
        assert phase(job) == "Running" and placement_of(job)["cluster"] == CLUSTER


def _pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    objects = adapter_for("volcano").render(job, cluster_scheduler_name="volcano", epoch=1, hub_id="hub",
                                            namespace="team-a")
    pods = [o.body for o in objects if o.kind == "Pod"]
    for pod in pods:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"phase": "Running"}
    return pods


def _job(**spec: Any) -> dict[str, Any]:
    job = aimed_job("plan", CLUSTER, workers=2, gpus=8)
    job["metadata"]["uid"] = "4f1c2b3a-0000-4000-8000-000000000001"
    job["spec"].update(spec)
    return job


def test_restart_plan_reads_the_pods() -> None:
    never = _job()
    pods = _pods(never)
    pods[1]["status"] = {"phase": "Failed", "reason": "NodeLost"}
    assert restart_plan(never, pods, admitted=True) is None  # restartPolicy Never: today's behaviour
    job = _job(backoffLimit=2)
    job["spec"]["roles"][1]["restartPolicy"] = "OnFailure"
    pods = _pods(job)
    assert restart_plan(job, pods, admitted=True) is None  # nothing failed
    # a ps failure is not the workers' to restart (ps keeps Never)
    pods[0]["status"] = {"phase": "Failed", "reason": "Error"}
    assert restart_plan(job, pods, admitted=True) is None
    pods[0]["status"] = {"phase": "Running"}
    lost = {"phase": "Failed", "reason": "NodeLost",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]}
    crashed = {"phase": "Failed", "containerStatuses": [
        {"name": "main", "state": {"terminated": {"exitCode": 134, "reason": "Error", "message": "GPU 3"}}}]}
    pods[1]["status"], pods[2]["status"] = lost, crashed
    pods[2]["metadata"]["annotations"][ANNOTATION_ATTEMPT] = "3"
    pods[2]["metadata"]["annotations"][ANNOTATION_FAILURES] = "1"
    plan = restart_plan(job, pods, admitted=True)
    assert plan is not None and not plan.exceeded and plan.counted == 2
    names = [p["metadata"]["name"] for p in pods]
    assert plan.delete == {names[1]: f"uid-{names[1]}", names[2]: f"uid-{names[2]}"}
    assert plan.recreate == {names[1]: {ANNOTATION_ATTEMPT: "1", ANNOTATION_FAILURES: "0"},
                             names[2]: {ANNOTATION_ATTEMPT: "4", ANNOTATION_FAILURES: "2"}}
    # one more counted failure carried by a running pod: 3 > 2
    pods[0]["metadata"]["annotations"][ANNOTATION_FAILURES] = "1"
    plan = restart_plan(job, pods, admitted=True)
    assert plan is not None and plan.exceeded and plan.counted == 3
    # a missing worker after admission is created again; before admission the dispatch owns it
    job["spec"]["backoffLimit"] = 6
    del pods[1:]
    plan = restart_plan(job, pods, admitted=True)
    assert plan is not None and sorted(plan.recreate) == sorted(names[1:]) and not plan.delete
    assert restart_plan(job, pods, admitted=False) is None
    # hostile annotations count as nothing
    pods[0]["metadata"]["annotations"][ANNOTATION_FAILURES] = "-5"
    pods[0]["metadata"]["annotations"][ANNOTATION_ATTEMPT] = "9" * 40
    pods[0]["status"] = crashed
    pods[0]["metadata"]["labels"][LABEL_ROLE] = "worker"
    plan = restart_plan(job, pods, admitted=False)
    assert plan is not None and plan.counted == 1 and plan.recreate[names[0]][ANNOTATION_ATTEMPT] == "1"


def test_restart_plan_shrinks_elastic_roles_above_their_minimum() -> None:
    job = _job(backoffLimit=0)
    worker = job["spec"]["roles"][1]
    worker.update(replicas=2, minReplicas=2, maxReplicas=4, onWorkerLoss="shrink")
    job["status"] = {"phase": "Running", "replicas": {"ps": 1, "worker": 3}}
    pods = _pods(job)
    names = [p["metadata"]["name"] for p in pods]
    assert len(pods) == 4
    crashed = {"phase": "Failed", "reason": "Error"}
    pods[1]["status"], pods[2]["status"] = crashed, crashed
    # restartPolicy Never: the first shrinks (3 -> 2), the second is at the minimum: the gang fails
    assert restart_plan(job, pods, admitted=True) is None
    pods[2]["status"] = {"phase": "Running"}
    plan = restart_plan(job, pods, admitted=True)
    # worker 0 lost: worker 2 (the top) goes and index 0 is created again, so the role keeps 0..1
    assert plan is not None and plan.delete == {names[1]: f"uid-{names[1]}", names[3]: f"uid-{names[3]}"}
    assert plan.recreate == {names[1]: {ANNOTATION_ATTEMPT: "1"}}
    assert (plan.sizes_before, plan.sizes_after) == ({"ps": 1, "worker": 3}, {"ps": 1, "worker": 2})
    assert plan.counted == 0 and not plan.exceeded and "shrunk to 2" in plan.reasons[0]
    # with OnFailure the one at the minimum restarts instead (and counts)
    worker["restartPolicy"] = "OnFailure"
    pods[2]["status"] = crashed
    plan = restart_plan(job, pods, admitted=True)
    assert plan is not None and sorted(plan.delete) == sorted(names[1:]) and sorted(plan.recreate) == names[1:3]
    assert plan.sizes_after == {"ps": 1, "worker": 2} and plan.counted == 1 and plan.exceeded
    # the job cache still says 3 after our own shrink: `expected` says 2, so no pod is missing
    del pods[1]
    pods[1]["status"] = {"phase": "Running"}
    assert restart_plan(job, pods, admitted=True, expected={"ps": 1, "worker": 2}) is None
    plan = restart_plan(job, pods, admitted=True)
    assert plan is not None and list(plan.recreate) == [names[1]]  # lowest free name


async def test_a_restart_creates_nothing_once_the_job_moved_on(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Status sync saw a worker fail and planned its restart on the job as it read it; before the re-create
    the job was requeued (its cluster lost, its gang fenced: the next decision takes epoch + 1). Creating
    the worker again then would start a pod of a superseded epoch beside the next one (the race dispatch
    closed for chaos seed 1657557937): the re-create reads the stored decision right before it creates and
    creates nothing. The move happens between the failure being seen and the re-create, every time."""
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        uid = (await env.api.submit(restartable_job("moved", backoff_limit=3, count_gpu_faults=True)))["metadata"]["uid"]
        job = await env.api.wait_job("team-a", "moved", lambda j: phase(j) == "Running", what="running")
        epoch = placement_of(job)["epoch"]
        first = await _worker(env, uid)
        ref = job_ref(job)

        # nothing else writes to the member meanwhile: the requeued job's next dispatch waits, no GC pass runs
        hold = asyncio.Event()
        env.hold_dispatches(CLUSTER, hold, monkeypatch)

        async def paused() -> None:
            return None

        monkeypatch.setattr(env.gc, "tick", paused)
        dispatcher = env.hub.context.parts.dispatcher
        restart = dispatcher.restart_pods
        outcomes: list[int | BaseException] = []

        async def moved_first(seen: Mapping[str, Any], *, cluster: str, epoch: int, delete: Mapping[str, str],
                              recreate: Mapping[str, Mapping[str, str]]) -> int:
            if not outcomes:
                def lost(stored: dict[str, Any]) -> dict[str, Any] | None:
                    requeue(stored["status"], reason="ClusterLost", message="test: the decision moved on",
                            now=time.time(), job=ref.key)
                    return stored

                assert await update_job_status(env.hub.context, namespace=ref.namespace, name=ref.name,
                                               mutate=lost, uid=uid) is not None
            try:
                created = await restart(seen, cluster=cluster, epoch=epoch, delete=delete, recreate=recreate)
            except BaseException as e:
                outcomes.append(e)
                raise
            outcomes.append(created)
            return created

        monkeypatch.setattr(dispatcher, "restart_pods", moved_first)
        await env.fed.fault(CLUSTER, "gpu-unhealthy", {"node": first["spec"]["nodeName"], "count": 1})
        await wait_until(lambda: bool(outcomes), what="status sync's restart of the failed worker")
        (outcome, *_) = outcomes
        assert isinstance(outcome, DispatchError) and outcome.outdated, outcome
        assert f"not cluster {CLUSTER} epoch {epoch}" in str(outcome)
        # the failed worker was deleted and nothing of the superseded epoch came back under its name
        again = [p for p in await env.live_pods(CLUSTER, uid) if p["metadata"]["name"] == first["metadata"]["name"]
                 and p["metadata"]["uid"] != first["metadata"]["uid"]]
        assert again == []
        stored = await env.api.get("team-a", "moved")
        assert not history(stored, "PodRestarted")
        assert (placement_of(stored).get("cluster"), placement_of(stored)["epoch"]) != (CLUSTER, epoch)
        hold.set()
