"""How pods fail in the simulator, field by field, as a hub reads them: a
lost node (NodeLost plus the taint manager's DisruptionTarget), a deleted
node (PodGC's DisruptionTarget, then gone), GPUs that go unhealthy under a
running pod (its container crashes; allocatedResourcesStatus says which GPU)
or before a pod starts (kube's device-manager admission error), a container
that exits non-zero (restartPolicy Never: Failed; OnFailure: restarted in
place with restartCount and CrashLoopBackOff), hostile status writes, and
what kubectl shows for each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient
from simapi_support import ThreadedSim, raw_request, wait_for
from test_kubectl import Kubectl
from test_scheduler import start

from federator.apiserver.errors import ApiError
from federator.sim import kinds
from federator.apis.failurepolicy import FailureAction, match_pod_failure
from federator.sim.kubelet import (
    ANNOTATION_EXIT_CODE,
    ANNOTATION_EXIT_REASON,
    ANNOTATION_FAIL_AFTER,
    ANNOTATION_IMAGE_PULL_ERROR,
    ANNOTATION_START_DELAY,
    fail_node,
    gpu_device_ids,
    set_unhealthy_gpus,
)
from federator.sim.profile import ClusterProfile, ProfileError, parse_profile
from federator.sim.server import SimCluster

JSON = dict[str, Any]
WAIT = 30.0  # an upper bound for a loaded machine; every wait ends on its event


def profile(*, nodes: int = 2, backoff: float = 0.2, name: str = "failures") -> ClusterProfile:
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "on-prem", "region": "lab"},
        "network": {"fabric": "infiniband", "bandwidthGbps": 200},
        "schedulers": [{"type": "default"}],
        "kubelet": {"startDelaySeconds": 0.05, "terminationSeconds": 0.05, "crashLoopBackoffSeconds": backoff},
        "nodePools": [{"name": "gpu", "count": nodes, "cpu": "32", "memory": "256Gi", "gpus": 8,
                       "gpuProduct": "A100-SXM4-80GB"}],
    })


def pod(name: str, *, gpus: int = 1, node: str | None = None, restart_policy: str = "Never",
        annotations: dict[str, str] | None = None, namespace: str = "team") -> JSON:
    spec: JSON = {"restartPolicy": restart_policy, "containers": [
        {"name": "main", "image": "trainer:1.4",
         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                       "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}, "spec": spec}


async def get(cluster: SimCluster, name: str) -> JSON:
    return await cluster.storage.get(kinds.PODS, namespace="team", name=name)


def in_phase(cluster: SimCluster, name: str, phase: str) -> Any:
    async def check() -> JSON | None:
        p = await get(cluster, name)
        return p if p["status"].get("phase") == phase else None
    return check


def condition(p: JSON, type_: str) -> JSON | None:
    return next((c for c in p["status"].get("conditions") or [] if c["type"] == type_), None)


def gpus_of(p: JSON) -> dict[str, str]:
    """resourceID -> health from the pod's allocatedResourcesStatus."""
    out = {}
    for cs in p["status"].get("containerStatuses") or []:
        for rs in cs.get("allocatedResourcesStatus") or []:
            assert rs["name"] == "nvidia.com/gpu"
            out.update({r["resourceID"]: r["health"] for r in rs["resources"]})
    return out


def decode(p: JSON) -> Any:
    """What the official client makes of it (it must accept every field we serve)."""
    return ApiClient().deserialize(json.dumps(p), "V1Pod", "application/json")


async def test_a_lost_nodes_pods_fail_with_node_lost_and_the_taint_managers_condition() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("w0", gpus=4, node="gpu-0000"), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("w1", gpus=4, node="gpu-0001"), namespace="team")
        await wait_for("w0 running", in_phase(cluster, "w0", "Running"), timeout=WAIT)
        await wait_for("w1 running", in_phase(cluster, "w1", "Running"), timeout=WAIT)
        await fail_node(cluster.storage, cluster.registry, node="gpu-0000")
        lost = await wait_for("w0 failed", in_phase(cluster, "w0", "Failed"), timeout=WAIT)
        st = lost["status"]
        assert st["reason"] == "NodeLost"
        assert st["message"] == "Node gpu-0000 which was running pod w0 is unresponsive"
        disruption = condition(lost, "DisruptionTarget")
        assert disruption is not None and disruption["status"] == "True"
        assert disruption["reason"] == "DeletionByTaintManager"
        assert disruption["message"] == "Taint manager: deleting due to NoExecute taint"
        (cs,) = st["containerStatuses"]
        assert cs["state"]["terminated"]["exitCode"] == 137 and cs["state"]["terminated"]["reason"] == "NodeLost"
        assert list(gpus_of(lost).values()) == ["Healthy"] * 4  # it held its GPUs; they did not fail
        assert decode(lost).status.conditions[-1].type == "DisruptionTarget"
        assert (await get(cluster, "w1"))["status"]["phase"] == "Running"
        # a finished pod has no grace: the hub can delete it at once and reuse the name, even on the dead node
        await cluster.storage.delete(kinds.PODS, namespace="team", name="w0")
        await cluster.storage.create(kinds.PODS, pod("w0", gpus=4), namespace="team")
        again = await wait_for("w0 again, elsewhere", in_phase(cluster, "w0", "Running"), timeout=WAIT)
        assert again["spec"]["nodeName"] == "gpu-0001"
    finally:
        await cluster.stop()


async def test_a_deleted_nodes_pods_are_failed_then_removed_as_pod_gc_does() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("gone", node="gpu-0000"), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("stays", node="gpu-0001"), namespace="team")
        await wait_for("gone running", in_phase(cluster, "gone", "Running"), timeout=WAIT)
        await wait_for("stays running", in_phase(cluster, "stays", "Running"), timeout=WAIT)
        listed = await cluster.storage.list(kinds.PODS, namespace="team")
        seen: list[tuple[str, JSON]] = []

        async def watch() -> None:
            async for ev in cluster.storage.watch(kinds.PODS, namespace="team",
                                                  resource_version=listed.resource_version):
                if ev.type != "BOOKMARK" and ev.object["metadata"]["name"] == "gone":
                    seen.append((ev.type, ev.object))
                    if ev.type == "DELETED":
                        return

        watching = asyncio.create_task(watch())
        await cluster.storage.delete(kinds.NODES, namespace=None, name="gpu-0000")
        await asyncio.wait_for(watching, WAIT)
        failed = next(obj for type_, obj in seen if obj["status"].get("phase") == "Failed")
        disruption = condition(failed, "DisruptionTarget")
        assert disruption is not None and disruption["reason"] == "DeletionByPodGC"
        assert disruption["message"] == "PodGC: node no longer exists"
        assert seen[-1][0] == "DELETED"
        assert (await get(cluster, "stays"))["status"]["phase"] == "Running"
    finally:
        await cluster.stop()


async def test_unhealthy_gpus_crash_the_pods_on_them_and_reject_pods_that_find_too_few() -> None:
    cluster = await start(profile(nodes=1))
    ids = gpu_device_ids("gpu-0000", 8)
    try:
        await cluster.storage.create(kinds.PODS, pod("a", gpus=4), namespace="team")
        a = await wait_for("a running", in_phase(cluster, "a", "Running"), timeout=WAIT)
        assert gpus_of(a) == {i: "Healthy" for i in ids[:4]}  # the lowest-numbered free GPUs
        await cluster.storage.create(kinds.PODS, pod("b", gpus=4), namespace="team")
        b = await wait_for("b running", in_phase(cluster, "b", "Running"), timeout=WAIT)
        assert gpus_of(b) == {i: "Healthy" for i in ids[4:]}
        await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=1)
        crashed = await wait_for("a crashed", in_phase(cluster, "a", "Failed"), timeout=WAIT)
        (cs,) = crashed["status"]["containerStatuses"]
        term = cs["state"]["terminated"]
        assert term["exitCode"] == 134 and term["reason"] == "Error"
        assert ids[0] in term["message"] and "unhealthy" in term["message"]
        assert cs["restartCount"] == 0
        assert gpus_of(crashed) == {ids[0]: "Unhealthy", **{i: "Healthy" for i in ids[1:4]}}
        assert condition(crashed, "DisruptionTarget") is None  # a crash, not an eviction
        assert "reason" not in crashed["status"]
        decoded = decode(crashed)
        assert decoded.status.container_statuses[0].allocated_resources_status[0].resources[0].health == "Unhealthy"
        assert (await get(cluster, "b"))["status"]["phase"] == "Running"
        # 8 GPUs, 1 unhealthy, 4 held by b: a pod bound here asking for 8 is refused at admission
        await cluster.storage.create(kinds.PODS, pod("greedy", gpus=8, node="gpu-0000"), namespace="team")
        refused = await wait_for("greedy refused", in_phase(cluster, "greedy", "Failed"), timeout=WAIT)
        assert refused["status"]["reason"] == "UnexpectedAdmissionError"
        assert refused["status"]["message"] == (
            "Pod was rejected: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
            "Requested: 8, Available: 3, which is unexpected")
        assert not refused["status"].get("containerStatuses")
        # three healthy free GPUs: a pod asking for three gets exactly those
        await cluster.storage.create(kinds.PODS, pod("fits", gpus=3, node="gpu-0000"), namespace="team")
        fits = await wait_for("fits running", in_phase(cluster, "fits", "Running"), timeout=WAIT)
        assert gpus_of(fits) == {i: "Healthy" for i in ids[1:4]}
    finally:
        await cluster.stop()


async def test_a_failed_container_fails_the_pod_under_never_and_restarts_in_place_under_on_failure() -> None:
    cluster = await start(profile(backoff=0.2))
    fail = {ANNOTATION_FAIL_AFTER: "0.1", ANNOTATION_EXIT_CODE: "3"}
    try:
        await cluster.storage.create(kinds.PODS, pod("once", annotations=fail), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("loop", annotations=fail, restart_policy="OnFailure"),
                                     namespace="team")
        once = await wait_for("once failed", in_phase(cluster, "once", "Failed"), timeout=WAIT)
        (cs,) = once["status"]["containerStatuses"]
        assert cs["state"]["terminated"]["exitCode"] == 3 and cs["state"]["terminated"]["reason"] == "Error"
        assert cs["restartCount"] == 0 and "reason" not in once["status"]

        async def restarted_twice() -> JSON | None:
            p = await get(cluster, "loop")
            (c,) = p["status"]["containerStatuses"]
            return p if c["restartCount"] >= 2 else None

        loop = await wait_for("two restarts", restarted_twice, timeout=WAIT)
        assert loop["status"]["phase"] == "Running"  # a restarting pod never fails under OnFailure
        (cs,) = loop["status"]["containerStatuses"]
        last = cs["lastState"]["terminated"]
        assert last["exitCode"] == 3 and last["reason"] == "Error"
        if "waiting" in cs["state"]:
            assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            assert cs["state"]["waiting"]["message"].startswith("back-off ")
            assert "restarting failed container=main pod=loop_team(" in cs["state"]["waiting"]["message"]
        else:
            assert "running" in cs["state"]
        assert decode(loop).status.container_statuses[0].restart_count >= 2
    finally:
        await cluster.stop()


async def test_hostile_status_writes_do_not_move_gpus_or_stop_the_kubelet() -> None:
    cluster = await start(profile(nodes=1))
    ids = gpu_device_ids("gpu-0000", 8)
    try:
        await cluster.storage.create(kinds.PODS, pod("victim", gpus=2), namespace="team")
        victim = await wait_for("victim running", in_phase(cluster, "victim", "Running"), timeout=WAIT)
        assert set(gpus_of(victim)) == set(ids[:2])

        def forge(resources: list[Any]) -> Any:
            def mutate(obj: JSON) -> JSON:
                cs = obj["status"]["containerStatuses"][0]
                cs["allocatedResourcesStatus"] = [{"name": "nvidia.com/gpu", "resources": resources}]
                return obj
            return mutate

        # malformed: refused in the official client's words, nothing changes
        with pytest.raises(ApiError) as err:
            await cluster.storage.guaranteed_update(kinds.PODS, namespace="team", name="victim",
                                                    mutate=forge([{"resourceID": 7}, "junk"]), subresource="status")
        assert err.value.code == 422 and "allocatedResourcesStatus[0].resources[0].resourceID" in err.value.message
        assert gpus_of(await get(cluster, "victim")) == gpus_of(victim)
        # well-formed but forged: stored (a status writer may write it), and ignored by the kubelet
        await cluster.storage.guaranteed_update(kinds.PODS, namespace="team", name="victim",
                                                mutate=forge([{"resourceID": "GPU-forged", "health": "Healthy"}]),
                                                subresource="status")
        # the kubelet keeps its own record: the next pod does not get the victim's GPUs
        await cluster.storage.create(kinds.PODS, pod("next", gpus=2), namespace="team")
        nxt = await wait_for("next running", in_phase(cluster, "next", "Running"), timeout=WAIT)
        assert set(gpus_of(nxt)) == set(ids[2:4])
        # and a fault on the victim's real GPU still reaches it
        await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=1)
        crashed = await wait_for("victim crashed", in_phase(cluster, "victim", "Failed"), timeout=WAIT)
        assert gpus_of(crashed)[ids[0]] == "Unhealthy"
        assert (await get(cluster, "next"))["status"]["phase"] == "Running"
    finally:
        await cluster.stop()


@pytest.mark.parametrize("bad", [-1, 301, "soon", None, [1]])
def test_crash_loop_backoff_must_be_a_sane_number_of_seconds(bad: Any) -> None:
    data = profile().model_dump(by_alias=True, mode="json", exclude_none=True)
    data["kubelet"]["crashLoopBackoffSeconds"] = bad
    with pytest.raises(ProfileError, match="crashLoopBackoffSeconds"):
        parse_profile(data)


# ---------------------------------------------------------------- what kubectl shows


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ThreadedSim]:
    sim = ThreadedSim(profile(nodes=3, name="failures-kubectl"), tmp_path).start()
    try:
        yield sim
    finally:
        sim.stop()


def test_kubectl_shows_each_failure(lab: ThreadedSim, tmp_path: Path) -> None:
    ns = lab.new_namespace("fail")
    fail = {ANNOTATION_FAIL_AFTER: "0.1"}

    async def setup() -> None:
        create = lab.c.storage.create
        await create(kinds.PODS, pod("lost", node="gpu-0000", namespace=ns), namespace=ns)
        await create(kinds.PODS, pod("error", node="gpu-0001", annotations=fail, namespace=ns), namespace=ns)
        await create(kinds.PODS, pod("looping", node="gpu-0001", annotations=fail, restart_policy="OnFailure",
                                     namespace=ns), namespace=ns)
        await create(kinds.PODS, pod("gpu", gpus=8, node="gpu-0002", namespace=ns), namespace=ns)

    lab.run(setup)

    async def running(name: str) -> bool:
        p = await lab.c.storage.get(kinds.PODS, namespace=ns, name=name)
        return bool(p["status"].get("phase") == "Running")

    lab.run(lambda: wait_for("lost running", lambda: running("lost"), timeout=WAIT), timeout=WAIT + 5)
    lab.run(lambda: wait_for("gpu running", lambda: running("gpu"), timeout=WAIT), timeout=WAIT + 5)
    status, _ = raw_request(lab, "POST", "/_sim/faults/node-failure", json.dumps({"node": "gpu-0000"}).encode())
    assert status == 200
    status, _ = raw_request(lab, "POST", "/_sim/faults/gpu-unhealthy",
                            json.dumps({"node": "gpu-0002", "count": 2}).encode())
    assert status == 200

    async def rejected() -> None:
        await lab.c.storage.create(kinds.PODS, pod("refused", gpus=8, node="gpu-0002", namespace=ns,
                                                   annotations={ANNOTATION_START_DELAY: "0"}), namespace=ns)

    async def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in (await lab.c.storage.list(kinds.PODS, namespace=ns)).items}
        restarts = pods["looping"]["status"].get("containerStatuses") or [{}]
        return all(pods[n]["status"].get("phase") == "Failed" for n in ("lost", "error", "gpu")) \
            and int(restarts[0].get("restartCount") or 0) >= 1

    lab.run(lambda: wait_for("every failure shown", settled, timeout=WAIT), timeout=WAIT + 5)
    lab.run(rejected)

    async def refused() -> bool:
        p = await lab.c.storage.get(kinds.PODS, namespace=ns, name="refused")
        return bool(p["status"].get("phase") == "Failed")

    lab.run(lambda: wait_for("refused", refused, timeout=WAIT), timeout=WAIT + 5)
    kubectl = Kubectl(lab.kubeconfig, tmp_path / "home")
    rows = {line.split()[0]: line.split() for line in
            kubectl("get", "pods", "-n", ns, "--no-headers").stdout.splitlines()}
    # NAME READY STATUS RESTARTS AGE
    assert rows["lost"][2] == "NodeLost"
    assert rows["error"][2] == "Error"
    assert rows["gpu"][2] == "Error"
    assert rows["refused"][2] == "UnexpectedAdmissionError"
    assert rows["looping"][2] in ("CrashLoopBackOff", "Running") and int(rows["looping"][3]) >= 1


async def test_an_oom_killed_container_and_an_image_that_cannot_be_pulled_as_kube_shows_them() -> None:
    """The failures spec.failurePolicy's defaults read (federator/apis/failurepolicy.py), as the simulator shows
    them: the OOM killer (reason OOMKilled, exit code 137) and an image pull error (the pod stays Pending,
    ErrImagePull then ImagePullBackOff); the defaults fail the job on both."""
    cluster = await start(profile(backoff=0.2))
    oom = {ANNOTATION_FAIL_AFTER: "0.1", ANNOTATION_EXIT_REASON: "OOMKilled", ANNOTATION_EXIT_CODE: "3"}
    try:
        await cluster.storage.create(kinds.PODS, pod("oom", annotations=oom), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("plain", annotations={ANNOTATION_FAIL_AFTER: "0.1"}),
                                     namespace="team")
        killed = await wait_for("oom failed", in_phase(cluster, "oom", "Failed"), timeout=WAIT)
        (cs,) = killed["status"]["containerStatuses"]
        assert cs["state"]["terminated"]["reason"] == "OOMKilled" and cs["state"]["terminated"]["exitCode"] == 137
        assert decode(killed).status.container_statuses[0].state.terminated.reason == "OOMKilled"
        match = match_pod_failure({}, killed["status"])
        assert (match.action, match.rule) == (FailureAction.FAIL_JOB, None) and "OOMKilled" in match.why
        plain = await wait_for("plain failed", in_phase(cluster, "plain", "Failed"), timeout=WAIT)
        assert plain["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"
        assert match_pod_failure({}, plain["status"]).action is FailureAction.COUNT

        bad = {ANNOTATION_IMAGE_PULL_ERROR: "rpc error: code = NotFound desc = manifest unknown"}
        await cluster.storage.create(kinds.PODS, pod("nopull", annotations=bad), namespace="team")

        def waiting(reason: str) -> Any:
            async def check() -> JSON | None:
                p = await get(cluster, "nopull")
                states = [cs.get("state") or {} for cs in p["status"].get("containerStatuses") or []]
                return p if states and states[0].get("waiting", {}).get("reason") == reason else None
            return check

        first = await wait_for("ErrImagePull", waiting("ErrImagePull"), timeout=WAIT)
        assert first["status"]["phase"] == "Pending" and first["spec"]["nodeName"]
        assert first["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == (
            'Failed to pull image "trainer:1.4": rpc error: code = NotFound desc = manifest unknown')
        assert match_pod_failure({}, first["status"]).action is FailureAction.FAIL_JOB
        later = await wait_for("ImagePullBackOff", waiting("ImagePullBackOff"), timeout=WAIT)
        assert later["status"]["phase"] == "Pending"
        assert later["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == (
            'Back-off pulling image "trainer:1.4"')
        assert decode(later).status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    finally:
        await cluster.stop()


async def test_the_failure_policy_defaults_read_a_lost_node_and_a_gpu_fault() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("lost", gpus=4, node="gpu-0000"), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("gpu", gpus=4, node="gpu-0001"), namespace="team")
        await wait_for("lost running", in_phase(cluster, "lost", "Running"), timeout=WAIT)
        await wait_for("gpu running", in_phase(cluster, "gpu", "Running"), timeout=WAIT)
        await fail_node(cluster.storage, cluster.registry, node="gpu-0000")
        await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0001", count=1)
        lost = await wait_for("lost failed", in_phase(cluster, "lost", "Failed"), timeout=WAIT)
        crashed = await wait_for("gpu failed", in_phase(cluster, "gpu", "Failed"), timeout=WAIT)
        assert match_pod_failure({}, lost["status"]).action is FailureAction.IGNORE
        fault = match_pod_failure({}, crashed["status"])
        assert (fault.action, fault.why) == (FailureAction.REQUEUE, "GPU fault")
        # a rule comes first: exit code 134 In [134] -> FailJob; DisruptionTarget -> Count
        policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [134]}},
                            {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        assert match_pod_failure(policy, crashed["status"]).describe() == (
            "spec.failurePolicy.rules[0] (exit code 134 In [134]): FailJob")
        assert match_pod_failure(policy, lost["status"]).describe() == (
            "spec.failurePolicy.rules[1] (condition DisruptionTarget=True): Count")
    finally:
        await cluster.stop()
