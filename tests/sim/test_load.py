"""Background load: what one arrival creates (pure), and the running loop in
a real SimCluster: pods (and gangs) come, run, go; the cap holds; other
namespaces are never touched."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from federator.sim import kinds
from federator.sim.kubelet import ANNOTATION_DURATION
from federator.sim.load import LOAD_LABEL, RECONCILE_SECONDS, plan_arrival
from federator.sim.profile import ClusterProfile, ProfileError, parse_profile
from federator.sim.scheduler import COSCHEDULING, KUBE_BATCH, VOLCANO
from federator.sim.server import SimCluster


def profile(*, scheduler: str = "default", schedulers: list[str] | None = None, rate: float = 600,
            max_pods: int = 6, shapes: list[dict[str, Any]] | None = None, name: str = "load-lab") -> ClusterProfile:
    return parse_profile({
        "apiVersion": "sim.federator.dev/v1alpha1", "kind": "ClusterProfile", "name": name,
        "location": {"type": "cloud", "provider": "aws", "region": "eu-west-1"},
        "network": {"fabric": "ethernet", "bandwidthGbps": 50},
        "schedulers": [{"type": t} for t in (schedulers or ["default"])],
        "kubelet": {"startDelaySeconds": 0.02, "terminationSeconds": 0.02},
        "nodePools": [{"name": "l4", "count": 2, "cpu": "48", "memory": "192Gi", "gpus": 4,
                       "gpuProduct": "NVIDIA-L4"}],
        "backgroundLoad": {"arrivalsPerMinute": rate, "lifetimeSecondsMin": 0.2, "lifetimeSecondsMax": 0.6,
                           "maxPods": max_pods, "scheduler": scheduler,
                           "shapes": shapes or [{"cpu": "2", "memory": "4Gi", "weight": 3},
                                                {"cpu": "4", "memory": "8Gi", "gpus": 1, "weight": 1}]},
    })


async def wait_for(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def test_plan_arrival_single_pod_shape() -> None:
    prof = profile(shapes=[{"cpu": "4", "memory": "8Gi", "gpus": 1, "rdmaHca": 1}])
    assert prof.background_load is not None
    plan = plan_arrival(cluster=prof, load=prof.background_load, rng=random.Random(1), serial=7)
    assert plan.group is None
    (pod,) = plan.pods
    assert pod["metadata"]["namespace"] == "sim-background"
    assert pod["metadata"]["labels"] == {LOAD_LABEL: "true"}
    assert 0.2 <= float(pod["metadata"]["annotations"][ANNOTATION_DURATION]) <= 0.6
    spec = pod["spec"]
    assert spec["schedulerName"] == "default-scheduler" and spec["restartPolicy"] == "Never"
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1",
                                                               "rdma/hca": "1"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_plan_arrival_gangs_per_scheduler_kind() -> None:
    for sched, kind in (("volcano", VOLCANO), ("coscheduling", COSCHEDULING), ("kube-batch", KUBE_BATCH)):
        prof = profile(scheduler="gang", schedulers=[sched, "default"], shapes=[{"cpu": "1", "gangSize": 3}])
        assert prof.background_load is not None
        plan = plan_arrival(cluster=prof, load=prof.background_load, rng=random.Random(2), serial=1)
        assert plan.group is not None and plan.group["spec"]["minMember"] == 3
        assert plan.group["apiVersion"] == f"{kind.group}/{kind.version}"
        assert len(plan.pods) == 3
        name = plan.group["metadata"]["name"]
        assert all(kind.group_of(p) == name for p in plan.pods)
        assert {p["spec"]["schedulerName"] for p in plan.pods} == {prof.gang_schedulers[0].name}


def test_profile_rejects_load_without_its_scheduler() -> None:
    import pytest

    with pytest.raises(ProfileError, match="no default scheduler"):
        profile(scheduler="default", schedulers=["volcano"])
    with pytest.raises(ProfileError, match="no gang scheduler"):
        profile(scheduler="gang", schedulers=["default"])


async def _load_pods(cluster: SimCluster) -> list[dict[str, Any]]:
    return (await cluster.storage.list(kinds.PODS, namespace="sim-background")).items


async def test_load_comes_and_goes_within_its_cap() -> None:
    cluster = SimCluster(profile(max_pods=6))
    await cluster.start()
    try:
        # a bystander pod in another namespace is never touched
        await cluster.storage.create(kinds.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine"},
                                                  "spec": {"restartPolicy": "Never",
                                                           "containers": [{"name": "c", "image": "x"}]}},
                                     namespace="default")
        seen: set[str] = set()
        gone: set[str] = set()
        peak = 0

        async def churned() -> bool:
            nonlocal peak
            pods = await _load_pods(cluster)
            names = {p["metadata"]["name"] for p in pods}
            gone.update(seen - names)
            seen.update(names)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            peak = max(peak, len(live))
            return len(gone) >= 4

        await wait_for("load pods to come and go", churned, timeout=30)
        assert peak <= 6
        assert all(p["metadata"]["labels"][LOAD_LABEL] == "true" for p in await _load_pods(cluster))
        mine = await cluster.storage.get(kinds.PODS, namespace="default", name="mine")
        assert mine["metadata"]["name"] == "mine"

        async def some_ran() -> bool:
            pods = await _load_pods(cluster)
            return any(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)

        await wait_for("a load pod to run", some_ran)
    finally:
        await cluster.stop()


async def test_gang_load_creates_and_cleans_podgroups() -> None:
    prof = profile(scheduler="gang", schedulers=["volcano", "default"], rate=300, max_pods=6,
                   shapes=[{"cpu": "1", "memory": "1Gi", "gangSize": 2}], name="load-gang")
    cluster = SimCluster(prof)
    await cluster.start()
    try:
        groups_seen: set[str] = set()
        groups_gone: set[str] = set()

        async def churned() -> bool:
            groups = (await cluster.storage.list(kinds.VOLCANO_PODGROUPS, namespace="sim-background")).items
            names = {g["metadata"]["name"] for g in groups}
            groups_gone.update(groups_seen - names)
            groups_seen.update(names)
            return len(groups_gone) >= 2

        await wait_for("load gangs to come and go", churned, timeout=30 + 3 * RECONCILE_SECONDS)

        async def a_gang_ran() -> bool:
            groups = (await cluster.storage.list(kinds.VOLCANO_PODGROUPS, namespace="sim-background")).items
            return any((g.get("status") or {}).get("phase") in ("Running", "Completed", "Inqueue") for g in groups)

        await wait_for("a load gang scheduled", a_gang_ran, timeout=30)
    finally:
        await cluster.stop()
