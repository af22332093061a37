"""The simulated kubelet in a real SimCluster: start delay, duration and
failure annotations, NodeLost on node failure, graceful deletes (and why
they wait for a dead node), unhealthy GPUs, restart with running pods."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient

from federator.apiserver.errors import ApiError
from federator.obs import get_logger
from federator.sim import kinds
from federator.sim.kubelet import (
    ANNOTATION_DURATION,
    ANNOTATION_EXIT_CODE,
    ANNOTATION_FAIL_AFTER,
    ANNOTATION_START_DELAY,
    ANNOTATION_TERMINATION,
    ANNOTATION_UNHEALTHY_GPUS,
    fail_node,
    recover_node,
    run_kubelet,
    set_unhealthy_gpus,
)
from federator.sim.profile import ClusterProfile, parse_profile
from federator.sim.server import SimCluster


def profile(*, nodes: int = 2, start_delay: float = 0.05, default_run: float | None = None) -> ClusterProfile:
    kubelet: dict[str, Any] = {"startDelaySeconds": start_delay, "terminationSeconds": 0.05}
    if default_run is not None:
        kubelet["defaultRunSeconds"] = default_run
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": "test-kubelet",
        "location": {"type": "cloud", "provider": "gcp", "region": "r1"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 100},
        "schedulers": [{"type": "default"}],
        "kubelet": kubelet,
        "nodePools": [{"name": "gpu", "count": nodes, "cpu": "32", "memory": "256Gi", "gpus": 8,
                       "gpuProduct": "H100-80GB-HBM3"}],
    })


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def pod(name: str, *, gpus: int = 1, annotations: dict[str, str] | None = None, node: str | None = None,
        restart_policy: str = "Never", grace: int = 30) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy, "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": "trainer:1.4",
                        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "annotations": dict(annotations or {})}, "spec": spec}


async def start(prof: ClusterProfile, **kw: Any) -> SimCluster:
    cluster = SimCluster(prof, **kw)
    await cluster.start()
    await cluster.storage.create(kinds.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "team"}}, namespace=None)
    return cluster


async def get(cluster: SimCluster, name: str) -> dict[str, Any]:
    return await cluster.storage.get(kinds.PODS, namespace="team", name=name)


async def phase_is(cluster: SimCluster, name: str, phase: str) -> dict[str, Any] | None:
    p = await get(cluster, name)
    return p if p.get("status", {}).get("phase") == phase else None


async def test_pod_runs_then_succeeds_with_full_status() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("ok", annotations={ANNOTATION_DURATION: "2"}),
                                     namespace="team")
        running = await wait_for("Running", lambda: phase_is(cluster, "ok", "Running"))
        st = running["status"]
        assert st["startTime"] and st["podIP"] and st["hostIP"].startswith("10.")
        (cs,) = st["containerStatuses"]
        assert cs["ready"] and "running" in cs["state"] and cs["restartCount"] == 0
        assert {c["type"] for c in st["conditions"] if c["status"] == "True"} >= {"Ready", "PodScheduled"}
        done = await wait_for("Succeeded", lambda: phase_is(cluster, "ok", "Succeeded"))
        term = done["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 0 and term["reason"] == "Completed"
        # the official client accepts what we serve
        decoded = ApiClient().deserialize(__import__("json").dumps(done), "V1Pod", "application/json")
        assert decoded.status.phase == "Succeeded"
    finally:
        await cluster.stop()


async def test_fail_after_annotation_and_exit_code() -> None:
    cluster = await start(profile())
    try:
        await cluster.storage.create(kinds.PODS, pod("bad", annotations={
            ANNOTATION_FAIL_AFTER: "0.1", ANNOTATION_DURATION: "60", ANNOTATION_EXIT_CODE: "3"}), namespace="team")
        failed = await wait_for("Failed", lambda: phase_is(cluster, "bad", "Failed"))
        term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
        assert term["exitCode"] == 3 and term["reason"] == "Error"
    finally:
        await cluster.stop()


async def test_start_delay_and_default_run_and_malformed_annotations() -> None:
    cluster = await start(profile(start_delay=30, default_run=0.2))
    try:
        # the pod's own start delay overrides the profile's 30 s
        await cluster.storage.create(kinds.PODS, pod("quick", annotations={ANNOTATION_START_DELAY: "0"}),
                                     namespace="team")
        # restartPolicy Never: the profile's default run time applies
        await wait_for("Succeeded by default run time", lambda: phase_is(cluster, "quick", "Succeeded"))
        await cluster.storage.create(kinds.PODS, pod("slow"), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("junk", annotations={
            ANNOTATION_START_DELAY: "0", ANNOTATION_DURATION: "soon", ANNOTATION_FAIL_AFTER: "-1"},
            restart_policy="Always"), namespace="team")
        # malformed annotations are ignored: runs (restartPolicy Always: no default end)
        await wait_for("junk Running", lambda: phase_is(cluster, "junk", "Running"))
        slow = await get(cluster, "slow")
        assert slow["spec"].get("nodeName") and slow["status"]["phase"] == "Pending"  # waiting its 30 s
    finally:
        await cluster.stop()


async def test_node_failure_fails_its_pods_and_blocks_deletes_until_recovery() -> None:
    cluster = await start(profile(nodes=2))
    try:
        for name in ("a", "b"):
            await cluster.storage.create(kinds.PODS, pod(name, gpus=8), namespace="team")
        await wait_for("both Running", lambda: _all_phase(cluster, ["a", "b"], "Running"))
        victim = (await get(cluster, "a"))["spec"]["nodeName"]
        await cluster.storage.create(kinds.PODS, pod("pending-there", gpus=0, node=victim,
                                                     annotations={ANNOTATION_START_DELAY: "60"}), namespace="team")
        await wait_for("bound", lambda: _bound(cluster, "pending-there"))
        await fail_node(cluster.storage, cluster.registry, node=victim)
        lost = await wait_for("a Failed", lambda: phase_is(cluster, "a", "Failed"))
        assert lost["status"]["reason"] == "NodeLost"
        assert lost["status"]["message"] == f"Node {victim} which was running pod a is unresponsive"
        await wait_for("the not-yet-started pod failed too", lambda: phase_is(cluster, "pending-there", "Failed"))
        assert (await get(cluster, "b"))["status"]["phase"] == "Running"
        node = await cluster.storage.get(kinds.NODES, namespace=None, name=victim)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
        assert {t["effect"] for t in node["spec"]["taints"] if t["key"] == "node.kubernetes.io/unreachable"} == \
            {"NoSchedule", "NoExecute"}
        # a new pod does not go to the failed node; a 9-GPU ask fits nowhere
        await cluster.storage.create(kinds.PODS, pod("c", gpus=8), namespace="team")
        c = await wait_for("c explained", lambda: _scheduled_condition(cluster, "c"))
        assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in c["message"]
        # a bound pod on a dead node stays Terminating: no kubelet to finish it
        await cluster.storage.delete(kinds.PODS, namespace="team", name="b", grace_period_seconds=30)
        await cluster.storage.create(kinds.PODS, pod("d", gpus=0, node=victim), namespace="team")
        await cluster.storage.delete(kinds.PODS, namespace="team", name="d", grace_period_seconds=30)
        await wait_for("b removed (healthy node)", lambda: _gone(cluster, "b"))
        d = await get(cluster, "d")
        assert d["metadata"].get("deletionTimestamp")
        await recover_node(cluster.storage, cluster.registry, node=victim)
        await wait_for("d removed once its node is back", lambda: _gone(cluster, "d"))
        await wait_for("c bound after recovery", lambda: _bound(cluster, "c"))
    finally:
        await cluster.stop()


async def test_unhealthy_gpus_lower_allocatable_and_scheduling_respects_it() -> None:
    cluster = await start(profile(nodes=1))
    try:
        node = await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=3)
        assert node is not None
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "5"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["annotations"][ANNOTATION_UNHEALTHY_GPUS] == "3"
        await cluster.storage.create(kinds.PODS, pod("eight", gpus=8), namespace="team")
        c = await wait_for("eight explained", lambda: _scheduled_condition(cluster, "eight"))
        assert c["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        await cluster.storage.create(kinds.PODS, pod("five", gpus=5), namespace="team")
        await wait_for("five bound", lambda: _bound(cluster, "five"))
        with pytest.raises(ValueError, match="has 8 GPUs"):
            await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=9)
        with pytest.raises(ValueError):
            await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=-1)
        with pytest.raises(ApiError) as err:
            await set_unhealthy_gpus(cluster.storage, cluster.registry, node="nope", count=1)
        assert err.value.code == 404
        healed = await set_unhealthy_gpus(cluster.storage, cluster.registry, node="gpu-0000", count=0)
        assert healed is not None and healed["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert ANNOTATION_UNHEALTHY_GPUS not in (healed["metadata"].get("annotations") or {})
    finally:
        await cluster.stop()


async def test_restarted_kubelet_finishes_pods_it_did_not_start() -> None:
    prof = profile(nodes=1)
    cluster = await start(prof, run_controllers=False)
    try:
        stop = asyncio.Event()
        task = asyncio.create_task(run_kubelet(storage=cluster.storage, registry=cluster.registry, cluster=prof,
                                               stop=stop, logger=get_logger("test")))
        await cluster.storage.create(kinds.PODS, pod("p", node="gpu-0000",
                                                     annotations={ANNOTATION_DURATION: "3"}), namespace="team")
        await wait_for("Running", lambda: phase_is(cluster, "p", "Running"))
        stop.set()
        await asyncio.wait_for(task, 10)
        stop2 = asyncio.Event()
        task2 = asyncio.create_task(run_kubelet(storage=cluster.storage, registry=cluster.registry, cluster=prof,
                                                stop=stop2, logger=get_logger("test")))
        try:
            await wait_for("Succeeded after the restart", lambda: phase_is(cluster, "p", "Succeeded"), timeout=15)
        finally:
            stop2.set()
            await asyncio.wait_for(task2, 10)
    finally:
        await cluster.stop()


async def test_a_pod_that_saves_stays_terminating_until_it_exits_or_its_grace_ends() -> None:
    """kube's graceful deletion: a pod whose containers take long to exit after SIGTERM (annotation
    termination-seconds) stays Terminating, phase Running, until they exit (the annotation brought forward to
    "0" on the terminating pod) or its grace period ends; a malformed annotation is the profile's time."""
    cluster = await start(profile(nodes=1))
    try:
        slow = {ANNOTATION_TERMINATION: "3600"}
        await cluster.storage.create(kinds.PODS, pod("saver", gpus=1, annotations=slow), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("capped", gpus=1, annotations=slow), namespace="team")
        await cluster.storage.create(kinds.PODS, pod("shortened", gpus=1, annotations=slow), namespace="team")
        for name, bad in (("quick", None), ("garbled", "soon"), ("negative", "-1"), ("huge", "1e400"),
                          ("long", "9" * 5000)):
            annotations = {ANNOTATION_TERMINATION: bad} if bad is not None else {}
            await cluster.storage.create(kinds.PODS, pod(name, gpus=0, annotations=annotations), namespace="team")
        names = ["saver", "capped", "shortened", "quick", "garbled", "negative", "huge", "long"]
        await wait_for("every pod Running", lambda: _all_phase(cluster, names, "Running"))
        await cluster.storage.delete(kinds.PODS, namespace="team", name="saver", grace_period_seconds=600)
        await cluster.storage.delete(kinds.PODS, namespace="team", name="capped", grace_period_seconds=1)
        await cluster.storage.delete(kinds.PODS, namespace="team", name="shortened", grace_period_seconds=600)
        # deleted after the saver: once these are gone, the kubelet has handled the saver's delete too
        for name in names[3:]:
            await cluster.storage.delete(kinds.PODS, namespace="team", name=name, grace_period_seconds=600)
        for name in names[3:]:
            await wait_for(f"{name} removed after the profile's termination time",
                           functools.partial(_gone, cluster, name))
        # the grace caps how long a pod may take: SIGKILL at its end
        await wait_for("capped removed at the end of its 1 s grace", lambda: _gone(cluster, "capped"))
        # a second delete with a shorter grace shortens it, as kube's does
        await cluster.storage.delete(kinds.PODS, namespace="team", name="shortened", grace_period_seconds=1)
        await wait_for("shortened removed at the end of its shortened grace", lambda: _gone(cluster, "shortened"))
        saving = await get(cluster, "saver")
        assert saving["metadata"]["deletionTimestamp"] and saving["metadata"]["deletionGracePeriodSeconds"] == 600
        assert saving["status"]["phase"] == "Running"
        # a later annotation never postpones; "0": its process saved and exited
        await _annotate(cluster, "saver", {ANNOTATION_TERMINATION: "7200", "note": "still saving"})
        assert (await get(cluster, "saver"))["metadata"]["annotations"]["note"] == "still saving"
        await _annotate(cluster, "saver", {ANNOTATION_TERMINATION: "0"})
        await wait_for("saver removed once it exited", lambda: _gone(cluster, "saver"))
    finally:
        await cluster.stop()


async def _annotate(cluster: SimCluster, name: str, annotations: dict[str, str]) -> None:
    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"].setdefault("annotations", {}).update(annotations)
        return obj

    await cluster.storage.guaranteed_update(kinds.PODS, namespace="team", name=name, mutate=mutate)


async def _all_phase(cluster: SimCluster, names: list[str], phase: str) -> bool:
    return all([await phase_is(cluster, n, phase) for n in names])


async def _bound(cluster: SimCluster, name: str) -> bool:
    return bool((await get(cluster, name))["spec"].get("nodeName"))


async def _gone(cluster: SimCluster, name: str) -> bool:
    try:
        await get(cluster, name)
    except ApiError as e:
        return e.code == 404
    return False


async def _scheduled_condition(cluster: SimCluster, name: str) -> dict[str, Any] | None:
    p = await get(cluster, name)
    return next((c for c in p.get("status", {}).get("conditions") or []
                 if c["type"] == "PodScheduled" and c["status"] == "False"), None)
