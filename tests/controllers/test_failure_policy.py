"""spec.failurePolicy (issue 29 item 4): every action and default against the simulator's pod failures,
through a real hub and a simulated volcano cluster (4 nodes of 8 A100s): exit codes (the sim's
fail-after/exit-code annotations on the pod template), OOMKilled (its exit-reason annotation), an image that
cannot be pulled (its image-pull-error annotation), a lost node and a GPU fault (the fault API). The pure
matching is tests/apis/test_failure_policy.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from federator.controllers.status_sync import ANNOTATION_FAILURES, GangOutcome, policy_verdict
from federator.delegation.adapter import LABEL_ROLE
from federator.sim.kubelet import (
    ANNOTATION_EXIT_CODE,
    ANNOTATION_EXIT_REASON,
    ANNOTATION_FAIL_AFTER,
    ANNOTATION_IMAGE_PULL_ERROR,
)

from .jobtest_support import condition, phase, placement_of, wait_until
from .lifecycle_support import Env, aimed_job, history, lifecycle_env

CLUSTER = "onprem-rdma-a100"
NS = "team-a"


def policy_job(name: str, *, rules: list[dict[str, Any]] | None = None, worker_annotations: dict[str, str] | None = None,
               restart_policy: str | None = None, backoff_limit: int | None = None) -> dict[str, Any]:
    """aimed_job's PS + 2 workers of 8 GPUs, with spec.failurePolicy and the sim's annotations on the workers."""
    body = aimed_job(name, CLUSTER, workers=2, gpus=8)
    body["spec"]["failurePolicy"] = {"rules": rules or []}
    if backoff_limit is not None:
        body["spec"]["backoffLimit"] = backoff_limit
    worker = body["spec"]["roles"][1]
    if restart_policy:
        worker["restartPolicy"] = restart_policy
    if worker_annotations:
        worker["template"] = {"metadata": {"annotations": worker_annotations}, "spec": {"containers": [{
            "name": "main", "image": "trainer:1.4",
            "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"},
                          "limits": {"nvidia.com/gpu": "8"}}}]}}
    return body


async def _worker(env: Env, uid: str) -> dict[str, Any]:
    pods = await env.live_pods(CLUSTER, uid)
    return next(p for p in pods if p["metadata"]["labels"][LABEL_ROLE] == "worker")


async def _failed(env: Env, name: str) -> dict[str, Any]:
    return await env.api.wait_job(NS, name, lambda j: phase(j) == "Failed", timeout=30, what="failed")


async def test_fail_job_on_an_exit_code_names_the_rule_and_the_members_words(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
                 {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]
        await env.api.submit(policy_job("exit42", rules=rules, worker_annotations={
            ANNOTATION_FAIL_AFTER: "0.5", ANNOTATION_EXIT_CODE: "42"}))
        job = await _failed(env, "exit42")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "PodFailurePolicy", failed
        assert "exit code 42" in failed["message"], failed
        assert "matched spec.failurePolicy.rules[1] (exit code 42 In [42]): FailJob" in failed["message"]
        assert not history(job, "PodRestarted") and not history(job, "FailurePolicy")


async def test_ignore_restarts_the_pod_in_place_without_counting(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        # backoffLimit 0: one counted failure would fail the job
        rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]
        await env.api.submit(policy_job("ignored", rules=rules, restart_policy="OnFailure", backoff_limit=0,
                                        worker_annotations={ANNOTATION_FAIL_AFTER: "0.5", ANNOTATION_EXIT_CODE: "3"}))
        job = await env.api.wait_job(NS, "ignored", lambda j: bool(history(j, "PodRestarted")), timeout=30,
                                     what="PodRestarted")
        entry = history(job, "PodRestarted")[0]
        assert "spec.failurePolicy.rules[0] (exit code 3 In [3]): Ignore" in entry["message"], entry
        assert "not counted" in entry["message"] and "0 of spec.backoffLimit 0" in entry["message"]
        assert phase(job) != "Failed" and placement_of(job)["cluster"] == CLUSTER
        uid = job["metadata"]["uid"]

        async def restarted() -> dict[str, Any] | None:
            return next((p for p in await env.live_pods(CLUSTER, uid)
                         if p["metadata"]["annotations"].get(ANNOTATION_FAILURES) is not None), None)

        pod = await wait_until(restarted, what="a worker created again", timeout=30)
        assert pod["metadata"]["annotations"][ANNOTATION_FAILURES] == "0"


async def test_restart_pod_in_a_role_that_restarts_no_single_pod_places_the_whole_gang_again(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        rules = [{"action": "RestartPod", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}}]
        body = policy_job("whole", rules=rules, worker_annotations={
            ANNOTATION_FAIL_AFTER: "0.5", ANNOTATION_EXIT_CODE: "7"})
        body["spec"]["failover"] = {"maxRequeues": 1}
        await env.api.submit(body)
        job = await env.api.wait_job(NS, "whole", lambda j: bool(history(j, "FailurePolicy")), timeout=30,
                                     what="FailurePolicy")
        entry = history(job, "FailurePolicy")[0]
        assert "rules[0] (exit code 7 NotIn [1, 2]): RestartPod" in entry["message"], entry
        assert "the whole gang is placed again" in entry["message"] and "counted in status.requeues" in entry["message"]
        # every copy fails the same way: the second time maxRequeues 1 is reached and the job fails
        job = await _failed(env, "whole")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "RequeueLimit", failed
        assert "maxRequeues 1" in failed["message"] and job["status"]["requeues"] == 1
        assert len(history(job, "FailurePolicy")) == 1
        assert not (placement_of(job).get("excludedClusters") or [])


async def test_a_gpu_fault_requeues_the_gang_off_the_node_in_the_same_cluster(tmp_path: Path) -> None:
    """The default for a GPU fault: Requeue excluding the node. The only cluster stays open, so the gang is placed
    there again at a new epoch, every pod kept off the faulty node (status.placement.excludedNodes, and a required
    node affinity on the rendered pods)."""
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        body = policy_job("xid")
        del body["spec"]["failurePolicy"]  # the defaults apply to every job
        uid = (await env.api.submit(body))["metadata"]["uid"]
        job = await env.api.wait_job(NS, "xid", lambda j: phase(j) == "Running", timeout=30, what="running")
        epoch = placement_of(job)["epoch"]
        worker = await _worker(env, uid)
        faulty = worker["spec"]["nodeName"]
        await env.fed.fault(CLUSTER, "gpu-unhealthy", {"node": faulty, "count": 1})
        job = await env.api.wait_job(NS, "xid", lambda j: bool(history(j, "FailurePolicy")), timeout=30,
                                     what="requeued by the policy")
        entry = history(job, "FailurePolicy")[0]
        assert "exit code 134" in entry["message"] and "default (GPU fault): Requeue" in entry["message"], entry
        assert f"node {faulty} of cluster {CLUSTER} excluded until" in entry["message"], entry
        # ... and an Event says the same (recorded in the background: waited for)
        event = await wait_until(lambda: _event(env, "xid", "FailurePolicy"), what="FailurePolicy Event", timeout=30)
        assert "default (GPU fault): Requeue" in event["message"] and event["type"] == "Warning", event
        job = await env.api.wait_job(
            NS, "xid", lambda j: phase(j) == "Running" and placement_of(j)["epoch"] > epoch, timeout=60,
            what="running again at a new epoch")
        assert placement_of(job)["cluster"] == CLUSTER and job["status"]["requeues"] == 1
        assert not placement_of(job).get("excludedClusters")
        assert [(e["cluster"], e["node"]) for e in placement_of(job)["excludedNodes"]] == [(CLUSTER, faulty)]
        pods = await env.live_pods(CLUSTER, uid)
        assert pods and all(p["metadata"]["labels"]["federator.dev/epoch"] == str(placement_of(job)["epoch"])
                            for p in pods), pods
        assert faulty not in {p["spec"]["nodeName"] for p in pods}
        for pod in pods:
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"]
            assert all({"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [faulty]}
                       in t["matchExpressions"] for t in terms), pod["spec"]["affinity"]


async def test_a_requeue_rule_excluding_the_cluster_moves_the_gang_elsewhere(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        rules = [{"action": "Requeue", "requeue": {"exclude": "Cluster"},
                  "onExitCodes": {"operator": "In", "values": [134]}}]
        uid = (await env.api.submit(policy_job("xidc", rules=rules)))["metadata"]["uid"]
        await env.api.wait_job(NS, "xidc", lambda j: phase(j) == "Running", timeout=30, what="running")
        worker = await _worker(env, uid)
        await env.fed.fault(CLUSTER, "gpu-unhealthy", {"node": worker["spec"]["nodeName"], "count": 1})
        job = await env.api.wait_job(NS, "xidc", lambda j: bool(history(j, "FailurePolicy")), timeout=30,
                                     what="requeued by the policy")
        entry = history(job, "FailurePolicy")[0]
        assert "spec.failurePolicy.rules[0] (exit code 134 In [134]): Requeue" in entry["message"], entry
        assert f"cluster {CLUSTER} excluded until" in entry["message"]
        excluded = [e["cluster"] for e in placement_of(job).get("excludedClusters") or []]
        assert excluded == [CLUSTER] and job["status"]["requeues"] == 1
        assert not placement_of(job).get("excludedNodes")
        # the only cluster is excluded: the job waits, and its old copy is deleted from the member
        assert await wait_until(lambda: _none_left(env, uid), what="old copy gone", timeout=30)
        job = await env.api.get(NS, "xidc")
        assert phase(job) in ("Pending", "Requeued"), phase(job)


async def _event(env: Env, name: str, reason: str) -> dict[str, Any] | None:
    """The hub's Event of that reason about the TrainingJob `name` (through the hub's API), once recorded."""
    code, body = await env.hub.request("GET", f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name={name}")
    assert code == 200, body
    return next((e for e in body.get("items") or () if e.get("reason") == reason), None)


async def _none_left(env: Env, uid: str) -> bool | None:
    return True if not await env.live_pods(CLUSTER, uid) else None


async def test_a_lost_node_never_counts_and_restarts_the_gang(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        body = policy_job("lostnode")
        del body["spec"]["failurePolicy"]  # the defaults apply to every job
        body["spec"]["failover"] = {"maxRequeues": 0}  # a counted whole-gang restart would fail it
        uid = (await env.api.submit(body))["metadata"]["uid"]
        job = await env.api.wait_job(NS, "lostnode", lambda j: phase(j) == "Running", timeout=30, what="running")
        epoch = placement_of(job)["epoch"]
        worker = await _worker(env, uid)
        await env.fed.fault(CLUSTER, "node-failure", {"node": worker["spec"]["nodeName"]})
        job = await env.api.wait_job(
            NS, "lostnode", lambda j: phase(j) == "Running" and placement_of(j)["epoch"] > epoch, timeout=60,
            what="running again at a new epoch")
        entry = history(job, "FailurePolicy")[0]
        assert "default (node lost): Ignore" in entry["message"] and "not counted" in entry["message"], entry
        assert "NodeLost" in entry["message"]
        assert not job["status"].get("requeues") and placement_of(job)["cluster"] == CLUSTER


async def test_oom_killed_and_an_image_pull_error_fail_the_job_with_the_members_message(tmp_path: Path) -> None:
    async with lifecycle_env(tmp_path, [CLUSTER], run_seconds=None) as env:
        oom = policy_job("oom", restart_policy="OnFailure", worker_annotations={
            ANNOTATION_FAIL_AFTER: "0.5", ANNOTATION_EXIT_REASON: "OOMKilled"})
        del oom["spec"]["failurePolicy"]  # the defaults apply to every job
        await env.api.submit(oom)
        await env.api.submit(policy_job("nopull", worker_annotations={
            ANNOTATION_IMAGE_PULL_ERROR: "rpc error: code = NotFound desc = manifest unknown"}))
        job = await _failed(env, "oom")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "PodFailurePolicy", failed
        assert "OOMKilled (exit code 137)" in failed["message"] and "default (OOMKilled" in failed["message"]
        assert not history(job, "PodRestarted")  # OnFailure, yet not retried at the same size
        job = await _failed(env, "nopull")
        failed = condition(job, "Failed")
        assert failed is not None and failed["reason"] == "PodFailurePolicy", failed
        # the hub may first see ErrImagePull or, on a loaded machine, already ImagePullBackOff (kube's words both)
        assert ('ErrImagePull: Failed to pull image "trainer:1.4": rpc error: code = NotFound' in failed["message"]
                or 'ImagePullBackOff: Back-off pulling image "trainer:1.4"' in failed["message"]), failed
        assert "default (image pull error): FailJob" in failed["message"]


def test_policy_verdict_orders_the_gangs_failures() -> None:
    job = policy_job("pure", rules=[{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}],
                     restart_policy="OnFailure")
    job["metadata"]["uid"] = "u1"

    def pod(name: str, role: str, status: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {LABEL_ROLE: role}, "annotations": {}},
                "status": status}

    def exited(code: int, reason: str = "Error") -> dict[str, Any]:
        return {"phase": "Failed", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": code, "reason": reason}}}]}

    running = pod("ps-0", "ps", {"phase": "Running"})
    assert policy_verdict(job, [running]) is None
    # the defaults apply to a job without spec.failurePolicy: anything else is counted, a lost node is not
    no_policy = aimed_job("x", CLUSTER)
    counted = policy_verdict(no_policy, [pod("w-0", "worker", exited(3))])
    assert counted is not None and counted.outcome is GangOutcome.PER_POD and not counted.uncounted
    assert counted.notes["w-0"] == "default (other failure): Count"
    lost = policy_verdict(no_policy, [pod("w-0", "worker", {"phase": "Failed", "reason": "NodeLost"})])
    assert lost is not None and lost.outcome is GangOutcome.RESTART_GANG and not lost.counted
    oom = policy_verdict(no_policy, [pod("w-0", "worker", exited(137, "OOMKilled"))])
    assert oom is not None and oom.outcome is GangOutcome.FAIL and oom.pod == "w-0"
    per_pod = policy_verdict(job, [running, pod("w-0", "worker", exited(3)), pod("w-1", "worker", exited(9))])
    assert per_pod is not None and per_pod.outcome is GangOutcome.PER_POD and per_pod.uncounted == {"w-0"}
    assert per_pod.notes["w-1"] == "default (other failure): Count"
    # the ps role restarts no single pod: its ignored failure restarts the whole gang, not counted
    whole = policy_verdict(job, [pod("ps-0", "ps", exited(3)), pod("w-0", "worker", exited(9))])
    assert whole is not None and whole.outcome is GangOutcome.RESTART_GANG and not whole.counted
    # FailJob (OOM) over Requeue (GPU fault) over the rest, whatever the pods' order
    gpu = {**exited(134), "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 134, "reason": "Error", "message": "GPU-1 (Xid 79: GPU has fallen off the bus)"}}}]}
    worst = policy_verdict(job, [pod("a", "worker", gpu), pod("b", "worker", exited(137, "OOMKilled"))])
    assert worst is not None and worst.outcome is GangOutcome.FAIL and worst.pod == "b"
    moved = policy_verdict(job, [pod("a", "worker", gpu), pod("b", "ps", exited(3))])
    assert moved is not None and moved.outcome is GangOutcome.REQUEUE and moved.pod == "a"
    # deleting pods are not judged; a Pending pod counts only when its image cannot be pulled
    gone = pod("c", "worker", exited(137, "OOMKilled"))
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pending = pod("d", "worker", {"phase": "Pending", "containerStatuses": [
        {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]})
    assert policy_verdict(job, [gone, pending]) is None
